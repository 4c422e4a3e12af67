"""Optimizing format v3 tables written by Spark 3.5 with Iceberg 1.10, checked by Iceberg Java.

The tables have merge-on-read DELETE, UPDATE and MERGE behind them, so their deletes are
deletion vectors in Puffin files and their rows carry lineage. After each optimizing type
Spark reads the same rows with the same ``_row_id`` and ``_last_updated_sequence_number``,
no deletion vector of a rewritten file is left, the snapshot accounts for the row ids it
assigned, and Spark goes on writing (a MERGE after floe's commit reads right).
"""

from __future__ import annotations

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession
from v3_lineage import lineage, merge_keeps_lineage

from floe.commit.rewrite import CommitFailed
from floe.local.optimize import optimize_once
from floe.local.reference_reader import qualified_name
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingType
from floe.tables.scan import scan_table
from floe_optimizer.spark_runner import TaskOutcome

CONFIG = OptimizingConfig(target_size=16 * 1024, fragment_ratio=8, max_task_size_bytes=16 * 1024)


def _deletion_vectors(catalog: SqlCatalog) -> int:
    """How many live deletion vectors the table has."""
    files = scan_table(catalog.load_table("db.t")).files
    return sum(1 for f in files.delete_files if f.content_offset is not None)


@pytest.mark.parametrize("forced", [OptimizingType.MINOR, OptimizingType.MAJOR, OptimizingType.FULL])
def test_each_optimizing_type_keeps_rows_andlineage(
    v3_table: SqlCatalog, spark: SparkSession, forced: OptimizingType
) -> None:
    before = lineage(spark, v3_table)
    assert _deletion_vectors(v3_table) > 0
    table = v3_table.load_table("db.t")
    next_row_id = table.metadata.next_row_id
    assert next_row_id is not None

    result = optimize_once(table, "db.t", CONFIG, spark=lambda: spark, forced=forced)

    assert result.commit is not None, result.plan
    table = v3_table.load_table("db.t")
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.snapshot_id == result.commit.snapshot_id
    assert lineage(spark, v3_table) == before
    # Every data file the DELETE and UPDATE left a vector on is rewritten: no vector stays.
    assert _deletion_vectors(v3_table) == 0
    assert result.commit.removed_delete_files > 0
    assert snapshot.first_row_id == next_row_id and snapshot.added_rows
    assert table.metadata.next_row_id == next_row_id + snapshot.added_rows


def test_spark_writes_on_after_floe_and_new_rows_get_new_ids(
    v3_table: SqlCatalog, spark: SparkSession
) -> None:
    table = v3_table.load_table("db.t")
    optimize_once(table, "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.FULL)
    before = lineage(spark, v3_table)

    merge_keeps_lineage(spark, v3_table, before)

    # And floe again, over Spark's new deletion vectors and rows.
    again = lineage(spark, v3_table)
    optimize_once(
        v3_table.load_table("db.t"), "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.FULL
    )
    assert lineage(spark, v3_table) == again
    assert _deletion_vectors(v3_table) == 0


def test_schema_and_partition_evolution(v3_table: SqlCatalog, spark: SparkSession) -> None:
    name = qualified_name(v3_table.name, "db.t")
    spark.sql(f"ALTER TABLE {name} ADD COLUMN note string")
    spark.sql(f"INSERT INTO {name} SELECT id, CAST(id % 3 AS string), id * 1.0, 'n' FROM range(400, 460)")
    spark.sql(f"ALTER TABLE {name} ADD PARTITION FIELD bucket(4, id)")
    spark.sql(f"INSERT INTO {name} SELECT id, CAST(id % 3 AS string), id * 1.0, 'm' FROM range(460, 520)")
    spark.sql(f"DELETE FROM {name} WHERE id % 5 = 0")
    before = lineage(spark, v3_table)

    optimize_once(
        v3_table.load_table("db.t"), "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.FULL
    )

    assert lineage(spark, v3_table) == before
    assert _deletion_vectors(v3_table) == 0


def test_a_deletion_vector_committed_during_the_rewrite_is_a_conflict(
    v3_table: SqlCatalog, spark: SparkSession
) -> None:
    name = qualified_name(v3_table.name, "db.t")
    deleted = False

    def delete_while_running(outcome: TaskOutcome) -> None:
        nonlocal deleted
        if not deleted:
            deleted = True
            # Every data file is being rewritten: a new vector on any of them conflicts.
            spark.sql(f"DELETE FROM {name} WHERE id = 1")

    table = v3_table.load_table("db.t")
    with pytest.raises(CommitFailed, match=r"deletion vector|position deletes"):
        optimize_once(
            table,
            "db.t",
            CONFIG,
            spark=lambda: spark,
            forced=OptimizingType.FULL,
            on_task_done=delete_while_running,
        )
    rows = lineage(spark, v3_table)
    assert 1 not in {row[0] for row in rows}, "Spark's delete stands"
    assert _deletion_vectors(v3_table) > 0, "nothing of floe's was committed"
