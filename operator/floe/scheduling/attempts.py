"""The processes of one optimizer group and the attempts at their tasks.

An attempt is a task handed to one optimizer thread. `AttemptBook` hands attempts out,
starts them running, ends them, and decides what an ended attempt means for its task and
process: a failed attempt puts the task back to PLANNED while it has retries left,
otherwise the process fails and its remaining tasks are CANCELED; an attempt taken back
without being the task's fault (its optimizer went away, it was never acked, its thread
polled again) returns the task to PLANNED without using a retry. Finished processes wait
here until the engine takes their outcomes.

Running attempts of optimizing processes count toward their table's quota in the ledger;
those of file tasks do not (their time is the maintenance job's, counted by the engine).
The book does no locking: the `GroupScheduler` owning it calls it holding the group's lock.
"""

from __future__ import annotations

import itertools
import uuid
from collections import deque
from collections.abc import Callable, Sequence

from floe.kit.monitor import ChangeMonitor
from floe.protocol.assignment import TaskAssignment
from floe.protocol.errors import InvalidRequest, StaleAttempt
from floe.protocol.file_tasks import FileTaskResult, FileTaskSpec
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.scheduling.occupation import TaskTimeLedger
from floe.scheduling.records import (
    FileTasksOutcome,
    ProcessOutcome,
    ProcessRecord,
    ResultCheck,
    TableRecord,
    TaskRecord,
    TaskStatus,
)

RECENT_STARTS = 1024
"""Task start times a group keeps, for the time from a scale-up to its first running task."""


