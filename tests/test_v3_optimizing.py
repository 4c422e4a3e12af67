"""Optimizing format v3 tables written by Spark 3.5 with Iceberg 1.10, checked by Iceberg Java.

The tables have merge-on-read DELETE, UPDATE and MERGE behind them, so their deletes are
deletion vectors in Puffin files and their rows carry lineage. After each optimizing type
Spark reads the same rows with the same ``_row_id`` and ``_last_updated_sequence_number``,
no deletion vector of a rewritten file is left, the snapshot accounts for the row ids it
assigned, and Spark goes on writing (a MERGE after floe's commit reads right).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession
from v3_lineage import lineage, merge_keeps_lineage

from floe.commit.request import CommitFailed
from floe.commit.row_delta import commit_row_delta
from floe.local.optimize import optimize_once
from floe.local.reference_reader import qualified_name
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingType
from floe.tables.scan import scan_table
from floe.tables.writer import write_data_files, write_equality_deletes_by_partition
from floe_optimizer.spark_runner import TaskOutcome

CONFIG = OptimizingConfig(target_size=16 * 1024, fragment_ratio=8, max_task_size_bytes=16 * 1024)
# Files of about 1 KiB are segments at this size: minor converts their deletes, keeping them.
SEGMENTS = OptimizingConfig(target_size=1024, fragment_ratio=8, max_task_size_bytes=64 * 1024)


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


def _optimize_while_spark_deletes(
    catalog: SqlCatalog, spark: SparkSession, config: OptimizingConfig, forced: OptimizingType, where: str
) -> None:
    """Optimize ``db.t``; once the first task has ended, Spark deletes the rows `where` says."""
    deleted = False

    def delete_while_running(outcome: TaskOutcome) -> None:
        nonlocal deleted
        if not deleted:
            deleted = True
            spark.sql(f"DELETE FROM {qualified_name(catalog.name, 'db.t')} WHERE {where}")

    optimize_once(
        catalog.load_table("db.t"),
        "db.t",
        config,
        spark=lambda: spark,
        forced=forced,
        on_task_done=delete_while_running,
    )


def test_a_deletion_vector_committed_during_the_rewrite_is_a_conflict(
    v3_table: SqlCatalog, spark: SparkSession
) -> None:
    # Every data file is being rewritten: a new vector on any of them conflicts.
    with pytest.raises(CommitFailed, match=r"a deletion vector in .* which this process rewrites"):
        _optimize_while_spark_deletes(v3_table, spark, CONFIG, OptimizingType.FULL, "id = 1")
    rows = lineage(spark, v3_table)
    assert 1 not in {row[0] for row in rows}, "Spark's delete stands"
    assert _deletion_vectors(v3_table) > 0, "nothing of floe's was committed"


def _upsert(catalog: SqlCatalog, ids: list[int]) -> None:
    """CDC as a streaming writer does it: equality deletes of `ids`, and their new versions."""
    table = catalog.load_table("db.t")
    old = pa.table({"id": pa.array(ids, pa.int64()), "cat": pa.array([str(i % 2) for i in ids])})
    new = old.append_column("v", pa.array([i * 10.0 for i in ids]))
    deletes = write_equality_deletes_by_partition(table, old, ["id"])
    commit_row_delta(table, data_files=write_data_files(table, new), delete_files=deletes)


def test_minor_turns_equality_deletes_into_one_deletion_vector_per_file(
    v3_table: SqlCatalog, spark: SparkSession
) -> None:
    _upsert(v3_table, [1, 2, 3, 50, 151, 152, 300])
    before = lineage(spark, v3_table)
    start = scan_table(v3_table.load_table("db.t")).files
    assert any(f.equality_ids for f in start.delete_files)

    result = optimize_once(
        v3_table.load_table("db.t"), "db.t", SEGMENTS, spark=lambda: spark, forced=OptimizingType.MINOR
    )

    assert result.commit is not None and result.commit.added_delete_files > 0, result.plan
    assert lineage(spark, v3_table) == before
    after = scan_table(v3_table.load_table("db.t")).files
    assert not any(f.equality_ids for f in after.delete_files), "no equality delete is live"
    vectors = [f for f in after.delete_files if f.content_offset is not None]
    assert len(vectors) == len(after.delete_files), "a v3 table gets deletion vectors only"
    targets = [f.referenced_data_file for f in vectors]
    assert len(targets) == len(set(targets)), "never two vectors for one data file"
    segments = {f.path for f in start.data_files} & {f.path for f in after.data_files}
    assert set(targets) <= segments and segments, "the segments stay; their deletes moved to vectors"

    # Spark merges its own deletes into floe's vectors, and floe into Spark's.
    merge_keeps_lineage(spark, v3_table, before)
    _upsert(v3_table, [4, 5, 153])
    again = lineage(spark, v3_table)
    optimize_once(
        v3_table.load_table("db.t"), "db.t", SEGMENTS, spark=lambda: spark, forced=OptimizingType.MINOR
    )
    assert lineage(spark, v3_table) == again
    final = scan_table(v3_table.load_table("db.t")).files
    final_targets = [f.referenced_data_file for f in final.delete_files if f.content_offset is not None]
    assert len(final_targets) == len(set(final_targets)) == len(final.delete_files)


def test_a_deletion_vector_committed_to_a_file_being_converted_is_a_conflict(
    v3_table: SqlCatalog, spark: SparkSession
) -> None:
    _upsert(v3_table, [1, 2, 3, 50, 151, 152, 300])
    with pytest.raises(
        CommitFailed, match=r"a deletion vector in .* which this process rewrites or converts"
    ):
        _optimize_while_spark_deletes(v3_table, spark, SEGMENTS, OptimizingType.MINOR, "id IN (10, 11)")
    rows = {row[0] for row in lineage(spark, v3_table)}
    assert not rows & {10, 11}, "Spark's delete stands"
    files = scan_table(v3_table.load_table("db.t")).files
    targets = [f.referenced_data_file for f in files.delete_files if f.content_offset is not None]
    assert len(targets) == len(set(targets)), "never two vectors for one data file"
