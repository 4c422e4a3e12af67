"""``gc.enabled=false``: a table made by Spark's snapshot procedure reads another table's files,
so floe refuses to expire its snapshots or clean its orphans, locally and on the executors, dry
runs included. The source table, read through Spark, and the snapshot table, read through
Iceberg Java, judge."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from maintenance_tables import InProcessExecutors
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from floe.api.table import MaintenanceSpec
from floe.local.reference_reader import ReferenceReader
from floe.maintenance.expire import expire_snapshots
from floe.maintenance.job import GC_DISABLED, MaintenanceJob, MaintenanceRefused
from floe.maintenance.jobs import run_maintenance_job
from floe.maintenance.orphans import remove_orphan_files

HOUR = 3600.0
DAY = 86400.0
SOURCE_ROWS = 100


def _age(directory: Path) -> None:
    then = time.time() - 2 * DAY
    for path in directory.rglob("*"):
        if path.is_file():
            os.utime(path, (then, then))


def _files(directory: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in directory.rglob("*") if p.is_file()}


@pytest.fixture
def snapshot_table(spark: SparkSession, sql_catalog: SqlCatalog, tmp_path: Path) -> tuple[str, Table, Path]:
    """A Parquet table in Spark's session catalog, and ``db.snap``, its snapshot through Iceberg's
    ``snapshot`` procedure (``gc.enabled=false``, its data files the source's) from which a
    copy-on-write DELETE then dropped a source file; every file two days old."""
    source = f"spark_catalog.default.source_{sql_catalog.name}"
    directory = tmp_path / "source"
    spark.sql(f"CREATE TABLE {source} (id bigint, v string) USING parquet LOCATION '{directory}'")
    spark.sql(f"INSERT INTO {source} SELECT id, CAST(id AS string) FROM range(0, {SOURCE_ROWS})")
    spark.sql(f"CALL {sql_catalog.name}.system.snapshot('{source}', '{sql_catalog.name}.db.snap')")
    spark.sql(f"DELETE FROM {sql_catalog.name}.db.snap WHERE id < 10")
    _age(tmp_path)
    table = sql_catalog.load_table("db.snap")
    assert table.metadata.properties["gc.enabled"] == "false" and len(table.metadata.snapshots) == 2
    return source, table, directory


def _source_rows(spark: SparkSession, source: str) -> int:
    spark.sql(f"REFRESH TABLE {source}")
    return int(spark.table(source).count())


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_expiry_and_orphan_cleanup_of_a_snapshot_table_are_refused(
    snapshot_table: tuple[str, Table, Path],
    spark: SparkSession,
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
    tmp_path: Path,
    dry_run: bool,
) -> None:
    source, table, _ = snapshot_table
    files = _files(tmp_path)
    snap_rows = reference.rows(sql_catalog.name, "db.snap")
    jobs: dict[str, Callable[[], object]] = {
        "Cannot expire snapshots": lambda: expire_snapshots(
            table, min_snapshots=1, max_age_s=1.0, now_s=time.time(), dry_run=dry_run
        ),
        "Cannot delete orphan files": lambda: remove_orphan_files(
            table, older_than_s=HOUR, now_s=time.time(), dry_run=dry_run
        ),
    }
    for words, job in jobs.items():
        with pytest.raises(MaintenanceRefused, match=f"db.snap refused: {words}: GC is disabled") as refused:
            job()
        assert refused.value.reason == GC_DISABLED

    assert len(sql_catalog.load_table("db.snap").metadata.snapshots) == 2  # nothing committed
    assert _files(tmp_path) == files  # nothing deleted
    assert _source_rows(spark, source) == SOURCE_ROWS
    assert reference.rows(sql_catalog.name, "db.snap") == snap_rows
    assert sum(snap_rows.values()) == SOURCE_ROWS - 10


def test_the_executor_path_refuses_before_sending_a_task(
    snapshot_table: tuple[str, Table, Path], spark: SparkSession, tmp_path: Path
) -> None:
    source, table, _ = snapshot_table
    files = _files(tmp_path)
    executors = InProcessExecutors()
    spec = MaintenanceSpec.model_validate(
        {"snapshotRetention": {"maxAge": "1ms"}, "orphanFiles": {"olderThan": "1h"}}
    )
    for job in (MaintenanceJob.EXPIRE, MaintenanceJob.ORPHANS):
        with pytest.raises(MaintenanceRefused, match="GC is disabled") as refused:
            run_maintenance_job(table, job, spec, now_s=time.time(), executors=executors.executors(table))
        assert refused.value.job is job
    assert executors.specs == []
    assert _files(tmp_path) == files
    assert _source_rows(spark, source) == SOURCE_ROWS
