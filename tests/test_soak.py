"""The concurrency soak, short: a few seeds of every writer committing while `floe run` optimizes and
maintains the same tables, each snapshot judged by Iceberg Java against the writers' oracle
(tests/soak). The long run is `python -m tests.soak --seeds 20 --minutes 60`; a failing seed is
replayed with `python -m tests.soak --seed-list SEED`."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from soak.driver import Settings, run_soak
from soak.flink import flink_home

from floe.local.reference_reader import ReferenceReader

SEEDS = [1, 2, 3]
SECONDS_PER_SEED = 40.0
DRAIN_S = 15.0


def test_soak_keeps_every_writers_rows(
    spark: SparkSession, reference: ReferenceReader, tmp_path: Path
) -> None:
    settings = Settings(SEEDS, SECONDS_PER_SEED, drain_s=DRAIN_S, flink_home=flink_home())

    report = run_soak(spark, reference, tmp_path, settings)

    print(report.describe())
    assert report.figures.snapshots_checked > 0
    assert not report.failures, report.describe()
