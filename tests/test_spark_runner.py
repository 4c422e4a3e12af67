"""Rewrite tasks as Spark jobs on conftest's local session: an outcome per task, failures kept apart."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from pyspark.sql import SparkSession

from floe.protocol.rewrite_task import OUT_OF_MEMORY, InputDataFile, RewriteTaskSpec
from floe_optimizer.spark_runner import TaskOutcome, describe_job_failure, run_tasks_on_spark

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=False),
)


def _data_file(path: Path, ids: list[int]) -> InputDataFile:
    table = pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=schema_to_pyarrow(SCHEMA))
    pq.write_table(table, path)
    return InputDataFile(
        path=str(path), record_count=len(ids), size_bytes=path.stat().st_size, data_sequence_number=1
    )


def _spec(tmp_path: Path, task_id: str, data: list[InputDataFile]) -> RewriteTaskSpec:
    return RewriteTaskSpec(
        task_id=task_id,
        io_properties={},
        table_schema_json=SCHEMA.model_dump_json(),
        partition_spec_json=UNPARTITIONED_PARTITION_SPEC.model_dump_json(),
        output_dir=str(tmp_path / "out"),
        data_files=data,
        target_file_size_bytes=128 * 1024 * 1024,
        delete_memory_limit_bytes=64 * 1024 * 1024,
        file_name_prefix=f"p1-{task_id}-a0",
    )


def test_tasks_run_on_spark_and_a_failure_stays_with_its_task(spark: SparkSession, tmp_path: Path) -> None:
    missing = tmp_path / "missing.parquet"
    specs = [
        _spec(
            tmp_path,
            "t1",
            [_data_file(tmp_path / "a.parquet", [1, 2]), _data_file(tmp_path / "b.parquet", [3])],
        ),
        _spec(
            tmp_path,
            "t2",
            [InputDataFile(path=str(missing), record_count=5, size_bytes=100, data_sequence_number=1)],
        ),
        _spec(tmp_path, "t3", [_data_file(tmp_path / "c.parquet", [4, 5, 6])]),
    ]
    reported: list[TaskOutcome] = []

    submitted = time.time()
    outcomes = run_tasks_on_spark(spark, specs, on_done=reported.append)
    finished = time.time()

    assert [o.task_id for o in outcomes] == ["t1", "t2", "t3"]
    assert sorted(o.task_id for o in reported) == ["t1", "t2", "t3"]
    first, failed, third = outcomes
    # Each task, the failed one too, says when it began in the worker: the wait before is the
    # executor's (and its Python worker's) to start.
    for outcome in outcomes:
        assert outcome.started_at is not None and submitted <= outcome.started_at <= finished
    assert failed.result is None
    assert failed.error is not None
    assert str(missing) in failed.error
    assert "FileNotFoundError" in failed.error
    for outcome, ids in ((first, [1, 2, 3]), (third, [4, 5, 6])):
        assert outcome.error is None
        assert outcome.result is not None
        assert outcome.result.rows_read == len(ids)
        (written,) = outcome.result.files
        assert sorted(pq.read_table(written.path).column("id").to_pylist()) == ids
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "p1-t1-a0-00000.parquet",
        "p1-t3-a0-00000.parquet",
    ]


def test_no_tasks_submit_nothing(spark: SparkSession) -> None:
    assert run_tasks_on_spark(spark, []) == []


def test_a_job_lost_to_memory_is_named_so_without_java_frames() -> None:
    spark_error = (
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.runJob.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 "
        "times, most recent failure: Lost task 0.0 in stage 3.0 (TID 3) (10.244.0.30 executor 1): "
        "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.hasNext(PythonRunner.scala:525)\n"
        "Caused by: java.io.EOFException\n"
        "\t... 32 more\n"
    )
    described = describe_job_failure(spark_error)
    assert described.startswith(f"{OUT_OF_MEMORY}: ") and "spec.executorMemory" in described
    assert "Python worker exited unexpectedly (crashed)" in described
    assert "\tat " not in described and "32 more" not in described
    lost = "ExecutorLostFailure (executor 2 exited caused by one of the running tasks) Reason: exit code 137"
    assert describe_job_failure(lost).startswith(OUT_OF_MEMORY)
    other = describe_job_failure("Job aborted: FileNotFoundException: s3://b/x.parquet\n\tat a.b(C.java:1)")
    assert other == "Spark job failed: Job aborted: FileNotFoundException: s3://b/x.parquet"
