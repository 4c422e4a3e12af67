"""The scheduler of one optimizer group: which table to plan next and which task a thread gets.

Modelled on Amoro's OptimizingQueue. The engine tells the scheduler about its tables
(quota, last optimizing, whether work is due), asks which table to plan next, and hands
the resulting tasks over as a process; optimizer threads poll, ack and complete
attempts at those tasks; the keeper expires attempts that were never acked or ran too
long; the engine collects finished processes to commit them.

Task states: PLANNED → SCHEDULED (handed out) → ACKED (running) → SUCCESS | FAILED.
A failed attempt puts the task back to PLANNED while it has retries left; otherwise the
process fails and its remaining tasks are CANCELED. An attempt taken back without being
the task's fault (its optimizer went away, it was never acked, its thread polled again)
returns the task to PLANNED without using a retry.

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

import itertools
import math
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from floe.api.models import SchedulingPolicy
from floe.kit.monitor import ChangeMonitor
from floe.protocol.assignment import TaskAssignment
from floe.protocol.errors import InvalidRequest, StaleAttempt
from floe.protocol.file_tasks import FileTaskResult, FileTaskSpec
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.scheduling.occupation import QUOTA_WINDOW_S, TaskTimeLedger, quota_limit
from floe.scheduling.policy import policy_for


class TaskStatus(StrEnum):
    """Where a task is in its life."""

    PLANNED = "PLANNED"
    SCHEDULED = "SCHEDULED"
    ACKED = "ACKED"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


RECENT_STARTS = 1024
"""Task start times a group keeps, for the time from a scale-up to its first running task."""
POLL_ORDER_TTL_S = 0.05
"""How long (in ``now``) polls reuse the policy order of the tables with PLANNED tasks.

Ordering every table with work on every poll cost most of a poll with 1,000 tables. The
order only moves continuously between the events that reset it (a table gaining PLANNED
tasks, a quota, limit or policy change): occupation grows by at most ``1 / 3600`` of a
thread per second, so an order at most this old picks the same table but for ties
closer than that. Which tables still have work and room under their cap is checked live.
"""


@dataclass(frozen=True)
class ProcessOutcome:
    """A finished process, for the engine to commit (or clean up after).

    ``results`` holds every succeeded task's result, in plan order; ``failures`` the last
    error of each task that ran out of retries. ``succeeded`` is True when every task
    succeeded; otherwise the process failed and the tasks neither succeeded nor failed
    were cancelled. ``allow_partial_commit`` is the process's own flag, passed back so
    the commit knows whether the results of a failed process may be committed.
    """

    table_id: str
    process_id: str
    results: list[RewriteTaskResult]
    failures: dict[str, str]
    succeeded: bool
    allow_partial_commit: bool


@dataclass(frozen=True)
class FileTasksOutcome:
    """A finished process of file tasks: every result in task order when ``succeeded``,
    otherwise the last error of each task that ran out of retries."""

    process_id: str
    results: list[FileTaskResult]
    failures: dict[str, str]
    succeeded: bool


@dataclass(frozen=True)
class TableSchedulingStats:
    """A table as the scheduler sees it, for status and the live view."""

    table_id: str
    occupation: float
    quota_limit: float
    pending: bool
    planning: bool
    process_id: str | None
    running: int
    planned: int
    succeeded: int
    failed: int
    retries: int


@dataclass(frozen=True)
class GroupSchedulingStats:
    """A group's totals; ``utilization`` is the task time of the last hour over its threads."""

    threads: int
    tables: int
    pending_tables: int
    planning_tables: int
    running_tasks: int
    pending_tasks: int
    utilization: float


@dataclass(eq=False)
class _Task:
    spec: RewriteTaskSpec | FileTaskSpec
    process: _Process
    status: TaskStatus = TaskStatus.PLANNED
    retries: int = 0
    attempts: int = 0
    attempt_id: str | None = None
    optimizer_id: str | None = None
    thread: int | None = None
    scheduled_at: float = 0.0
    acked_at: float = 0.0
    result: RewriteTaskResult | FileTaskResult | None = None
    error: str | None = None
    assignment: TaskAssignment | None = None
    """The current attempt as handed out (its spec carries the attempt's file-name prefix)."""


@dataclass(eq=False)
class _Process:
    process_id: str
    table: _Table
    max_retries: int
    allow_partial_commit: bool
    file_tasks: bool = False
    """A maintenance job's file tasks, not the table's optimizing process."""
    tasks: list[_Task] = field(default_factory=list)
    planned: deque[_Task] = field(default_factory=deque)
    in_flight: set[_Task] = field(default_factory=set)
    finished: bool = False

    def headroom(self) -> int:
        """PLANNED tasks that could be handed out now without breaking the table's cap."""
        return min(len(self.planned), max(0, math.ceil(self.table.limit) - len(self.in_flight)))


