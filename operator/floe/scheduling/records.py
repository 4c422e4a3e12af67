"""What a group's scheduler records: tasks, processes and tables, and what it reports of them.

The records are plain mutable state, changed only by `floe.scheduling.group_scheduler` and
`floe.scheduling.attempts` under the group's lock. A task's states: PLANNED → SCHEDULED
(handed out) → ACKED (running) → SUCCESS | FAILED, or CANCELED with its process.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from floe.protocol.assignment import TaskAssignment
from floe.protocol.file_tasks import FileTaskResult, FileTaskSpec
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.scheduling.occupation import TaskTimeLedger


class ResultCheck(Protocol):
    """How the results of a process's tasks are checked before they count: the process's own
    check, against its own table's storage."""

    def check(self, spec: RewriteTaskSpec, result: RewriteTaskResult) -> None:
        """Raise ResultCheckFailed unless `result` is what `spec`'s attempt may produce; OSError
        when the storage does not answer."""

    def delete_refused(self, spec: RewriteTaskSpec, result: RewriteTaskResult) -> list[str]:
        """Delete the files of a refused `result` that the attempt may have written; returns
        the paths deleted or already gone."""


class TaskStatus(StrEnum):
    """Where a task is in its life."""

    PLANNED = "PLANNED"
    SCHEDULED = "SCHEDULED"
    ACKED = "ACKED"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


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
    work: ProcessWork | None = None
    """When its tasks ran and what they took (None from callers that do not track it)."""


@dataclass(frozen=True)
class ProcessWork:
    """When a process's tasks ran and the executor time they took, for its run history."""

    first_started_s: float | None
    """When its first attempt started running; None when none ever did."""
    finished_s: float
    """When its last task ended."""
    task_seconds: float
    """Wall time of every attempt that ran, retried and failed ones too: each holds one
    executor core while it runs."""
    attempts: int
    """Attempts handed out, the retried and the taken-back ones included."""


@dataclass(frozen=True)
class FileTasksOutcome:
    """A finished process of file tasks: every result in task order when ``succeeded``,
    otherwise the last error of each task that ran out of retries."""

    process_id: str
    results: list[FileTaskResult]
    failures: dict[str, str]
    succeeded: bool
    work: ProcessWork | None = None


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


@dataclass(frozen=True)
class PlanningQueue:
    """A group's pending tables in the order it plans them, and what holds planning back."""

    table_ids: tuple[str, ...]
    threads: int
    """The threads the group plans for (0: none registered, and none expected)."""
    threads_taken: bool
    """Planned tasks already fill every thread: nothing is planned until some start."""


@dataclass(eq=False)
class TaskRecord:
    """A task of a process and its current attempt, if one is out."""

    spec: RewriteTaskSpec | FileTaskSpec
    process: ProcessRecord
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
class ProcessRecord:
    """A process in the scheduler: its tasks, the PLANNED ones in hand-out order, those in flight."""

    process_id: str
    table: TableRecord
    max_retries: int
    allow_partial_commit: bool
    file_tasks: bool = False
    """A maintenance job's file tasks, not the table's optimizing process."""
    tasks: list[TaskRecord] = field(default_factory=list)
    planned: deque[TaskRecord] = field(default_factory=deque)
    in_flight: set[TaskRecord] = field(default_factory=set)
    finished: bool = False
    check: ResultCheck | None = None
    """Its own result check; None: the task service's default."""
    on_finished: Callable[[], None] | None = None
    """Called once it finishes, on the finishing thread after the lock is released."""
    first_started_s: float | None = None
    finished_s: float = 0.0
    task_seconds: float = 0.0
    """Wall time of its attempts that ended (`ProcessWork.task_seconds`)."""

    def work(self) -> ProcessWork:
        """When its tasks ran and what they took, once it finished."""
        return ProcessWork(
            first_started_s=self.first_started_s,
            finished_s=self.finished_s,
            task_seconds=self.task_seconds,
            attempts=sum(t.attempts for t in self.tasks),
        )

    def headroom(self) -> int:
        """PLANNED tasks that could be handed out now without breaking the table's cap."""
        return min(len(self.planned), max(0, math.ceil(self.table.limit) - len(self.in_flight)))


@dataclass(eq=False)
class TableRecord:
    """A table of the group: its quota and cap, whether work is due, its optimizing process."""

    table_id: str
    quota: float
    last_optimized_s: float | None
    ledger: TaskTimeLedger
    limit: float = 0.0
    pending: bool = False
    planning: bool = False
    process: ProcessRecord | None = None

    def occupation(self, now: float) -> float:
        """The table's quota occupation at ``now``."""
        return self.ledger.occupation(self.table_id, now, self.limit)

    def stats(self, now: float) -> TableSchedulingStats:
        """The table as the scheduler sees it at ``now``."""
        process = self.process
        tasks = process.tasks if process is not None else []
        return TableSchedulingStats(
            table_id=self.table_id,
            occupation=self.occupation(now),
            quota_limit=self.limit,
            pending=self.pending,
            planning=self.planning,
            process_id=process.process_id if process is not None else None,
            running=len(process.in_flight) if process is not None else 0,
            planned=len(process.planned) if process is not None else 0,
            succeeded=sum(t.status is TaskStatus.SUCCESS for t in tasks),
            failed=sum(t.status is TaskStatus.FAILED for t in tasks),
            retries=sum(t.retries for t in tasks),
        )


class PlanningMarks:
    """A group's pending and planning tables by id, kept beside their records' flags (set them
    with `mark`): a round looks at these few, not at every table of a group of thousands of idle ones."""

    def __init__(self) -> None:
        self.pending: set[str] = set()
        self.planning: set[str] = set()

    def mark(self, table: TableRecord, *, pending: bool, planning: bool | None = None) -> None:
        """Set the table's pending flag, and its planning flag unless None."""
        table.pending = pending
        (self.pending.add if pending else self.pending.discard)(table.table_id)
        if planning is not None:
            table.planning = planning
            (self.planning.add if planning else self.planning.discard)(table.table_id)

    def forget(self, table_id: str) -> None:
        """The table left the group."""
        self.pending.discard(table_id)
        self.planning.discard(table_id)

    def waiting(self, tables: Mapping[str, TableRecord]) -> list[TableRecord]:
        """The pending tables of `tables` neither planning nor with a process."""
        marked = (tables[table_id] for table_id in self.pending)
        return [table for table in marked if not table.planning and table.process is None]
