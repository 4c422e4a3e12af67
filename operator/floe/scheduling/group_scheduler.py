"""The scheduler of one optimizer group: which table to plan next and which task a thread gets.

Modelled on Amoro's OptimizingQueue. The engine tells the scheduler about its tables
(quota, last optimizing, whether work is due), asks which table to plan next, and hands
the resulting tasks over as a process; optimizer threads poll, ack and complete
attempts at those tasks; the keeper expires attempts that were never acked or ran too
long; the engine collects finished processes to commit them.

Task states: PLANNED → SCHEDULED (handed out) → ACKED (running) → SUCCESS | FAILED; what
an attempt's end means for its task and process is `floe.scheduling.attempts`' business,
the records it keeps are `floe.scheduling.records`.

File tasks (a maintenance job's listing and deleting, `floe.protocol.file_tasks`) come as
processes of their own beside the table's optimizing process; a polling thread gets them
first, since a job waits on them and they are short. Their time is the job's, which the
engine counts toward the table's quota, so the attempts add none.

Quota: a table may have at most ``quota_limit`` tasks SCHEDULED or ACKED; when no table
with PLANNED tasks is below its limit and no table is being planned, a polling thread
still gets a task (the cap is broken) rather than stay idle.

The scheduler does no I/O, starts no threads and reads no clock: every time is a ``now``
argument. All public methods hold the group's `ChangeMonitor` lock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from floe.api.group import SchedulingPolicy
from floe.kit.monitor import ChangeMonitor
from floe.protocol.assignment import TaskAssignment
from floe.protocol.file_tasks import FileTaskResult, FileTaskSpec
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.scheduling.attempts import AttemptBook
from floe.scheduling.occupation import QUOTA_WINDOW_S, TaskTimeLedger, quota_limit
from floe.scheduling.policy import planning_order, policy_for
from floe.scheduling.records import (
    FileTasksOutcome,
    GroupSchedulingStats,
    PlanningMarks,
    PlanningQueue,
    ProcessOutcome,
    ProcessRecord,
    ResultCheck,
    TableRecord,
    TableSchedulingStats,
)

POLL_ORDER_TTL_S = 0.05
"""How long (in ``now``) polls reuse the policy order of the tables with PLANNED tasks.

