"""The concurrency soak, short: a few seeds of every writer committing while `floe run` optimizes and
maintains the same tables, each snapshot judged by Iceberg Java against the writers' oracle
(tests/soak). The long run is `python -m tests.soak --seeds 20 --minutes 60`; a failing seed is
replayed with `python -m tests.soak --seed-list SEED`, or here with `FLOE_SOAK_SEEDS=SEED,...`
(and `FLOE_SOAK_SECONDS`, the seconds of writes per seed)."""

from __future__ import annotations

import os
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession
from soak.checker import Checker
from soak.driver import Settings, run_soak
from soak.flink import flink_home
from soak.oracle import TableOracle
from soak.rows import Insert, new_row
from soak.snapshots import History
from soak.writers import SoakTable, Writers

from floe.local.reference_reader import ReferenceReader

SEEDS = [int(s) for s in os.environ.get("FLOE_SOAK_SEEDS", "1,2,3").split(",")]
SECONDS_PER_SEED = float(os.environ.get("FLOE_SOAK_SECONDS", "25"))
DRAIN_S = 10.0


def test_soak_keeps_every_writers_rows(
    spark: SparkSession, reference: ReferenceReader, tmp_path: Path
) -> None:
    settings = Settings(SEEDS, SECONDS_PER_SEED, drain_s=DRAIN_S, flink_home=flink_home())

    report = run_soak(spark, reference, tmp_path, settings)

    print(report.describe())
    assert report.figures.snapshots_checked > 0
    assert not report.failures, report.describe()


def test_soak_checker_reports_rows_a_rewrite_lost(
    spark: SparkSession, reference: ReferenceReader, sql_catalog: SqlCatalog
) -> None:
    """The soak's own check: a `replace` snapshot that drops a data file (committed with Iceberg
    Java's RewriteFiles, as a broken compaction would) is reported with the seed, the snapshot
    and the lost rows; the snapshots before it pass."""
    table = SoakTable(sql_catalog.name, "db", "t", 2, partitioned=False)
    spark.sql(table.create_sql())
    history, oracle, failures = History(sql_catalog, table.identifier), TableOracle(), []
    checker = Checker(7, table, history, oracle, reference, failures)
    writers = Writers(spark, sql_catalog)
    for number, keys in enumerate([range(0, 3), range(3, 5)], start=1):
        op = Insert("spark-insert", number, tuple(new_row(k, k, f"{number}:spark-insert") for k in keys))
        writers.commit(table, op)
        history.poll()
        oracle.record(op, history.all()[-1].snapshot_id)
    checker.advance()
    assert not failures and checker.figures.snapshots_checked == 2

    java = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(  # type: ignore[union-attr]
        spark._jsparkSession, f"{table.catalog}.{table.identifier}"
    )
    first = java.snapshot(history.all()[0].snapshot_id).addedDataFiles(java.io()).iterator().next()
    java.newRewrite().deleteFile(first).commit()
    history.poll()
    checker.advance()

    assert checker.figures.snapshots_checked == 3
    [failure] = failures
    report = failure.describe()
    assert report.startswith(f"seed 7, table db.t, snapshot {history.all()[-1].snapshot_id}")
    lost = int(first.recordCount())
    assert "java:replace" in report and f"{lost} row(s) lost, 0 row(s) duplicated or brought back" in report
    assert "lost x1: id=" in report and "note=1:spark-insert" in report
