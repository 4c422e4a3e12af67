"""Run tasks as Spark jobs, one job per task, reporting each outcome as it finishes.

A task is a rewrite (`floe.rewrite.task`) or a maintenance job's file task (an orphan
scan or deletes, `floe.protocol.file_tasks`): either way the executor does the I/O.

The specs travel as JSON in one RDD with a partition per task. A thread pool submits one
job per partition, as many at a time as the cluster has cores, so progress is known task
by task and one failed task (caught in the worker, or a failed Spark job) fails nothing
else.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from pydantic import TypeAdapter
from pyspark import RDD, SparkContext, inheritable_thread_target
from pyspark.sql import SparkSession

from floe.maintenance.executor import run_file_task
from floe.protocol.assignment import TaskSpec
from floe.protocol.rewrite_task import OUT_OF_MEMORY, RewriteTaskSpec
from floe.protocol.storage import executor_io_properties
from floe.protocol.wire import TaskResult
from floe.rewrite.task import run_task

_SPECS: TypeAdapter[TaskSpec] = TypeAdapter(TaskSpec)
_RESULTS: TypeAdapter[TaskResult] = TypeAdapter(TaskResult)

MAX_ERROR_CHARS = 4000
"""Longer error texts (Spark's carry whole JVM stack traces) are cut to this length."""


@dataclass(frozen=True)
class TaskOutcome:
    """How one task ended: a result, or the error that stopped it.

    `started_at` is when the task began in an executor's Python worker (epoch seconds, the
    executor's clock), None when it never began there. From the handout to Spark until then the
    task waited for an executor (one starting, when a group wakes from zero) and its worker."""

    task_id: str
    result: TaskResult | None
    error: str | None
    started_at: float | None = None


def run_tasks_on_spark(
    spark: SparkSession,
    specs: Sequence[TaskSpec],
    on_done: Callable[[TaskOutcome], None] | None = None,
    max_concurrent: int | None = None,
    job_group: str | None = None,
) -> list[TaskOutcome]:
    """Run every task on Spark and return their outcomes in the order of `specs`.

    `on_done` is called on the calling thread as each task finishes. Tasks run
    `max_concurrent` at a time, by default Spark's default parallelism (its cores).
    If the caller is interrupted, the jobs still running are cancelled. The jobs are in Spark
    job group `job_group` (a new one by default): another thread cancels them through it.
    """
    if not specs:
        return []
    context = spark.sparkContext
    tasks = context.parallelize([spec.model_dump_json() for spec in specs], len(specs))
    job_group = job_group or f"floe-rewrite-{uuid.uuid4().hex}"
    # Wrapped here, on the caller's thread, so the jobs inherit its Spark local properties.
    run_job = inheritable_thread_target(_run_job)
    workers = max(1, min(len(specs), max_concurrent or context.defaultParallelism))
    outcomes: dict[int, TaskOutcome] = {}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="floe-rewrite") as pool:
        futures: dict[Future[TaskOutcome], int] = {
            pool.submit(run_job, context, tasks, index, spec.task_id, job_group): index
            for index, spec in enumerate(specs)
        }
        try:
            for future in as_completed(futures):
                outcome = future.result()
                outcomes[futures[future]] = outcome
                if on_done is not None:
                    on_done(outcome)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            context.cancelJobGroup(job_group)
            raise
    return [outcomes[index] for index in range(len(specs))]


def wait_for_idle_executors(spark: SparkSession, timeout_s: float = 30.0) -> bool:
    """Wait until no executor runs a task (cancelled ones included, which Spark stops with
    their Python workers); False if some still run after `timeout_s`. Files a cancelled task
    wrote can only be removed for good once it has stopped writing."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout_s
    while sum(info.numRunningTasks() for info in tracker.getExecutorInfos()) > 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _run_job(context: SparkContext, tasks: RDD[str], index: int, task_id: str, job_group: str) -> TaskOutcome:
    context.setJobGroup(job_group, f"floe rewrite {task_id}", interruptOnCancel=True)
    try:
        rows: list[tuple[str, str | None, str | None, float]] = context.runJob(tasks, _run_partition, [index])
    except Exception as exc:
        return TaskOutcome(task_id, None, _clip(describe_job_failure(str(exc))))
    [(_, result_json, error, started_at)] = rows
    result = _RESULTS.validate_json(result_json) if result_json is not None else None
    return TaskOutcome(task_id, result, error, started_at)


def describe_job_failure(message: str) -> str:
    """A failed Spark job's error without its Java stack frames, named for what a user can do.

    An executor, or the Python worker doing the rewrite inside it, killed for memory (the
    kernel picks the worker, the largest process, when the pod's cgroup is full; Kubernetes
    reports the whole container only when the kill takes it) becomes `OUT_OF_MEMORY`.
    """
    kept = [
        line.strip()
        for line in message.splitlines()
        if line.strip() and not line.startswith("\tat ") and not _ELIDED_FRAMES.match(line)
    ]
    text = " ".join(kept)
    if any(sign in message for sign in _KILLED_FOR_MEMORY):
        return (
            f"{OUT_OF_MEMORY}: the executor or its Python worker was killed while rewriting, most "
            f"likely for using more than the executor pod's memory limit; raise spec.executorMemory. "
            f"Spark: {text}"
        )
    return f"Spark job failed: {text}"


def _run_partition(spec_jsons: Iterable[str]) -> Iterator[tuple[str, str | None, str | None, float]]:
    """Worker side: run each task of the partition, turning its failure into an error text; each
    row ends with the time the task began here."""
    for spec_json in spec_jsons:
        started_at = time.time()
        spec = _SPECS.validate_json(spec_json)
        try:
            result: TaskResult = (
                run_task(spec)
                if isinstance(spec, RewriteTaskSpec)
                else run_file_task(spec, executor_io_properties(spec))
            )
        except Exception as exc:
            yield spec.task_id, None, _clip(f"{type(exc).__name__}: {exc}"), started_at
        else:
            yield spec.task_id, result.model_dump_json(), None, started_at


_KILLED_FOR_MEMORY = (
    "Python worker exited unexpectedly (crashed)",
    "exit code 137",
    "possible container OOM",
    "OOMKilled",
)
_ELIDED_FRAMES = re.compile(r"^\s*\.\.\. \d+ more$")


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."
