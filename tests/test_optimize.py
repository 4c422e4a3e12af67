"""`floe optimize` and `floe demo` end to end, and how a failing process leaves the table."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import FileIO
from pyspark.sql import SparkSession
from rich.console import Console
from test_correctness import (
    LAYOUTS,
    MOR,
    SCHEMA,
    Writer,
    build_table,
    data_files_on_disk,
    optimize,
    rows_at,
)

from floe.cli import main
from floe.local import process_tasks
from floe.local.demo import run_demo
from floe.local.reference_reader import ReferenceReader
from floe.optimizing import process as optimizing_process
from floe.optimizing.commit_request import ProcessFailed
from floe.planning.plan import OptimizingType
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.rewrite.result_check import ResultCheckFailed, check_result
from floe.tables.scan import scan_table
from floe.tables.writer import conform
from floe_optimizer.spark_runner import TaskOutcome, run_tasks_on_spark


def _table_of_partitions(catalog: SqlCatalog, cats: str, files: int) -> tuple[Any, Writer]:
    """A table with one identity partition per letter of `cats`, each of `files` small files."""
    table = catalog.create_table("db.t", SCHEMA, partition_spec=LAYOUTS["identity"], properties=MOR)
    writer = Writer(table)
    for cat in cats:
        for _ in range(files):
            batch = writer.rows(10).set_column(1, "cat", pa.array([cat] * 10, pa.string()))
            for i in batch["id"].to_pylist():
                writer.keys[i] = (cat, writer.keys[i][1])
            table.append(conform(table, batch))
    return table, writer


def _config_file(catalog: SqlCatalog, tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump({"catalog": {catalog.name: {"type": "sql", **catalog.properties}}}))
    return path


def test_floe_optimize_command(
    sql_catalog: SqlCatalog, reference: ReferenceReader, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, _ = build_table(sql_catalog, reference, "identity")
    before = rows_at(reference, sql_catalog)
    files_before = len(scan_table(table).files.data_files)

    code = main(
        ["optimize", "--catalog-config", str(_config_file(sql_catalog, tmp_path)), "db.t", "--type", "full"]
    )

    assert code == 0
    printed = capsys.readouterr().out
    assert "db.t: full optimizing committed snapshot" in printed
    assert rows_at(reference, sql_catalog) == before
    table.refresh()
    after = scan_table(table).files
    assert len(after.data_files) < files_before and after.delete_files == ()


def test_delete_set_over_budget_fails_clearly_and_changes_nothing(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, _ = build_table(sql_catalog, reference, "identity", evolve_schema=False)
    snapshot = table.current_snapshot()
    files_before = data_files_on_disk(table)

    with pytest.raises(ProcessFailed, match="DeleteSetTooLarge"):
        optimize(
            table,
            spark,
            OptimizingType.FULL,
            num_retries=1,
            delete_memory_limit=64,
        )
    table.refresh()
    assert table.current_snapshot() == snapshot
    assert data_files_on_disk(table) == files_before


def test_partial_commit_keeps_what_succeeded(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, writer = _table_of_partitions(sql_catalog, "ab", 4)
    writer.delete_keys([0])  # partition a only
    before = rows_at(reference, sql_catalog)
    b_done = threading.Event()

    def a_after_b(
        session: SparkSession, specs: Sequence[RewriteTaskSpec], **kwargs: Any
    ) -> list[TaskOutcome]:
        # A task out of retries cancels the others: b's must have succeeded by then.
        [spec] = specs
        if spec.delete_files:
            assert b_done.wait(timeout=120), "partition b's task ended"
            return run_tasks_on_spark(session, specs, **kwargs)
        outcomes = run_tasks_on_spark(session, specs, **kwargs)
        b_done.set()
        return outcomes

    monkeypatch.setattr(process_tasks, "run_tasks_on_spark", a_after_b)
    # Partition a's task cannot load its deletes within the budget and fails; b's has none.
    result = optimize(
        table,
        spark,
        OptimizingType.FULL,
        num_retries=0,
        allow_partial_commit=True,
        delete_memory_limit=1,
    )

    assert result.commit is not None
    assert len(result.task_results) == 1 and len(result.task_errors) == 1
    assert rows_at(reference, sql_catalog) == before
    after = scan_table(table).files
    by_partition = {v: sum(1 for f in after.data_files if f.partition.values == (v,)) for v in "ab"}
    assert by_partition == {"a": 4, "b": 1}
    assert len(after.delete_files) == 1


def test_floe_demo_runs_end_to_end(tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    assert run_demo(tmp_path / "demo", cores=2, scale=0.15, console=console) == 0
    text = console.export_text()
    assert text.count("rows unchanged") == 4
    assert "ROWS DIFFER" not in text


def test_a_refused_result_deletes_only_its_own_files(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`floe optimize` refuses one task's first result: only that result's files go (the retry
    writes them again); the other tasks' accepted files stay and the commit references them."""
    table, _ = _table_of_partitions(sql_catalog, "abc", 3)
    before = rows_at(reference, sql_catalog)
    refused: list[str] = []

    def check_refusing_the_last_task_once(
        spec: RewriteTaskSpec, result: RewriteTaskResult, io: FileIO
    ) -> None:
        # The last task is handed out after another one's result was accepted: its files stay.
        if spec.task_id.endswith("-t0002") and not refused:
            refused.append(spec.task_id)
            raise ResultCheckFailed("rows", "refused by the test")
        check_result(spec, result, io)

    monkeypatch.setattr(optimizing_process, "check_result", check_refusing_the_last_task_once)
    result = optimize(table, spark, OptimizingType.FULL)

    assert refused and result.commit is not None and len(result.task_results) == 3
    table.refresh()
    live = {f.path for f in scan_table(table).files.data_files}
    assert len(live) == 3
    assert all(Path(path.removeprefix("file://")).exists() for path in live), (
        "the commit references deleted files"
    )
    assert rows_at(reference, sql_catalog) == before