@dataclass(eq=False)
class _Table:
    table_id: str
    quota: float
    last_optimized_s: float | None
    ledger: TaskTimeLedger
    limit: float = 0.0
    pending: bool = False
    planning: bool = False
    process: _Process | None = None

    def occupation(self, now: float) -> float:
        return self.ledger.occupation(self.table_id, now, self.limit)


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
        self._starts: deque[float] = deque(maxlen=RECENT_STARTS)
        self._ledger = TaskTimeLedger()
        self._tables: dict[str, _Table] = {}
        self._processes: dict[str, _Process] = {}
        self._attempts: dict[str, _Task] = {}
        self._finished: list[_Process] = []
        self._file_processes: dict[str, _Process] = {}
        self._poll_order: list[_Table] = []
        self._poll_order_at: float | None = None
        # Attempt ids only need to be unique: a counter is much cheaper than a uuid4 (an
        # os.urandom call) per hand-out, and the random tag keeps the ids of a scheduler
        # created again (an operator restart, a group re-created) apart from the old ones.
        self._attempt_tag = uuid.uuid4().hex[:8]
        self._attempt_seq = itertools.count()

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
                table = _Table(table_id, quota, last_optimized_s, self._ledger)
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
            self._ledger.forget(table_id)
            processes = [p for p in self._file_processes.values() if p.table is table]
            if table.process is not None:
                processes.append(table.process)
            for process in processes:
                for task in list(process.in_flight):
                    self._detach_attempt(task)
                    task.status = TaskStatus.CANCELED
                self._discard_process(process)
            self._poll_order_at = None
            self._monitor.changed()

    def set_pending(self, table_id: str, pending: bool) -> None:
        """The table runtime says whether optimizing is due for the table."""
        with self._monitor.hold():
            self._table(table_id).pending = pending

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
            unfinished = [p for p in self._processes.values() if not p.finished]
            if self._threads == 0:
                ready = sum(len(p.planned) for p in unfinished)
            else:
                ready = sum(p.headroom() for p in unfinished)
            if ready >= threads:
                return None
            candidates = [
                t for t in self._tables.values() if t.pending and not t.planning and t.process is None
            ]
            ordered = self._policy.order(candidates, now)
            if not ordered:
                return None
            chosen = next((t for t in ordered if t.occupation(now) < 1.0), ordered[0])
            chosen.planning = True
            chosen.pending = False
            return chosen.table_id

    def planning_failed(self, table_id: str) -> None:
        """Planning raised: the table waits until the engine marks it pending again (`set_pending`,
        on its next round), so a failing table is not picked again, and again, in the same round."""
        with self._monitor.hold():
            table = self._table(table_id)
            table.planning = False
            table.pending = False
            self._monitor.changed()

    def planning_empty(self, table_id: str) -> None:
        """The plan had no task: the table is idle."""
        with self._monitor.hold():
            table = self._table(table_id)
            table.planning = False
            table.pending = False
            self._monitor.changed()

    def add_process(
        self,
        table_id: str,
        process_id: str,
        specs: Sequence[RewriteTaskSpec],
        max_retries: int,
        allow_partial_commit: bool,
    ) -> None:
        """Queue a planned process; its tasks start PLANNED and the table stops planning.

        ``max_retries`` is how many failed attempts each task may retry. With
        ``allow_partial_commit`` the process still fails when a task runs out of retries,
        and its remaining tasks are dropped; the flag comes back in its `ProcessOutcome`.

        Raises KeyError when the table was removed meanwhile, ValueError for an empty or
        inconsistent process.
        """
        if not specs:
            raise ValueError(f"process {process_id!r} has no task; report an empty plan with planning_empty")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        task_ids = [spec.task_id for spec in specs]
        if len(set(task_ids)) != len(task_ids):
            raise ValueError(f"process {process_id!r} has duplicate task ids")
        with self._monitor.hold():
            table = self._table(table_id)
            if table.process is not None:
                raise ValueError(
                    f"table {table_id!r} already has process {table.process.process_id!r} in flight"
                )
            if process_id in self._processes:
                raise ValueError(f"process id {process_id!r} is already in use")
            process = _Process(process_id, table, max_retries, allow_partial_commit)
            process.tasks = [_Task(spec, process) for spec in specs]
            process.planned.extend(process.tasks)
            self._processes[process_id] = process
            table.process = process
            table.planning = False
            table.pending = False
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
            if process_id in self._processes:
                raise ValueError(f"process id {process_id!r} is already in use")
            process = _Process(process_id, table, max_retries, allow_partial_commit=False, file_tasks=True)
            process.tasks = [_Task(spec, process) for spec in specs]
            process.planned.extend(process.tasks)
            self._processes[process_id] = process
            self._file_processes[process_id] = process
            self._monitor.changed()

    def file_tasks_outcome(self, process_id: str) -> FileTasksOutcome | None:
        """The outcome of file tasks once all ended (the process is then forgotten), None before.
        Raises KeyError when the process is unknown: cancelled, its table removed, or taken."""
        with self._monitor.hold():
            process = self._file_processes[process_id]
            if not process.finished:
                return None
            self._discard_process(process)
            succeeded = all(t.status is TaskStatus.SUCCESS for t in process.tasks)
            return FileTasksOutcome(
                process_id=process_id,
                results=[t.result for t in process.tasks if isinstance(t.result, FileTaskResult)]
                if succeeded
                else [],
                failures={
                    t.spec.task_id: t.error or "" for t in process.tasks if t.status is TaskStatus.FAILED
                },
                succeeded=succeeded,
            )

    # -- optimizer calls -----------------------------------------------------------------

    def poll(self, optimizer_id: str, thread: int, now: float) -> TaskAssignment | None:
        """A new attempt at a PLANNED task for this optimizer thread, or None.

        Whatever the thread still held is taken back first (without using a retry): a
        thread only polls when it is idle, so it gave up on it.
        """
        with self._monitor.hold():
            for task in [t for t in self._attempts.values() if t.optimizer_id == optimizer_id]:
                if task.thread == thread:
                    self._return_to_planned(task, now)
            for file_process in self._file_processes.values():
                if file_process.planned:
                    return self._hand_out(file_process, optimizer_id, thread, now)
            first: _Process | None = None
            for table in self._ordered_with_work(now):
                process = table.process
                if process is None or process.finished or not process.planned:
                    continue  # its work ran out since the order was computed
                if len(process.in_flight) < table.limit:
                    return self._hand_out(process, optimizer_id, thread, now)
                if first is None:
                    first = process
            if first is not None and not any(t.planning for t in self._tables.values()):
                return self._hand_out(first, optimizer_id, thread, now)
            return None

    def ack(self, attempt_id: str, optimizer_id: str, now: float) -> None:
        """The optimizer started the attempt; its task time counts from now. Repeated acks are no-ops."""
        with self._monitor.hold():
            task = self._current(attempt_id, optimizer_id)
            if task.status is TaskStatus.SCHEDULED:
                self._start_running(task, now)

    def assignment(self, attempt_id: str, optimizer_id: str) -> TaskAssignment:
        """The optimizer's current attempt as it was handed out; StaleAttempt if it is not current."""
        with self._monitor.hold():
            task = self._current(attempt_id, optimizer_id)
            assert task.assignment is not None, "a current attempt was handed out"
            return task.assignment

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
            task = self._current(attempt_id, optimizer_id)
            if not isinstance(outcome, str):
                if outcome.task_id != task.spec.task_id:
                    raise InvalidRequest(
                        f"attempt {attempt_id!r} is for task {task.spec.task_id!r}, "
                        f"but the result is for {outcome.task_id!r}"
                    )
                if isinstance(outcome, RewriteTaskResult) != isinstance(task.spec, RewriteTaskSpec):
                    raise InvalidRequest(
                        f"attempt {attempt_id!r} is a {type(task.spec).__name__}, "
                        f"but the result is a {type(outcome).__name__}"
                    )
            if task.status is TaskStatus.SCHEDULED:
                self._start_running(task, task.scheduled_at)
            self._end_attempt(task, now)
            if not isinstance(outcome, str):
                task.status = TaskStatus.SUCCESS
                task.result = outcome
                process = task.process
                if all(t.status is TaskStatus.SUCCESS for t in process.tasks):
                    self._finish(process)
            else:
                self._fail(task, outcome, now)
            self._monitor.changed()

    def release_optimizer(self, optimizer_id: str, now: float) -> int:
        """Take back every unfinished attempt of the optimizer, without using retries; returns how many."""
        with self._monitor.hold():
            tasks = [t for t in self._attempts.values() if t.optimizer_id == optimizer_id]
            for task in tasks:
                self._return_to_planned(task, now)
            return len(tasks)

    def expire(self, now: float) -> None:
        """Apply the timeouts: unacked attempts go back to PLANNED, overlong ones fail (using a retry)."""
        with self._monitor.hold():
            for task in list(self._attempts.values()):
                # Statuses are re-read: an earlier failure in this pass may have cancelled this task.
                if task.status is TaskStatus.SCHEDULED and now - task.scheduled_at > self._ack_timeout_s:
                    self._return_to_planned(task, now)
                elif task.status is TaskStatus.ACKED and now - task.acked_at > self._execute_timeout_s:
                    self._end_attempt(task, now)
                    self._fail(
                        task, f"no completion within the execute timeout of {self._execute_timeout_s:g}s", now
                    )
                    self._monitor.changed()

    # -- the engine's side of finished work ------------------------------------------------

    def take_finished(self) -> list[ProcessOutcome]:
        """Processes finished since the last call; their tables have no process any more."""
        with self._monitor.hold():
            outcomes = [
                ProcessOutcome(
                    table_id=p.table.table_id,
                    process_id=p.process_id,
                    results=[t.result for t in p.tasks if isinstance(t.result, RewriteTaskResult)],
                    failures={
                        t.spec.task_id: t.error or "" for t in p.tasks if t.status is TaskStatus.FAILED
                    },
                    succeeded=all(t.status is TaskStatus.SUCCESS for t in p.tasks),
                    allow_partial_commit=p.allow_partial_commit,
                )
                for p in self._finished
            ]
            for process in list(self._finished):
                self._discard_process(process)
            return outcomes

    def cancel_process(self, process_id: str, now: float) -> bool:
        """Drop the process whatever its stage; late completions of its tasks are stale. False if unknown."""
        with self._monitor.hold():
            process = self._processes.get(process_id)
            if process is None:
                return False
            self._cancel_remaining(process, now)
            self._discard_process(process)
            self._monitor.changed()
            return True

    # -- status --------------------------------------------------------------------------

    def stats(self, now: float) -> dict[str, TableSchedulingStats]:
        """Per-table scheduling state, keyed by table id."""
        with self._monitor.hold():
            return {table_id: self._table_stats(table, now) for table_id, table in self._tables.items()}

    def process_tasks(self) -> dict[str, tuple[int, int]]:
        """Running and planned tasks of each table with a process (its file tasks included),
        keyed by table id: what `stats` says of them, without working out every table's occupation."""
        with self._monitor.hold():
            tasks: dict[str, tuple[int, int]] = {}
            for p in self._processes.values():
                if p.table.process is p or (p.file_tasks and not p.finished):
                    running, planned = tasks.get(p.table.table_id, (0, 0))
                    tasks[p.table.table_id] = (running + len(p.in_flight), planned + len(p.planned))
            return tasks

    def occupations(self, now: float) -> dict[str, float]:
        """Each table's quota occupation, keyed by table id (`stats` without the rest)."""
        with self._monitor.hold():
            return {table_id: table.occupation(now) for table_id, table in self._tables.items()}

    def first_start_since(self, since: float) -> float | None:
        """When the first task that started running at or after `since` did (among the last
        `RECENT_STARTS`), None if none has: a task shorter than a status pass still counts."""
        with self._monitor.hold():
            return next((started for started in self._starts if started >= since), None)

    def group_stats(self, now: float) -> GroupSchedulingStats:
        """The group's totals."""
        with self._monitor.hold():
            processes = [p for p in self._processes.values() if not p.finished]
            task_seconds = sum(self._ledger.task_seconds(t, now) for t in self._tables)
            return GroupSchedulingStats(
                threads=self._threads,
                tables=len(self._tables),
                pending_tables=sum(t.pending for t in self._tables.values()),
                planning_tables=sum(t.planning for t in self._tables.values()),
                running_tasks=sum(len(p.in_flight) for p in processes),
                pending_tasks=sum(len(p.planned) for p in processes),
                utilization=task_seconds / QUOTA_WINDOW_S / self._threads if self._threads else 0.0,
            )

    # -- internals -----------------------------------------------------------------------

    def _table(self, table_id: str) -> _Table:
        table = self._tables.get(table_id)
        if table is None:
            raise KeyError(f"table {table_id!r} is not in optimizer group {self.name!r}")
        return table

    def _ordered_with_work(self, now: float) -> list[_Table]:
        """The tables that had PLANNED tasks, in policy order, as of at most `POLL_ORDER_TTL_S` ago."""
        computed_at = self._poll_order_at
        if computed_at is None or not computed_at <= now < computed_at + POLL_ORDER_TTL_S:
            with_work = [
                p.table for p in self._processes.values() if not p.finished and p.planned and not p.file_tasks
            ]
            self._poll_order = self._policy.order(with_work, now)
            self._poll_order_at = now
        return self._poll_order

    def _current(self, attempt_id: str, optimizer_id: str) -> _Task:
        task = self._attempts.get(attempt_id)
        if task is None:
            raise StaleAttempt(
                attempt_id, "not a current attempt: superseded, cancelled, already completed or unknown"
            )
        if task.optimizer_id != optimizer_id:
            raise StaleAttempt(attempt_id, "it was handed to another optimizer")
        return task

    def _hand_out(self, process: _Process, optimizer_id: str, thread: int, now: float) -> TaskAssignment:
        task = process.planned.popleft()
        task.attempts += 1
        attempt_id = f"{task.spec.task_id}-a{task.attempts}-{self._attempt_tag}{next(self._attempt_seq):x}"
        task.status = TaskStatus.SCHEDULED
        task.attempt_id = attempt_id
        task.optimizer_id = optimizer_id
        task.thread = thread
        task.scheduled_at = now
        process.in_flight.add(task)
        self._attempts[attempt_id] = task
        spec = task.spec
        if isinstance(spec, RewriteTaskSpec):
            # A superseded attempt may still be writing; its files must not collide with this one's.
            spec = spec.model_copy(update={"file_name_prefix": f"{spec.file_name_prefix}-a{task.attempts}"})
        task.assignment = TaskAssignment(
            attempt_id=attempt_id,
            task_id=task.spec.task_id,
            process_id=process.process_id,
            table=process.table.table_id,
            spec=spec,
        )
        return task.assignment

    def _start_running(self, task: _Task, started: float) -> None:
        assert task.attempt_id is not None
        task.status = TaskStatus.ACKED
        task.acked_at = started
        self._starts.append(started)
        if not task.process.file_tasks:
            self._ledger.start(task.process.table.table_id, task.attempt_id, started)

    def _detach_attempt(self, task: _Task) -> None:
        assert task.attempt_id is not None
        del self._attempts[task.attempt_id]
        task.process.in_flight.discard(task)
        task.attempt_id = None
        task.assignment = None
        task.optimizer_id = None
        task.thread = None

    def _end_attempt(self, task: _Task, now: float) -> None:
        if task.status is TaskStatus.ACKED and not task.process.file_tasks:
            assert task.attempt_id is not None
            self._ledger.stop(task.attempt_id, now)
        self._detach_attempt(task)

    def _return_to_planned(self, task: _Task, now: float) -> None:
        self._end_attempt(task, now)
        task.status = TaskStatus.PLANNED
        task.process.planned.appendleft(task)
        self._poll_order_at = None
        self._monitor.changed()

    def _fail(self, task: _Task, error: str, now: float) -> None:
        """Record a failed attempt (already ended): retry the task, or fail the process."""
        task.error = error
        process = task.process
        if task.retries < process.max_retries:
            task.retries += 1
            task.status = TaskStatus.PLANNED
            process.planned.appendleft(task)
            self._poll_order_at = None
            return
        task.status = TaskStatus.FAILED
        attempts = task.retries + 1
        task.error = f"{error} (failed {attempts} of {attempts} attempts)" if attempts > 1 else error
        self._cancel_remaining(process, now)
        self._finish(process)

    def _cancel_remaining(self, process: _Process, now: float) -> None:
        for task in list(process.in_flight):
            self._end_attempt(task, now)
            task.status = TaskStatus.CANCELED
        for task in process.planned:
            task.status = TaskStatus.CANCELED
        process.planned.clear()

    def _finish(self, process: _Process) -> None:
        process.finished = True
        if not process.file_tasks:  # those are taken by `file_tasks_outcome`, not committed
            self._finished.append(process)

    def _discard_process(self, process: _Process) -> None:
        del self._processes[process.process_id]
        self._file_processes.pop(process.process_id, None)
        if process.finished and not process.file_tasks:
            self._finished.remove(process)
        if process.table.process is process:
            process.table.process = None

    def _table_stats(self, table: _Table, now: float) -> TableSchedulingStats:
        process = table.process
        tasks = process.tasks if process is not None else []
        return TableSchedulingStats(
            table_id=table.table_id,
            occupation=table.occupation(now),
            quota_limit=table.limit,
            pending=table.pending,
            planning=table.planning,
            process_id=process.process_id if process is not None else None,
            running=len(process.in_flight) if process is not None else 0,
            planned=len(process.planned) if process is not None else 0,
            succeeded=sum(t.status is TaskStatus.SUCCESS for t in tasks),
            failed=sum(t.status is TaskStatus.FAILED for t in tasks),
            retries=sum(t.retries for t in tasks),
        )