Ordering every table with work on every poll cost most of a poll with 1,000 tables. The
order only moves continuously between the events that reset it (a table gaining PLANNED
tasks, a quota, limit or policy change): occupation grows by at most ``1 / 3600`` of a
thread per second, so an order at most this old picks the same table but for ties
closer than that. Which tables still have work and room under their cap is checked live.
"""


class GroupScheduler:
    """Plans and hands out the tasks of one optimizer group's tables (Amoro's OptimizingQueue)."""

    def __init__(
        self,
        name: str,
        policy: SchedulingPolicy,
        ack_timeout_s: float,
        execute_timeout_s: float,
        monitor: ChangeMonitor | None = None,
    ) -> None:
        self.name = name
        self._policy = policy_for(policy)
        self._ack_timeout_s = ack_timeout_s
        self._execute_timeout_s = execute_timeout_s
        self._monitor = monitor if monitor is not None else ChangeMonitor()
        self._threads = 0
        self._planning_threads = 0
        self._ledger = TaskTimeLedger()
        self._tables: dict[str, TableRecord] = {}
        self._marks = PlanningMarks()
        self._book = AttemptBook(self._ledger, self._monitor, requeued=self._reorder)
        self._poll_order: list[TableRecord] = []
        self._poll_order_at: float | None = None

    # -- configuration -------------------------------------------------------------------

    @property
    def policy(self) -> SchedulingPolicy:
        """The policy ordering tables for planning and polling."""
        return self._policy.kind

    def set_policy(self, policy: SchedulingPolicy) -> None:
        """Switch policy; the next plan and poll use it."""
        with self._monitor.hold():
            self._policy = policy_for(policy)
            self._poll_order_at = None
            self._monitor.changed()

    @property
    def ack_timeout_s(self) -> float:
        """How long a handed-out task may wait for its ack."""
        return self._ack_timeout_s

    @property
    def execute_timeout_s(self) -> float:
        """How long an acked task may run."""
        return self._execute_timeout_s

    def set_timeouts(self, ack_timeout_s: float, execute_timeout_s: float) -> None:
        """Change the timeouts; the next `expire` applies them to attempts already out."""
        with self._monitor.hold():
            self._ack_timeout_s = ack_timeout_s
            self._execute_timeout_s = execute_timeout_s

    @property
    def threads(self) -> int:
        """Task threads of the group's registered optimizers."""
        return self._threads

    @threads.setter
    def threads(self, threads: int) -> None:
        if threads < 0:
            raise ValueError(f"threads must be >= 0, got {threads}")
        with self._monitor.hold():
            self._threads = threads
            for table in self._tables.values():
                table.limit = quota_limit(table.quota, threads)
            self._poll_order_at = None
            self._monitor.changed()

    @property
    def planning_threads(self) -> int:
        """Threads the group plans for when it has fewer registered: an autoscaled group's
        maximum, so that its tables are planned while its executors start (0: none)."""
        return self._planning_threads

    @planning_threads.setter
    def planning_threads(self, threads: int) -> None:
        if threads < 0:
            raise ValueError(f"planning threads must be >= 0, got {threads}")
        with self._monitor.hold():
            self._planning_threads = threads
            self._monitor.changed()

    @property
    def threads_to_plan_for(self) -> int:
        """The registered threads, or `planning_threads` while fewer are registered."""
        return max(self._threads, self._planning_threads)

    # -- tables --------------------------------------------------------------------------

    def upsert_table(self, table_id: str, quota: float, last_optimized_s: float | None) -> None:
        """Add a table, or update its quota and last optimizing time (pending state is kept)."""
        if quota <= 0:
            raise ValueError(f"quota of {table_id!r} must be > 0, got {quota}")
        with self._monitor.hold():
            table = self._tables.get(table_id)
            if table is None:
                table = TableRecord(table_id, quota, last_optimized_s, self._ledger)
                self._tables[table_id] = table
            table.quota = quota
            table.last_optimized_s = last_optimized_s
            table.limit = quota_limit(quota, self._threads)
            self._poll_order_at = None
            self._monitor.changed()

    def remove_table(self, table_id: str) -> None:
        """Forget the table: its process is cancelled and its outcome, if finished, dropped."""
        with self._monitor.hold():
            table = self._tables.pop(table_id, None)
            if table is None:
                return
            self._marks.forget(table_id)
            self._ledger.forget(table_id)
            self._book.drop_table(table)
            self._poll_order_at = None
            self._monitor.changed()

    def set_pending(self, table_id: str, pending: bool) -> None:
        """The table runtime says whether optimizing is due for the table."""
        with self._monitor.hold():
            self._marks.mark(self._table(table_id), pending=pending)

    def start_maintenance(self, table_id: str, run_id: str, now: float) -> None:
        """A maintenance job of the table started: its time counts toward the table's quota."""
        with self._monitor.hold():
            if table_id in self._tables:
                self._ledger.start(table_id, run_id, now)
                self._monitor.changed()

    def end_maintenance(self, run_id: str, now: float) -> None:
        """The maintenance job ended; a run of a table removed meanwhile is ignored."""
        with self._monitor.hold():
            if self._ledger.running(run_id):
                self._ledger.stop(run_id, now)
                self._monitor.changed()

    # -- planning ------------------------------------------------------------------------

    def next_table_to_plan(self, now: float) -> str | None:
        """The table to plan now, marked PLANNING (no longer pending); None when none should be.

        None when the group has no threads, or when the PLANNED tasks that could be handed
        out within their tables' caps already fill every thread. An autoscaled group plans for
        its `planning_threads` while fewer are registered, counting every PLANNED task while
        none is (the caps follow the registered threads). Otherwise the first, in
        policy order, of the pending tables with nothing in flight, preferring those whose
        occupation is below 100%: a saturated table is planned only when no other waits, so
        that threads do not idle.

        The engine must answer with `add_process`, `planning_empty` or `planning_failed`.
        """
        with self._monitor.hold():
            threads = self.threads_to_plan_for
            if threads == 0:
                return None
            if self._book.ready(within_caps=self._threads > 0) >= threads:
                return None
            chosen = next(planning_order(self._policy, self._marks.waiting(self._tables), now), None)
            if chosen is None:
                return None
            self._marks.mark(chosen, pending=False, planning=True)
            return chosen.table_id

    def planning_failed(self, table_id: str) -> None:
        """Planning raised: the table waits until the engine marks it pending again (`set_pending`,
        on its next round), so a failing table is not picked again, and again, in the same round."""
        self._stop_planning(table_id)

    def planning_empty(self, table_id: str) -> None:
        """The plan had no task: the table is idle."""
        self._stop_planning(table_id)

    def add_process(
        self,
        table_id: str,
        process_id: str,
        specs: Sequence[RewriteTaskSpec],
        max_retries: int,
        allow_partial_commit: bool,
        check: ResultCheck | None = None,
        on_finished: Callable[[], None] | None = None,
    ) -> None:
        """Queue a planned process; its tasks start PLANNED and the table stops planning.

        ``max_retries`` is how many failed attempts each task may retry. With
        ``allow_partial_commit`` the process still fails when a task runs out of retries,
        and its remaining tasks are dropped; the flag comes back in its `ProcessOutcome`.
        ``check`` checks its tasks' results (`result_check`); ``on_finished`` is called once
        when its last task ends, on that thread once the lock is released, so the process's
        outcome (`take_finished`) is committed at once.

        Raises KeyError when the table was removed meanwhile, ValueError for an empty or
        inconsistent process.
        """
        _check_process(process_id, specs, max_retries)
        with self._monitor.hold():
            table = self._table(table_id)
            if table.process is not None:
                raise ValueError(
                    f"table {table_id!r} already has process {table.process.process_id!r} in flight"
                )
            table.process = self._book.add(
                table, process_id, specs, max_retries, allow_partial_commit, file_tasks=False
            )
            table.process.check = check
            table.process.on_finished = on_finished
            self._marks.mark(table, pending=False, planning=False)
            self._poll_order_at = None
            self._monitor.changed()

    def add_file_tasks(
        self, table_id: str, process_id: str, specs: Sequence[FileTaskSpec], max_retries: int
    ) -> None:
        """Queue a maintenance job's file tasks as a process of their own; `file_tasks_outcome`
        tells when they ended. Raises KeyError for an unknown table, ValueError as `add_process`."""
        if not specs:
            raise ValueError(f"process {process_id!r} has no task")
        if len({spec.task_id for spec in specs}) != len(specs):
            raise ValueError(f"process {process_id!r} has duplicate task ids")
        with self._monitor.hold():
            table = self._table(table_id)
            self._book.add(table, process_id, specs, max_retries, allow_partial_commit=False, file_tasks=True)
            self._monitor.changed()

    def file_tasks_outcome(self, process_id: str) -> FileTasksOutcome | None:
        """The outcome of file tasks once all ended (the process is then forgotten), None before.
        Raises KeyError when the process is unknown: cancelled, its table removed, or taken."""
        with self._monitor.hold():
            return self._book.file_tasks_outcome(process_id)

    # -- optimizer calls -----------------------------------------------------------------

    def poll(self, optimizer_id: str, thread: int, now: float) -> TaskAssignment | None:
        """A new attempt at a PLANNED task for this optimizer thread, or None.

        Whatever the thread still held is taken back first (without using a retry): a
        thread only polls when it is idle, so it gave up on it.
        """
        with self._monitor.hold():
            self._book.release(optimizer_id, now, thread)
            for file_process in self._book.file_processes.values():
                if file_process.planned:
                    return self._book.hand_out(file_process, optimizer_id, thread, now)
            first: ProcessRecord | None = None
            for table in self._ordered_with_work(now):
                process = table.process
                if process is None or process.finished or not process.planned:
                    continue  # its work ran out since the order was computed
                if len(process.in_flight) < table.limit:
                    return self._book.hand_out(process, optimizer_id, thread, now)
                if first is None:
                    first = process
            if first is not None and not self._marks.planning:
                return self._book.hand_out(first, optimizer_id, thread, now)
            return None

    def ack(self, attempt_id: str, optimizer_id: str, now: float) -> None:
        """The optimizer started the attempt; its task time counts from now. Repeated acks are no-ops."""
        with self._monitor.hold():
            self._book.ack(attempt_id, optimizer_id, now)

    def assignment(self, attempt_id: str, optimizer_id: str) -> TaskAssignment:
        """The optimizer's current attempt as it was handed out; StaleAttempt if it is not current."""
        with self._monitor.hold():
            return self._book.assignment(attempt_id, optimizer_id)

    def result_check(self, attempt_id: str, optimizer_id: str) -> ResultCheck | None:
        """The check for the result of the optimizer's current attempt (None: the task
        service's default); StaleAttempt if it is not current."""
        with self._monitor.hold():
            return self._book.result_check(attempt_id, optimizer_id)

    def complete(
        self,
        attempt_id: str,
        optimizer_id: str,
        outcome: RewriteTaskResult | FileTaskResult | str,
        now: float,
    ) -> None:
        """The attempt finished: ``outcome`` is its result, or the error message if it failed.

        A completion without ack counts as acked when it was handed out. A failure uses
        one of the task's retries; with none left the process fails.
        """
        with self._monitor.hold():
            self._book.complete(attempt_id, optimizer_id, outcome, now)

    def release_optimizer(self, optimizer_id: str, now: float) -> int:
        """Take back every unfinished attempt of the optimizer, without using retries; returns how many."""
        with self._monitor.hold():
            return self._book.release(optimizer_id, now)

    def expire(self, now: float) -> None:
        """Apply the timeouts: unacked attempts go back to PLANNED, overlong ones fail (using a retry)."""
        with self._monitor.hold():
            self._book.expire(now, self._ack_timeout_s, self._execute_timeout_s)

    # -- the engine's side of finished work ------------------------------------------------

    def take_finished(self) -> list[ProcessOutcome]:
        """Processes finished since the last call; their tables have no process any more."""
        with self._monitor.hold():
            return self._book.take_finished()

    def cancel_process(self, process_id: str, now: float) -> bool:
        """Drop the process whatever its stage; late completions of its tasks are stale. False if unknown."""
        with self._monitor.hold():
            if not self._book.cancel(process_id, now):
                return False
            self._monitor.changed()
            return True

    # -- status --------------------------------------------------------------------------

    def stats(self, now: float) -> dict[str, TableSchedulingStats]:
        """Per-table scheduling state, keyed by table id."""
        with self._monitor.hold():
            return {table_id: table.stats(now) for table_id, table in self._tables.items()}

    def planning_queue(self, now: float) -> PlanningQueue:
        """The pending tables in the order they will be planned, and whether planning waits."""
        with self._monitor.hold():
            threads = self.threads_to_plan_for
            return PlanningQueue(
                table_ids=tuple(
                    t.table_id for t in planning_order(self._policy, self._marks.waiting(self._tables), now)
                ),
                threads=threads,
                threads_taken=threads > 0 and self._book.ready(within_caps=self._threads > 0) >= threads,
            )

    def process_tasks(self) -> dict[str, tuple[int, int]]:
        """Running and planned tasks of each table with a process (its file tasks included),
        keyed by table id: what `stats` says of them, without working out every table's occupation."""
        with self._monitor.hold():
            return self._book.tasks_by_table()

    def occupations(self, now: float, only: Collection[str] | None = None) -> dict[str, float]:
        """Each table's (of `only`, by default every one) quota occupation, keyed by table id."""
        with self._monitor.hold():
            ids = self._tables.keys() if only is None else [t for t in only if t in self._tables]
            return {table_id: self._tables[table_id].occupation(now) for table_id in ids}

    def occupied(self, now: float) -> dict[str, float]:
        """The occupation of the tables that have any: those with task time in the window."""
        with self._monitor.hold():
            used = self.occupations(now, self._ledger.tables())
        return {table_id: share for table_id, share in used.items() if share > 0}

    def first_start_since(self, since: float) -> float | None:
        """When the first task that started running at or after `since` did (among the last
        `RECENT_STARTS`), None if none has: a task shorter than a status pass still counts."""
        with self._monitor.hold():
            return next((started for started in self._book.starts if started >= since), None)

    def group_stats(self, now: float) -> GroupSchedulingStats:
        """The group's totals."""
        with self._monitor.hold():
            processes = [p for p in self._book.processes.values() if not p.finished]
            used = self._ledger.tables() & self._tables.keys()
            task_seconds = sum(self._ledger.task_seconds(t, now) for t in used)
            return GroupSchedulingStats(
                threads=self._threads,
                tables=len(self._tables),
                pending_tables=len(self._marks.pending),
                planning_tables=len(self._marks.planning),
                running_tasks=sum(len(p.in_flight) for p in processes),
                pending_tasks=sum(len(p.planned) for p in processes),
                utilization=task_seconds / QUOTA_WINDOW_S / self._threads if self._threads else 0.0,
            )

    # -- internals -----------------------------------------------------------------------

    def _table(self, table_id: str) -> TableRecord:
        table = self._tables.get(table_id)
        if table is None:
            raise KeyError(f"table {table_id!r} is not in optimizer group {self.name!r}")
        return table

    def _stop_planning(self, table_id: str) -> None:
        with self._monitor.hold():
            self._marks.mark(self._table(table_id), pending=False, planning=False)
            self._monitor.changed()

    def _reorder(self) -> None:
        """A table may have gained PLANNED tasks: the next poll orders the tables afresh."""
        self._poll_order_at = None

    def _ordered_with_work(self, now: float) -> list[TableRecord]:
        """The tables that had PLANNED tasks, in policy order, as of at most `POLL_ORDER_TTL_S` ago."""
        computed_at = self._poll_order_at
        if computed_at is None or not computed_at <= now < computed_at + POLL_ORDER_TTL_S:
            self._poll_order = self._policy.order(self._book.tables_with_work(), now)
            self._poll_order_at = now
        return self._poll_order


def _check_process(process_id: str, specs: Sequence[RewriteTaskSpec], max_retries: int) -> None:
    """Raise ValueError for a process `GroupScheduler.add_process` must refuse: no task, task ids
    repeated, or a negative ``max_retries``."""
    if not specs:
        raise ValueError(f"process {process_id!r} has no task; report an empty plan with planning_empty")
    if max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, got {max_retries}")
    task_ids = [spec.task_id for spec in specs]
    if len(set(task_ids)) != len(task_ids):
        raise ValueError(f"process {process_id!r} has duplicate task ids")
