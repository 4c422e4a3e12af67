"""The engine's optimizing processes: planning the tables each group's scheduler picks, and
committing each process (`OptimizingProcess`) as soon as its last task's result is accepted
(on the `CommitRunner`'s thread), by the process's own retry policy and cleanup rule, with what
the table's state and users hear of it. Each process checks its own tasks' results."""

from __future__ import annotations

import logging

from pyiceberg.table import Table

from floe.api.table_properties import InvalidTableProperty
from floe.optimizing.catalog_access import CatalogAccess
from floe.optimizing.commit_runner import CommitRunner
from floe.optimizing.process import CommitStep, OptimizingProcess, ProcessState, ProcessTimeline
from floe.optimizing.refresher import TableRefresher
from floe.optimizing.registry import TableRegistry
from floe.optimizing.run_history import process_run
from floe.optimizing.specs import build_process
from floe.optimizing.table_state import TableRuntime
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingPlan
from floe.planning.planner import cap_plan, plan_optimizing
from floe.protocol.rewrite_task import OUT_OF_MEMORY
from floe.scheduling.group_scheduler import GroupScheduler
from floe.scheduling.records import ProcessOutcome
from floe.tables.catalog import TableAccessError
from floe.tables.history import optimizing_history
from floe.tables.scan import ScannedTable
from floe.tables.support import UnsupportedTableError, check_supported, scan_supported

log = logging.getLogger(__name__)

MIN_DELETE_MEMORY = 64 * 1024 * 1024


