"""The engine's optimizing processes: planning the tables each group's scheduler picks, and
committing each process once its tasks are done, retrying a commit the catalog could not take
with a backoff and deleting what a failed or superseded attempt wrote."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyiceberg.table import Table

from floe.api.table_properties import InvalidTableProperty
from floe.commit.request import CommitFailed, CommitPending
from floe.commit.rewrite import CommitHistory, commit_rewrite
from floe.optimizing.catalog_access import CatalogAccess
from floe.optimizing.commit_request import ProcessFailed, commit_request
from floe.optimizing.leftovers import remove_uncommitted_outputs
from floe.optimizing.refresher import TableRefresher
from floe.optimizing.registry import TableRegistry
from floe.optimizing.specs import OptimizingProcess, build_process
from floe.optimizing.table_state import TableRuntime
from floe.planning.plan import OptimizingType
from floe.planning.planner import plan_optimizing
from floe.protocol.rewrite_task import OUT_OF_MEMORY
from floe.scheduling.group_scheduler import GroupScheduler
from floe.scheduling.records import ProcessOutcome
from floe.tables.catalog import TableAccessError
from floe.tables.history import optimizing_history
from floe.tables.support import UnsupportedTableError, check_supported, scan_supported

log = logging.getLogger(__name__)

MIN_DELETE_MEMORY = 64 * 1024 * 1024
FIRST_COMMIT_RETRY_DELAY_S = 5.0
MAX_COMMIT_RETRY_DELAY_S = 300.0
"""A commit the catalog could not take is retried after 5 s, then ever less often, up to every 5 min."""


@dataclass(frozen=True)
class _DelayedCommit:
    outcome: ProcessOutcome
    retry_at: float
    delay_s: float


@dataclass
class _InFlight:
    process: OptimizingProcess
    table: Table
    group: str
    optimizing_type: OptimizingType
    commit_history: CommitHistory = field(default_factory=CommitHistory)
    """Carried across the delayed commit's calls: whether an attempt may have landed unseen."""