def test_a_task_out_of_retries_cancels_the_others_and_leaves_nothing(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in the engine, a task out of retries ends the process: the tasks not started are
    cancelled, a running one's Spark job too, nothing is committed and no file of it stays."""
    table, _ = _table_of_partitions(sql_catalog, "abcd", 3)
    before = rows_at(reference, sql_catalog)
    snapshot = table.current_snapshot()
    files_before = data_files_on_disk(table)
    started: list[str] = []
    first_failed = threading.Event()

    def first_fails(
        session: SparkSession, specs: Sequence[RewriteTaskSpec], **kwargs: Any
    ) -> list[TaskOutcome]:
        [spec] = specs
        started.append(spec.task_id)
        if len(started) == 1:
            # The first task handed out reads a file that is gone, and fails on Spark.
            gone = [f.model_copy(update={"path": f"{f.path}.gone"}) for f in spec.data_files]
            outcomes = run_tasks_on_spark(session, [spec.model_copy(update={"data_files": gone})], **kwargs)
            first_failed.set()
            return outcomes
        # The second thread's task runs, and writes, only once the process failed.
        assert first_failed.wait(timeout=120), "the first task ended"
        return run_tasks_on_spark(session, specs, **kwargs)

    monkeypatch.setattr(process_tasks, "run_tasks_on_spark", first_fails)
    done: list[TaskOutcome] = []
    with pytest.raises(ProcessFailed, match="1 of 4 tasks failed; partial commit is not allowed"):
        optimize(
            table,
            spark,
            OptimizingType.FULL,
            num_retries=0,
            on_task_done=done.append,
        )

    assert len(started) == spark.sparkContext.defaultParallelism == 2, "the tasks not started were cancelled"
    assert len(done) == 1 and done[0].error, "only the failed task's outcome came while the process ran"
    table.refresh()
    assert table.current_snapshot() == snapshot
    assert data_files_on_disk(table) == files_before, "a file of the failed process stays"
    assert rows_at(reference, sql_catalog) == before