class ProcessRunner:
    """Plans, tracks and commits the engine's processes, by process id."""

    def __init__(
        self,
        registry: TableRegistry,
        catalogs: CatalogAccess,
        refresher: TableRefresher,
        committer: CommitRunner,
    ) -> None:
        self._registry = registry
        self._catalogs = catalogs
        self._refresher = refresher  # its refusals: planning finds what a refresh would have
        self._processes: dict[str, OptimizingProcess] = {}
        """Processes in flight (tasks running, or a commit delayed), by process id."""
        self._committer = committer

    def __bool__(self) -> bool:
        """Whether a process is in flight or being committed."""
        return bool(self._processes) or self._committer.busy

    # -- what others ask ------------------------------------------------------------------

    def protection(self, process_id: str | None) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """The snapshot its process started from and the prefix of the files it writes, which a
        maintenance job must keep (hold the lock)."""
        process = self._processes.get(process_id) if process_id else None
        if process is None:
            return (), ()
        return (process.planned.starting_snapshot_id,), (process.process_id,)

    def cancel_group(self, group_key: str) -> list[str]:
        """Forget the group's processes whose tasks still run (hold the lock); those only waiting
        on the catalog still commit. Returns the cancelled process ids."""
        cancelled = [
            pid
            for pid, process in self._processes.items()
            if process.group == group_key and process.state == ProcessState.RUNNING
        ]
        for pid in cancelled:
            del self._processes[pid]
        return cancelled

    def forget(self, process_id: str | None) -> str | None:
        """Forget a removed table's process, committed or not (hold the lock); returns its group."""
        if not process_id:
            return None
        process = self._processes.pop(process_id, None)
        return process.group if process else None

    def abandon_in_flight(self) -> tuple[int, int]:
        """Stop for good: forget every process in flight, deleting the files it wrote (by name, in
        its output directories), but for those whose commit is pending, which may have landed
        (orphan cleanup's). Call once its tasks stopped writing. Returns (processes, files deleted).

        The commits under way and queued finish first: a commit is never cut in half."""
        self._committer.close()
        with self._registry.lock:
            abandoned = [
                p
                for p in self._processes.values()
                if p.state == ProcessState.RUNNING and not p.outcome_unknown
            ]
            for process in abandoned:
                del self._processes[process.process_id]
        removed = sum(len(process.discard()) for process in abandoned)
        return len(abandoned), removed

    def close(self) -> None:
        """Let the commits under way and queued finish, then stop the commit thread."""
        self._committer.close()

    # -- planning -------------------------------------------------------------------------

    def plan_picked_tables(self) -> None:
        """Plan, group by group, the tables each scheduler picks until it picks none."""
        registry = self._registry
        for name in list(registry.groups):
            with registry.lock:
                if name not in registry.groups:
                    continue  # removed meanwhile
                scheduler = registry.service.group(name)
            while True:
                now = registry.clock()
                with registry.lock:
                    if not registry.current(name, scheduler):
                        break  # removed meanwhile
                    table_id = scheduler.next_table_to_plan(now)
                    runtime = registry.runtimes.get(table_id) if table_id else None
                    if table_id is None:
                        break
                    if runtime is None or not runtime.may_plan(now):
                        scheduler.planning_empty(table_id)
                        continue
                    runtime.on_planning(now)
                self._plan(runtime, name, scheduler, max(1, scheduler.threads_to_plan_for))
                with registry.lock:
                    registry.touch(runtime.table_id)

    def _plan(self, runtime: TableRuntime, group_name: str, scheduler: GroupScheduler, threads: int) -> None:
        registry = self._registry
        with registry.lock:
            if not registry.current(group_name, scheduler):
                runtime.on_planning_failed(f"group {runtime.group!r} was deleted")
                return
            group = registry.groups[group_name].spec
        now = registry.clock()
        try:
            table, scanned, config, plan = self._table_and_plan(runtime, now, threads)
            if plan.is_empty or plan.optimizing_type is None:
                with registry.lock:
                    runtime.on_planned(plan, "")
                    scheduler.planning_empty(runtime.table_id)
                return
            memory = max(MIN_DELETE_MEMORY, group.executor_memory // group.executor_cores // 2)
            secret_properties = registry.secret_properties.get(runtime.table_id)
            process = build_process(
                table,
                runtime.spec.table,
                scanned,
                plan,
                config,
                delete_memory_limit=memory,
                clustering=runtime.spec.clustering,
                storage_secret=runtime.spec.catalog.secret_ref if secret_properties is not None else None,
                secret_properties=secret_properties,
            )
        except UnsupportedTableError as exc:
            with registry.lock:
                scheduler.planning_empty(runtime.table_id)
            self._refresher.refuse_unsupported(runtime, exc, now)
            return
        except InvalidTableProperty as exc:
            with registry.lock:
                scheduler.planning_empty(runtime.table_id)
            self._refresher.refuse_property(runtime, exc, now)
            return
        except (TableAccessError, OSError, ValueError) as exc:
            with registry.lock:
                runtime.on_planning_failed(str(exc))
                scheduler.planning_failed(runtime.table_id)
            registry.emit(runtime.table_id, "Warning", "PlanningFailed", str(exc))
            return
        with registry.lock:
            if not registry.current(group_name, scheduler):
                # The group was deleted (or deleted and created again) while this table was planned.
                runtime.on_planning_failed(f"group {runtime.group!r} was deleted")
                return
            planning_started = runtime.last_plan_s if runtime.last_plan_s is not None else now
            timeline = ProcessTimeline(
                pending_since_s=min(
                    planning_started if runtime.pending_since_s is None else runtime.pending_since_s,
                    planning_started,
                ),
                planning_started_s=planning_started,
                planned_s=registry.clock(),
            )
            optimizing = OptimizingProcess(
                process,
                table,
                plan.optimizing_type,
                group=group_name,
                table_id=runtime.table_id,
                timeline=timeline,
            )
            self._processes[process.process_id] = optimizing
            # The table names its process before an optimizer can poll a task of it, so nothing
            # that reads the table without the lock sees a handed-out task of an unnamed process.
            runtime.on_planned(plan, process.process_id)
            scheduler.add_process(
                runtime.table_id,
                process.process_id,
                list(process.specs),
                max_retries=runtime.spec.execute.num_retries,
                allow_partial_commit=runtime.spec.allow_partial_commit,
                check=optimizing,
                on_finished=lambda: self._committer.submit(lambda: self._commit_group(group_name, scheduler)),
            )
        registry.emit(
            runtime.table_id,
            "Normal",
            "OptimizingStarted",
            f"{plan.optimizing_type.label} optimizing {process.process_id}: {len(process.specs)} tasks"
            + (
                f"; storage credentials from the mounted Secret {process.specs[0].storage_secret!r}"
                if process.specs[0].storage_secret
                else ""
            ),
        )

    def _table_and_plan(
        self, runtime: TableRuntime, now: float, threads: int
    ) -> tuple[Table, ScannedTable, OptimizingConfig, OptimizingPlan]:
        """The table, its scan, its config and its plan cut to `threads`: the last refresh's
        while it is fresh (`Evaluation.fresh_for`), else from a load of the table."""
        registry = self._registry
        with registry.lock:
            evaluation = registry.evaluations.get(runtime.table_id)
            fresh = evaluation is not None and evaluation.fresh_for(
                runtime, now, self._refresher.refresh_interval_s
            )
        if fresh and evaluation is not None and evaluation.table is not None:
            # The catalog may have moved since the refresh: the commit cannot land over that, as
            # it decides on the catalog's head, reloaded before each attempt, and validates what
            # changed since the plan's snapshot (commit/retry.py on_fresh_head, commit/rewrite.py).
            return evaluation.table, evaluation.scanned, evaluation.config, cap_plan(evaluation.plan, threads)
        table = self._catalogs.load(runtime)
        current = table.metadata.current_snapshot()
        if (
            evaluation is not None
            and current is not None
            and evaluation.scanned.files.snapshot_id == current.snapshot_id
        ):
            scanned = evaluation.scanned
            check_supported(runtime.spec.table, table, scanned)
        else:
            scanned = scan_supported(runtime.spec.table, table)
        history = optimizing_history(table.metadata)
        config = runtime.spec.optimizing_config(table.metadata.properties)
        plan = plan_optimizing(
            scanned.files, config, now, history.last_minor_s, history.last_full_s, max_tasks=threads
        )
        return table, scanned, config, plan

    # -- commit ---------------------------------------------------------------------------

    def commit_finished(self) -> None:
        """Wait for the commits under way, then commit the delayed commits now due and the
        processes whose tasks ended that no commit took yet (a backstop)."""
        self._committer.settle()
        registry = self._registry
        now = registry.clock()
        with registry.lock:
            due = [p for p in self._processes.values() if p.retry_due(now)]
        for process in due:
            self._commit(process.process_id)
        for name in list(registry.groups):
            with registry.lock:
                if name not in registry.groups:
                    continue  # removed meanwhile
                scheduler = registry.service.group(name)
            self._commit_group(name, scheduler)
        for table_id in {p.table_id for p in due}:
            with registry.lock:
                registry.touch(table_id)

    def _commit_group(self, name: str, scheduler: GroupScheduler) -> None:
        """Commit the group's processes whose tasks ended (on the commit thread, or in a round's
        backstop)."""
        with self._registry.lock:
            if not self._registry.current(name, scheduler):
                return  # the group was removed: its processes were cancelled
            finished = scheduler.take_finished()
        for outcome in finished:
            self._tasks_ended(outcome)

    def _tasks_ended(self, outcome: ProcessOutcome) -> None:
        with self._registry.lock:
            process = self._processes.get(outcome.process_id)
        if process is not None:
            process.tasks_ended(
                outcome.results,
                outcome.failures,
                outcome.allow_partial_commit,
                outcome.succeeded,
                outcome.work,
            )
            self._commit(outcome.process_id)
        with self._registry.lock:
            self._registry.touch(outcome.table_id)

    def _commit(self, process_id: str) -> None:
        registry = self._registry
        with registry.lock:
            process = self._processes.pop(process_id, None)
            runtime = registry.runtimes.get(process.table_id) if process else None
        if process is None:
            return  # forgotten meanwhile (its table or group removed): nothing to commit
        if runtime is None:
            # The table was removed while its tasks ran: drop what they wrote, unless a commit
            # of it may have landed (orphan cleanup then keeps what a snapshot references).
            process.discard()
            return
        with registry.lock:
            runtime.on_committing()
        now = registry.clock()
        step = process.commit(now)
        if step.state == ProcessState.COMMIT_DELAYED:
            self._delayed(process, runtime, str(step.error), step.delay_s, step.first_delay)
            return
        if step.state == ProcessState.FAILED:
            self._failed(process, runtime, step)
            return
        result = step.result
        assert result is not None  # a COMMITTED step carries its commit's result
        with registry.lock:
            runtime.on_committed(process.optimizing_type, result.snapshot_id, result.changes, now)
            registry.record_run(
                runtime, process_run(runtime.table_id, process, step, registry.clock()), process.group
            )
            registry.evaluations.pop(runtime.table_id, None)
            registry.register_in_group(runtime, left_group=process.group)
        registry.service.metrics.commits.labels(process.group, "committed").inc()
        registry.emit(runtime.table_id, "Normal", "Committed", f"{process_id}: {result.changes}")

    def _delayed(
        self,
        process: OptimizingProcess,
        runtime: TableRuntime,
        error: str,
        delay_s: float | None,
        first: bool,
    ) -> None:
        """Keep the process for its next attempt; its files stay. Users hear of it once."""
        registry = self._registry
        with registry.lock:
            if process.table_id not in registry.runtimes:
                return  # removed meanwhile: nothing to retry for
            self._processes[process.process_id] = process
            runtime.on_commit_delayed(error)
        log.warning("%s: commit delayed, trying again in %.0f s: %s", process.process_id, delay_s or 0, error)
        if first:
            registry.emit(
                runtime.table_id,
                "Warning",
                "CommitDelayed",
                f"{process.process_id}: {error}; its files are kept and the commit is tried again",
            )

    def _failed(self, process: OptimizingProcess, runtime: TableRuntime, step: CommitStep) -> None:
        registry = self._registry
        error = step.error
        with registry.lock:
            runtime.on_process_failed(str(error))
            registry.record_run(
                runtime, process_run(runtime.table_id, process, step, registry.clock()), process.group
            )
            registry.register_in_group(runtime, left_group=process.group)
        registry.service.metrics.commits.labels(process.group, "failed").inc()
        kept = (
            "; an earlier commit attempt may have landed: its files are kept for orphan cleanup"
            if process.outcome_unknown
            else ""
        )
        message = f"{process.process_id}: {error}"
        registry.emit(runtime.table_id, "Warning", "OptimizingFailed", message + kept)
        if OUT_OF_MEMORY in str(error):
            registry.emit(runtime.table_id, "Warning", OUT_OF_MEMORY, message)
