"""Conversions next to another engine's rewrite: Iceberg Java's RewriteFiles, planned before an
equality delete that floe then converts into position deletes (deletion vectors on v3) and
removes, must not commit and bring the deleted rows back.

The other engine is Iceberg Java itself, driven through py4j the way Spark's
``rewrite_data_files`` commits a file group (RewriteDataFilesSparkAction: ``newRewrite()``, from
its starting snapshot, with its starting sequence number), held between its planning and its
commit while floe converts. Its rewrite is a copy of the data file as of its starting snapshot,
when no delete applied to it: exactly the rows a real rewrite writes.
"""

from __future__ import annotations

import shutil
from typing import Any

import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyspark.sql import SparkSession

from floe.commit.row_delta import commit_row_delta
from floe.local.optimize import optimize_once
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.planning.config import OptimizingConfig
from floe.planning.files import FileKind
from floe.planning.plan import POSITIONS, OptimizingType
from floe.tables.scan import scan_table
from floe.tables.writer import write_data_files, write_equality_deletes_by_partition

# Appends of 1500 rows per partition make segments (over 2 KiB), the small inserts fragments.
CONFIG = OptimizingConfig(target_size=16 * 1024, fragment_ratio=8, max_task_size_bytes=16 * 1024)
MOR = "'write.delete.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read'"
UPSERTED = [10, 11, 3001, 4500]


def spark_table(catalog: SqlCatalog, spark: SparkSession, version: int) -> Table:
    """``db.t`` written by Spark: two appends of segments, three of fragments, no delete yet."""
    name = qualified_name(catalog.name, "db.t")
    spark.sql(
        f"CREATE TABLE {name} (id bigint, cat string, v double) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ('format-version' = '{version}', {MOR})"
    )
    rows = "SELECT id, CAST(id % 2 AS string), id * 1.0 FROM range({}, {})"
    for start, count in ((0, 3000), (3000, 3000), (6000, 10), (6010, 10), (6020, 10)):
        spark.sql(f"INSERT INTO {name} " + rows.format(start, start + count))
    return catalog.load_table("db.t")


def _upsert(table: Table, ids: list[int]) -> None:
    """CDC as a streaming writer does it: equality deletes of `ids`, and their new versions."""
    old = pa.table({"id": pa.array(ids, pa.int64()), "cat": pa.array([str(i % 2) for i in ids])})
    new = old.append_column("v", pa.array([-1.0 * i for i in ids]))
    deletes = write_equality_deletes_by_partition(table, old, ["id"])
    commit_row_delta(table, data_files=write_data_files(table, new), delete_files=deletes)


def _java_rewrite(spark: SparkSession, catalog: SqlCatalog, start: Snapshot, path: str) -> Any:
    """Iceberg Java's RewriteFiles of data file `path` as of `start`, planned and not committed."""
    jvm = spark._jvm
    assert jvm is not None
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, qualified_name(catalog.name, "db.t")
    )
    tasks = table.newScan().useSnapshot(start.snapshot_id).planFiles()
    files = []
    try:
        iterator = tasks.iterator()
        while iterator.hasNext():
            files.append(iterator.next().file())
    finally:
        tasks.close()
    (original,) = [f for f in files if f.location() == path]
    copy = path.removesuffix(".parquet") + "-java-rewrite.parquet"
    shutil.copyfile(path.removeprefix("file:"), copy.removeprefix("file:"))
    rewritten = (
        jvm.org.apache.iceberg.DataFiles.builder(table.specs().get(original.specId()))
        .copy(original)
        .withPath(copy)
        .build()
    )
    return (
        table.newRewrite()
        .validateFromSnapshot(start.snapshot_id)
        .dataSequenceNumber(start.sequence_number)
        .deleteFile(original)
        .addFile(rewritten)
    )


def _lineage(spark: SparkSession, catalog: SqlCatalog, snapshot_id: int) -> list[tuple[Any, ...]]:
    """The rows at `snapshot_id`, with their row ids and last-updated sequence numbers (v3)."""
    name = qualified_name(catalog.name, "db.t")
    lineage = "_row_id, _last_updated_sequence_number"
    query = f"SELECT *, {lineage} FROM {name} VERSION AS OF {snapshot_id} ORDER BY id"
    return [tuple(r) for r in spark.sql(query).collect()]


@pytest.mark.parametrize("version", [2, 3])
def test_a_rewrite_planned_before_a_converted_equality_delete_cannot_commit(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession, version: int
) -> None:
    table = spark_table(sql_catalog, spark, version)
    java_start = table.current_snapshot()
    assert java_start is not None
    _upsert(table, UPSERTED)
    table = sql_catalog.load_table("db.t")
    upserted = table.current_snapshot()
    assert upserted is not None
    before = reference.rows(sql_catalog.name, "db.t")
    lineage = _lineage(spark, sql_catalog, upserted.snapshot_id) if version == 3 else []

    result = optimize_once(table, "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.MINOR)

    assert result.commit is not None and any(task.kind == POSITIONS for task in result.plan.tasks)
    table = sql_catalog.load_table("db.t")
    after = scan_table(table).files
    assert not [d for d in after.delete_files if d.kind == FileKind.EQUALITY_DELETES], "all converted"
    converted = sorted({d.referenced_data_file or "" for d in after.delete_files})
    assert converted and "" not in converted
    # The rewrite of the fragments is a replace, the conversions a delete on it; both read right.
    replace, delete = (table.metadata.snapshot_by_id(s) for s in result.commit.snapshot_ids)
    assert replace is not None and delete is not None and delete.parent_snapshot_id == replace.snapshot_id
    assert [s.summary.operation.value for s in (replace, delete) if s.summary] == ["replace", "delete"]
    assert table.current_snapshot() == delete
    for snapshot in (replace, delete):
        assert reference.rows(sql_catalog.name, "db.t", snapshot.snapshot_id) == before
        if version == 3:
            assert _lineage(spark, sql_catalog, snapshot.snapshot_id) == lineage
    if version == 3:
        assert replace.first_row_id is not None and replace.added_rows is not None
        assert delete.first_row_id == replace.first_row_id + replace.added_rows
        assert table.metadata.next_row_id == delete.first_row_id + (delete.added_rows or 0)

    # The other engine's rewrite of a converted file, planned before the upsert, commits now.
    rewrite = _java_rewrite(spark, sql_catalog, java_start, converted[0])
    with pytest.raises(Py4JJavaError, match="found new position delete for replaced data file"):
        rewrite.commit()

    assert reference.rows(sql_catalog.name, "db.t") == before, "the upserted rows' old versions came back"
