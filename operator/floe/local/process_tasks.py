"""The tasks of one optimizing process run on a local Spark, retried and cancelled as the engine's.

`run_process_tasks` queues the process in a private `GroupScheduler` (one table, one local
optimizer with a thread per Spark core: the engine's scheduler, without its service) and plays
the optimizer's part. Each idle thread polls an attempt and runs it as a Spark job
(`run_tasks_on_spark`); on the driver, its result is checked as the task service checks a remote
optimizer's (`OptimizingProcess.check`) and completed. A failed or refused attempt uses one of the task's
retries; a task out of them ends the process and cancels the rest, as in the engine.

Whatever the end (the process finished, failed, or the caller was interrupted), the Spark jobs
still running are cancelled and every one has returned, and the executors are idle, before this
returns: no file of the process is written after it, so the process's cleanup misses none.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from pyspark import inheritable_thread_target
from pyspark.sql import SparkSession

from floe.api.group import SchedulingPolicy
from floe.optimizing.process import OptimizingProcess
from floe.protocol.assignment import TaskAssignment
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.rewrite.result_check import ResultCheckFailed
from floe.scheduling.group_scheduler import GroupScheduler
from floe.scheduling.records import ProcessOutcome
from floe_optimizer.spark_runner import TaskOutcome, run_tasks_on_spark, wait_for_idle_executors

OPTIMIZER_ID = "local"
"""The one optimizer registered in the private scheduler."""

CANCEL_AGAIN_S = 0.5
"""How often the cancelling is repeated while jobs still run: a job submitted just after a
cancel (its thread was on its way to Spark) is not in it."""


@dataclass
class TaskRun:
    """What the tasks of a process did."""

    accepted: list[RewriteTaskResult] = field(default_factory=list)
    """Results checked and completed so far (the files an abandoned process reported)."""
    check_seconds: float = 0.0
    """Time spent checking results (`OptimizingProcess.check`), footers read included."""
    outcome: ProcessOutcome | None = None
    """The scheduler's outcome, once the process ended."""


def run_process_tasks(
    process: OptimizingProcess,
    session: SparkSession,
    max_retries: int,
    allow_partial_commit: bool,
    run: TaskRun,
    on_task_done: Callable[[TaskOutcome], None] | None = None,
) -> ProcessOutcome:
    """Run the process's tasks to its end and return the scheduler's outcome of it (`run` holds
    what was accepted on the way, for a caller interrupted meanwhile).

    Each task may retry `max_retries` failed attempts; with `allow_partial_commit` the outcome
    says so. `on_task_done` is called on the calling thread as each attempt ends, while the
    process runs.
    """
    threads = max(1, session.sparkContext.defaultParallelism)
    table_id = process.planned.table_name
    # Nothing calls `expire`: the attempts are this driver's own jobs, so no timeout is read.
    scheduler = GroupScheduler("local", SchedulingPolicy.QUOTA, ack_timeout_s=0.0, execute_timeout_s=0.0)
    scheduler.threads = threads
    scheduler.upsert_table(table_id, quota=1.0, last_optimized_s=None)  # the whole group
    scheduler.add_process(
        table_id, process.process_id, process.planned.specs, max_retries, allow_partial_commit
    )
    tasks = _Tasks(process, session, scheduler, run, on_task_done)
    # Wrapped on the calling thread, so the jobs inherit its Spark local properties.
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="floe-task") as pool:
        try:
            tasks.drive(pool, inheritable_thread_target(tasks.run_job), list(range(threads)))
        finally:
            tasks.stop()
    assert run.outcome is not None, "drive returns once the process ended"
    return run.outcome


class _Tasks:
    """The optimizer's part: attempts out on Spark, each on a thread of the scheduler's."""

    def __init__(
        self,
        process: OptimizingProcess,
        session: SparkSession,
        scheduler: GroupScheduler,
        run: TaskRun,
        on_task_done: Callable[[TaskOutcome], None] | None,
    ) -> None:
        self._process = process
        self._session = session
        self._scheduler = scheduler
        self._run = run
        self._on_task_done = on_task_done
        self._job_group = f"floe-optimize-{process.process_id}-{uuid.uuid4().hex[:8]}"
        self._running: dict[Future[TaskOutcome], tuple[int, TaskAssignment]] = {}

    def run_job(self, spec: RewriteTaskSpec) -> TaskOutcome:
        """One attempt as a Spark job of the process's job group (on a pool thread)."""
        [outcome] = run_tasks_on_spark(self._session, [spec], job_group=self._job_group)
        return outcome

    def drive(
        self, pool: ThreadPoolExecutor, run_job: Callable[[RewriteTaskSpec], TaskOutcome], idle: list[int]
    ) -> None:
        """Hand attempts to idle threads and complete them as they end, until the process ended."""
        while self._run.outcome is None:
            while idle:
                assignment = self._scheduler.poll(OPTIMIZER_ID, idle[0], time.monotonic())
                if assignment is None:
                    break
                self._scheduler.ack(assignment.attempt_id, OPTIMIZER_ID, time.monotonic())
                assert isinstance(assignment.spec, RewriteTaskSpec), "an optimizing process's task"
                self._running[pool.submit(run_job, assignment.spec)] = (idle.pop(0), assignment)
            assert self._running, "a process not ended has a task to run or running"
            done, _ = wait(self._running, return_when=FIRST_COMPLETED)
            for future in done:
                thread, assignment = self._running.pop(future)
                idle.append(thread)
                if self._run.outcome is None:
                    self._complete(assignment, future.result())

    def _complete(self, assignment: TaskAssignment, outcome: TaskOutcome) -> None:
        if self._on_task_done is not None:
            self._on_task_done(outcome)
        completion: RewriteTaskResult | str = outcome.error or "the task ended without a result"
        if isinstance(outcome.result, RewriteTaskResult):
            assert isinstance(assignment.spec, RewriteTaskSpec)
            checking = time.perf_counter()
            try:
                # Held to the same checks as a remote optimizer's result.
                self._process.check(assignment.spec, outcome.result)
            except ResultCheckFailed as exc:
                # A failed attempt: its own files go now, no other task's.
                self._process.delete_refused(assignment.spec, outcome.result)
                completion = f"result refused ({exc.check}): {exc}"
            else:
                self._run.check_seconds += time.perf_counter() - checking
                completion = outcome.result
        self._scheduler.complete(assignment.attempt_id, OPTIMIZER_ID, completion, time.monotonic())
        if isinstance(completion, RewriteTaskResult):
            self._run.accepted.append(completion)
        finished = self._scheduler.take_finished()
        if finished:
            [self._run.outcome] = finished

    def stop(self) -> None:
        """Cancel the jobs still running, wait until every one returned and the executors are
        idle (a cancelled task's worker may still be writing)."""
        if not self._running:
            return
        context = self._session.sparkContext
        while self._running:
            context.cancelJobGroup(self._job_group)
            done, _ = wait(self._running, timeout=CANCEL_AGAIN_S)
            for future in done:
                del self._running[future]
        wait_for_idle_executors(self._session)
