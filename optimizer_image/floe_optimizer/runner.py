"""How the optimizer runs a task: the runner interface, the Spark runner, starting its Spark session,
and deleting the files of a refused result.
"""

from __future__ import annotations

import os
import uuid
from typing import Protocol

from pyiceberg.io import load_file_io
from pyspark.sql import SparkSession

from floe.kit.files import delete_paths
from floe.protocol.assignment import TaskSpec
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.protocol.storage import executor_io_properties
from floe_optimizer.spark_runner import TaskOutcome, run_tasks_on_spark
from floe_optimizer.spark_session import get_spark

APP_NAME = "floe-optimizer"


class TaskRunner(Protocol):
    """Runs one task (a rewrite, or a maintenance job's file task) to its outcome; called from
    several optimizer threads at once."""

    def run(self, spec: TaskSpec) -> TaskOutcome:
        """Run the task; its failure is an outcome with an error, not an exception."""
        ...

    def cancel(self) -> None:
        """Make the tasks running now end soon (with an error outcome)."""
        ...


class SparkTaskRunner:
    """Runs each task as one Spark job on the optimizer's session."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._tag = f"{APP_NAME}-{uuid.uuid4().hex[:12]}"

    def run(self, spec: TaskSpec) -> TaskOutcome:
        """Run `spec` as a Spark job and wait for its outcome."""
        # Job tags are thread-local and inherited by the threads that submit the job, so
        # cancel() reaches this runner's jobs and no other job of a shared session.
        self.spark.sparkContext.addJobTag(self._tag)
        [outcome] = run_tasks_on_spark(self.spark, [spec])
        return outcome

    def cancel(self) -> None:
        """Cancel the Spark jobs of the tasks running now."""
        self.spark.sparkContext.cancelJobsWithTag(self._tag)


def start_spark(master: str | None, threads: int) -> SparkSession:
    """The optimizer's SparkSession.

    Without `master`, ``SPARK_MASTER`` is used; under ``spark-submit`` (on Kubernetes) the
    session takes everything from spark-submit's configuration instead, since floe's local
    settings (a loopback driver address) would keep executors from reaching the driver.
    With no master anywhere, Spark runs locally with one core per task thread.
    """
    if master is None and "PYSPARK_GATEWAY_PORT" in os.environ:
        return SparkSession.builder.appName(APP_NAME).getOrCreate()
    master = master or os.environ.get("SPARK_MASTER") or f"local[{threads}]"
    if master.startswith("local"):
        return get_spark(master=master, app_name=APP_NAME)
    return SparkSession.builder.master(master).appName(APP_NAME).getOrCreate()


def discard_written_files(spec: RewriteTaskSpec, result: RewriteTaskResult) -> None:
    """Delete the files a task wrote whose outcome the service refused: nothing will commit them."""
    io = load_file_io(executor_io_properties(spec), location=spec.output_dir)
    delete_paths(io, [written.path for written in result.files])