class AttemptBook:
    """A group's processes in flight, the attempts at their tasks, and the processes finished."""

    def __init__(self, ledger: TaskTimeLedger, monitor: ChangeMonitor, requeued: Callable[[], None]) -> None:
        """``requeued`` is called whenever a task goes back to PLANNED."""
        self.processes: dict[str, ProcessRecord] = {}
        self.file_processes: dict[str, ProcessRecord] = {}
        self.starts: deque[float] = deque(maxlen=RECENT_STARTS)
        self._ledger = ledger
        self._monitor = monitor
        self._requeued = requeued
        self._attempts: dict[str, TaskRecord] = {}
        self._finished: list[ProcessRecord] = []
        # Attempt ids only need to be unique: a counter is much cheaper than a uuid4 (an
        # os.urandom call) per hand-out, and the random tag keeps the ids of a scheduler
        # created again (an operator restart, a group re-created) apart from the old ones.
        self._attempt_tag = uuid.uuid4().hex[:8]
        self._attempt_seq = itertools.count()

    def add(
        self,
        table: TableRecord,
        process_id: str,
        specs: Sequence[RewriteTaskSpec] | Sequence[FileTaskSpec],
        max_retries: int,
        allow_partial_commit: bool,
        file_tasks: bool,
    ) -> ProcessRecord:
        """Record a process of ``specs``, every task PLANNED; ValueError when its id is in use."""
        if process_id in self.processes:
            raise ValueError(f"process id {process_id!r} is already in use")
        process = ProcessRecord(process_id, table, max_retries, allow_partial_commit, file_tasks)
        process.tasks = [TaskRecord(spec, process) for spec in specs]
        process.planned.extend(process.tasks)
        self.processes[process_id] = process
        if file_tasks:
            self.file_processes[process_id] = process
        return process

    def ready(self, within_caps: bool) -> int:
        """PLANNED tasks of the unfinished processes: all of them, or those within their tables' caps."""
        unfinished = [p for p in self.processes.values() if not p.finished]
        if within_caps:
            return sum(p.headroom() for p in unfinished)
        return sum(len(p.planned) for p in unfinished)

    def tables_with_work(self) -> list[TableRecord]:
        """The tables whose optimizing process has PLANNED tasks."""
        return [p.table for p in self.processes.values() if not p.finished and p.planned and not p.file_tasks]

    def tasks_by_table(self) -> dict[str, tuple[int, int]]:
        """Running and planned tasks of each table with a process (its file tasks included)."""
        tasks: dict[str, tuple[int, int]] = {}
        for p in self.processes.values():
            if p.table.process is p or (p.file_tasks and not p.finished):
                running, planned = tasks.get(p.table.table_id, (0, 0))
                tasks[p.table.table_id] = (running + len(p.in_flight), planned + len(p.planned))
        return tasks

    def hand_out(self, process: ProcessRecord, optimizer_id: str, thread: int, now: float) -> TaskAssignment:
        """A new attempt at the process's next PLANNED task, for this optimizer thread."""
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

    def ack(self, attempt_id: str, optimizer_id: str, now: float) -> None:
        """The attempt started running now, unless it already had."""
        task = self._current(attempt_id, optimizer_id)
        if task.status is TaskStatus.SCHEDULED:
            self._start_running(task, now)

    def assignment(self, attempt_id: str, optimizer_id: str) -> TaskAssignment:
        """The optimizer's current attempt as it was handed out."""
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
        """End the attempt with its result, or with its error message (using a retry)."""
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
                self._finish(process, now)
        else:
            self._fail(task, outcome, now)
        self._monitor.changed()

    def release(self, optimizer_id: str, now: float, thread: int | None = None) -> int:
        """Take back the optimizer's attempts (on ``thread`` only, if given) without using
        retries; returns how many."""
        tasks = [t for t in self._attempts.values() if t.optimizer_id == optimizer_id]
        if thread is not None:
            tasks = [t for t in tasks if t.thread == thread]
        for task in tasks:
            self._return_to_planned(task, now)
        return len(tasks)

    def expire(self, now: float, ack_timeout_s: float, execute_timeout_s: float) -> None:
        """Unacked attempts go back to PLANNED, overlong ones fail (using a retry)."""
        for task in list(self._attempts.values()):
            # Statuses are re-read: an earlier failure in this pass may have cancelled this task.
            if task.status is TaskStatus.SCHEDULED and now - task.scheduled_at > ack_timeout_s:
                self._return_to_planned(task, now)
            elif task.status is TaskStatus.ACKED and now - task.acked_at > execute_timeout_s:
                self._end_attempt(task, now)
                self._fail(task, f"no completion within the execute timeout of {execute_timeout_s:g}s", now)
                self._monitor.changed()

    def result_check(self, attempt_id: str, optimizer_id: str) -> ResultCheck | None:
        """The result check of the process a current attempt belongs to (None: the default);
        StaleAttempt if the attempt is not current."""
        return self._current(attempt_id, optimizer_id).process.check

    def take_finished(self) -> list[ProcessOutcome]:
        """The optimizing processes finished since the last call, forgotten from here on."""
        outcomes = [
            ProcessOutcome(
                table_id=p.table.table_id,
                process_id=p.process_id,
                results=[t.result for t in p.tasks if isinstance(t.result, RewriteTaskResult)],
                failures={t.spec.task_id: t.error or "" for t in p.tasks if t.status is TaskStatus.FAILED},
                succeeded=all(t.status is TaskStatus.SUCCESS for t in p.tasks),
                allow_partial_commit=p.allow_partial_commit,
                work=p.work(),
            )
            for p in self._finished
        ]
        for process in list(self._finished):
            self._discard_process(process)
        return outcomes

    def file_tasks_outcome(self, process_id: str) -> FileTasksOutcome | None:
        """The outcome of file tasks once all ended (the process is then forgotten), None before;
        KeyError when the process is unknown."""
        process = self.file_processes[process_id]
        if not process.finished:
            return None
        succeeded = all(t.status is TaskStatus.SUCCESS for t in process.tasks)
        outcome = FileTasksOutcome(
            process_id=process_id,
            results=[t.result for t in process.tasks if isinstance(t.result, FileTaskResult)]
            if succeeded
            else [],
            failures={t.spec.task_id: t.error or "" for t in process.tasks if t.status is TaskStatus.FAILED},
            succeeded=succeeded,
            work=process.work(),
        )
        self._discard_process(process)
        return outcome

    def cancel(self, process_id: str, now: float) -> bool:
        """Cancel the process's remaining tasks and forget it; False if unknown."""
        process = self.processes.get(process_id)
        if process is None:
            return False
        self._cancel_remaining(process, now)
        self._discard_process(process)
        return True

    def drop_table(self, table: TableRecord) -> None:
        """Forget the table's processes; their attempts out become stale. The table's time in the
        ledger is the caller's to forget."""
        processes = [p for p in self.file_processes.values() if p.table is table]
        if table.process is not None:
            processes.append(table.process)
        for process in processes:
            for task in list(process.in_flight):
                self._detach_attempt(task)
                task.status = TaskStatus.CANCELED
            self._discard_process(process)

    def _current(self, attempt_id: str, optimizer_id: str) -> TaskRecord:
        task = self._attempts.get(attempt_id)
        if task is None:
            raise StaleAttempt(
                attempt_id, "not a current attempt: superseded, cancelled, already completed or unknown"
            )
        if task.optimizer_id != optimizer_id:
            raise StaleAttempt(attempt_id, "it was handed to another optimizer")
        return task

    def _start_running(self, task: TaskRecord, started: float) -> None:
        assert task.attempt_id is not None
        task.status = TaskStatus.ACKED
        task.acked_at = started
        self.starts.append(started)
        if task.process.first_started_s is None:
            task.process.first_started_s = started
        if not task.process.file_tasks:
            self._ledger.start(task.process.table.table_id, task.attempt_id, started)

    def _detach_attempt(self, task: TaskRecord) -> None:
        assert task.attempt_id is not None
        del self._attempts[task.attempt_id]
        task.process.in_flight.discard(task)
        task.attempt_id = None
        task.assignment = None
        task.optimizer_id = None
        task.thread = None

    def _end_attempt(self, task: TaskRecord, now: float) -> None:
        if task.status is TaskStatus.ACKED:
            task.process.task_seconds += max(0.0, now - task.acked_at)
            if not task.process.file_tasks:
                assert task.attempt_id is not None
                self._ledger.stop(task.attempt_id, now)
        self._detach_attempt(task)

    def _return_to_planned(self, task: TaskRecord, now: float) -> None:
        self._end_attempt(task, now)
        task.status = TaskStatus.PLANNED
        task.process.planned.appendleft(task)
        self._requeued()
        self._monitor.changed()

    def _fail(self, task: TaskRecord, error: str, now: float) -> None:
        """Record a failed attempt (already ended): retry the task, or fail the process."""
        task.error = error
        process = task.process
        if task.retries < process.max_retries:
            task.retries += 1
            task.status = TaskStatus.PLANNED
            process.planned.appendleft(task)
            self._requeued()
            return
        task.status = TaskStatus.FAILED
        attempts = task.retries + 1
        task.error = f"{error} (failed {attempts} of {attempts} attempts)" if attempts > 1 else error
        self._cancel_remaining(process, now)
        self._finish(process, now)

    def _cancel_remaining(self, process: ProcessRecord, now: float) -> None:
        for task in list(process.in_flight):
            self._end_attempt(task, now)
            task.status = TaskStatus.CANCELED
        for task in process.planned:
            task.status = TaskStatus.CANCELED
        process.planned.clear()

    def _finish(self, process: ProcessRecord, now: float) -> None:
        process.finished = True
        process.finished_s = now
        if not process.file_tasks:  # those are taken by `file_tasks_outcome`, not committed
            self._finished.append(process)
            if process.on_finished is not None:
                # Outside the lock: its committer takes the outcome at once, not on a later round.
                self._monitor.after_release(process.on_finished)

    def _discard_process(self, process: ProcessRecord) -> None:
        del self.processes[process.process_id]
        self.file_processes.pop(process.process_id, None)
        if process.finished and not process.file_tasks:
            self._finished.remove(process)
        if process.table.process is process:
            process.table.process = None
        # Each task points back at its process: let go of them so the pair is freed at once by
        # reference counting. Left to the cyclic collector they pile up in its oldest generation,
        # whose full passes paused the task service's answers 100-250 ms at a time under load.
        process.tasks.clear()
        process.planned.clear()
        process.in_flight.clear()