class ProcessRunner:
    """Plans, tracks and commits the engine's processes, by process id."""

    def __init__(self, registry: TableRegistry, catalogs: CatalogAccess, refresher: TableRefresher) -> None:
        self._registry = registry
        self._catalogs = catalogs
        self._refresher = refresher  # its refusals: planning finds what a refresh would have
        self._in_flight: dict[str, _InFlight] = {}
        self._delayed_commits: dict[str, _DelayedCommit] = {}
        """Processes whose commit could not be finished yet, by process id."""

    def __bool__(self) -> bool:
        """Whether a process is in flight."""
        return bool(self._in_flight)

    # -- what others ask ------------------------------------------------------------------

    def protection(self, process_id: str | None) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """The snapshot its process started from and the prefix of the files it writes, which a
        maintenance job must keep (hold the lock)."""
        flight = self._in_flight.get(process_id) if process_id else None
        if flight is None:
            return (), ()
        return (flight.process.starting_snapshot_id,), (flight.process.process_id,)

    def io_properties(self, process_id: str) -> dict[str, str] | None:
        """The FileIO properties of the table a process in flight rewrites, credentials included."""
        with self._registry.lock:
            flight = self._in_flight.get(process_id)
        return {k: str(v) for k, v in flight.table.io.properties.items()} if flight else None

    def cancel_group(self, group_key: str) -> list[str]:
        """Forget the group's processes whose tasks still run (hold the lock); those only waiting
        on the catalog still commit. Returns the cancelled process ids."""
        cancelled = [
            pid
            for pid, flight in self._in_flight.items()
            if flight.group == group_key and pid not in self._delayed_commits
        ]
        for pid in cancelled:
            del self._in_flight[pid]
        return cancelled

    def forget(self, process_id: str | None) -> str | None:
        """Forget a removed table's process, committed or not (hold the lock); returns its group."""
        if not process_id:
            return None
        flight = self._in_flight.pop(process_id, None)
        self._delayed_commits.pop(process_id, None)
        return flight.group if flight else None

    def abandon_in_flight(self) -> tuple[int, int]:
        """Stop for good: forget every process in flight, deleting the files it wrote (by name, in
        its output directories), but for those whose commit is pending, which may have landed
        (orphan cleanup's). Call once its tasks stopped writing. Returns (processes, files deleted)."""
        with self._registry.lock:
            flights = [
                (pid, f)
                for pid, f in self._in_flight.items()
                if pid not in self._delayed_commits and not f.commit_history.outcome_unknown
            ]
            for pid, _ in flights:
                del self._in_flight[pid]
        removed = 0
        for pid, flight in flights:
            try:
                removed += len(
                    remove_uncommitted_outputs(
                        flight.table.io, pid, {spec.output_dir for spec in flight.process.specs}, committed=()
                    )
                )
            except OSError as exc:
                log.warning("%s: could not remove its files: %s", pid, exc)
        return len(flights), removed

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
            table = self._catalogs.load(runtime)
            current = table.metadata.current_snapshot()
            cached = registry.scans.get(runtime.table_id)
            if cached is not None and current is not None and cached.files.snapshot_id == current.snapshot_id:
                scanned = cached
                check_supported(runtime.spec.table, table, scanned)
            else:
                scanned = scan_supported(runtime.spec.table, table)
            history = optimizing_history(table.metadata)
            config = runtime.spec.optimizing_config(table.metadata.properties)
            plan = plan_optimizing(
                scanned.files,
                config,
                now_s=now,
                last_minor_s=history.last_minor_s,
                last_full_s=history.last_full_s,
                max_tasks=threads,
            )
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
            self._in_flight[process.process_id] = _InFlight(process, table, group_name, plan.optimizing_type)
            scheduler.add_process(
                runtime.table_id,
                process.process_id,
                list(process.specs),
                max_retries=runtime.spec.execute.num_retries,
                allow_partial_commit=runtime.spec.allow_partial_commit,
            )
            runtime.on_planned(plan, process.process_id)
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

    # -- commit ---------------------------------------------------------------------------

    def commit_finished(self) -> None:
        """Commit the processes whose tasks ended, and the delayed commits now due."""
        registry = self._registry
        now = registry.clock()
        with registry.lock:
            retries = [d.outcome for d in self._delayed_commits.values() if d.retry_at <= now]
        finished = list(retries)
        for name in list(registry.groups):
            with registry.lock:
                if name not in registry.groups:
                    continue  # removed meanwhile
                finished += registry.service.group(name).take_finished()
        for outcome in finished:
            self._commit(outcome)
            with registry.lock:
                registry.touch(outcome.table_id)

    def _commit(self, outcome: ProcessOutcome) -> None:
        registry = self._registry
        with registry.lock:
            flight = self._in_flight.pop(outcome.process_id, None)
            runtime = registry.runtimes.get(outcome.table_id)
            delayed = self._delayed_commits.pop(outcome.process_id, None)
        if flight is None or runtime is None:
            # The table was removed while its tasks ran: drop what they wrote, unless a commit
            # of it may have landed (orphan cleanup then keeps what a snapshot references).
            if delayed is None:
                self._discard(outcome, flight)
            return
        with registry.lock:
            runtime.on_committing()
        now = registry.clock()
        try:
            if not outcome.succeeded and not outcome.allow_partial_commit:
                raise ProcessFailed(_failure_summary(outcome))
            # With partial commit, commit_request keeps the finished tasks (or raises if none).
            request = commit_request(
                flight.process, outcome.results, outcome.failures, runtime.spec.allow_partial_commit
            )
            result = commit_rewrite(flight.table, request, history=flight.commit_history)
        except CommitPending as exc:
            self._delay_commit(outcome, flight, runtime, delayed, str(exc))
            return
        except (ProcessFailed, CommitFailed, UnsupportedTableError) as exc:
            self._discard(outcome, flight)
            with registry.lock:
                runtime.on_process_failed(str(exc))
                registry.register_in_group(runtime, left_group=flight.group)
            registry.service.metrics.commits.labels(flight.group, "failed").inc()
            kept = (
                "; an earlier commit attempt may have landed: its files are kept for orphan cleanup"
                if flight.commit_history.outcome_unknown
                else ""
            )
            registry.emit(
                runtime.table_id, "Warning", "OptimizingFailed", f"{outcome.process_id}: {exc}{kept}"
            )
            if OUT_OF_MEMORY in str(exc):
                registry.emit(runtime.table_id, "Warning", OUT_OF_MEMORY, f"{outcome.process_id}: {exc}")
            return
        self._discard(outcome, flight, committed=frozenset(f.file_path for f in request.added_files))
        summary = result.changes
        with registry.lock:
            runtime.on_committed(flight.optimizing_type, result.snapshot_id, summary, now)
            registry.scans.pop(runtime.table_id, None)
            registry.register_in_group(runtime, left_group=flight.group)
        registry.service.metrics.commits.labels(flight.group, "committed").inc()
        registry.emit(runtime.table_id, "Normal", "Committed", f"{outcome.process_id}: {summary}")

    def _delay_commit(
        self,
        outcome: ProcessOutcome,
        flight: _InFlight,
        runtime: TableRuntime,
        previous: _DelayedCommit | None,
        error: str,
    ) -> None:
        """Keep the process and try its commit again later, backing off; its files stay."""
        registry = self._registry
        delay = FIRST_COMMIT_RETRY_DELAY_S
        if previous is not None:
            delay = min(previous.delay_s * 2, MAX_COMMIT_RETRY_DELAY_S)
        with registry.lock:
            if outcome.table_id not in registry.runtimes:
                return  # removed meanwhile: nothing to retry for
            self._in_flight[outcome.process_id] = flight
            self._delayed_commits[outcome.process_id] = _DelayedCommit(
                outcome, registry.clock() + delay, delay
            )
            runtime.on_commit_delayed(error)
        log.warning("%s: commit delayed, trying again in %.0f s: %s", outcome.process_id, delay, error)
        if previous is None:
            registry.emit(
                runtime.table_id,
                "Warning",
                "CommitDelayed",
                f"{outcome.process_id}: {error}; its files are kept and the commit is tried again",
            )

    def _discard(
        self, outcome: ProcessOutcome, flight: _InFlight | None, committed: frozenset[str] = frozenset()
    ) -> None:
        """Delete what the process wrote and `committed` does not hold, lost attempts' files too.

        Nothing while a commit attempt of the process (in any call) may have landed unseen: a
        snapshot may reference the files, so they are orphan cleanup's, which keeps those."""
        if flight is None:
            return
        if flight.commit_history.outcome_unknown:
            log.warning(
                "%s: a commit attempt may have landed; its files are kept for orphan cleanup",
                outcome.process_id,
            )
            return
        reported = [written.path for result in outcome.results for written in result.files]
        try:
            removed = remove_uncommitted_outputs(
                flight.table.io,
                outcome.process_id,
                {spec.output_dir for spec in flight.process.specs},
                committed,
                reported,
            )
        except OSError as exc:
            log.warning("%s: could not remove its uncommitted files: %s", outcome.process_id, exc)
            return
        if removed:
            log.info("%s: removed %d files no commit references", outcome.process_id, len(removed))


def _failure_summary(outcome: ProcessOutcome) -> str:
    if not outcome.failures:
        return "process failed"
    first = min(outcome.failures)
    return f"{len(outcome.failures)} tasks failed; {first}: {outcome.failures[first]}"
