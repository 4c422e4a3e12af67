"""The bar of the embedded engine: optimizing never changes a table's rows.

Every test builds a real table (pyiceberg appends, CDC-style equality deletes, Spark
merge-on-read position deletes through Iceberg Java, schema and spec evolution),
optimizes it with floe's engine on local Spark, and compares the multiset of rows read
by Iceberg's Java reader at the starting snapshot and at the new one.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType
from pyspark.sql import SparkSession

from floe.commit.request import CommitConflict
from floe.commit.row_delta import commit_row_delta
from floe.local.optimize import OptimizeResult, optimize_once
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingPlan, OptimizingType
from floe.tables.scan import scan_table
from floe.tables.writer import conform, write_data_files, write_equality_deletes_by_partition

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "cat", StringType(), required=True),
    NestedField(3, "ts", TimestampType(), required=True),
    NestedField(4, "val", DoubleType(), required=False),
    NestedField(5, "note", StringType(), required=False),
)
LAYOUTS = {
    "unpartitioned": PartitionSpec(),
    "identity": PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "cat")),
    "bucket": PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "id_bucket")),
    "day": PartitionSpec(PartitionField(3, 1000, DayTransform(), "ts_day")),
}
# Tiny targets so that a few hundred rows make fragments, undersized segments and segments.
CONFIG = OptimizingConfig(target_size=16 * 1024, fragment_ratio=8, max_task_size_bytes=16 * 1024)
MOR = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}


class Writer:
    """Deterministic rows for the test table, with the current schema's columns."""

    def __init__(self, table: Table, seed: int = 7) -> None:
        self.table = table
        self.rng = random.Random(seed)
        self.next_id = 0
        self.start = datetime(2024, 5, 1)
        self.keys: dict[int, tuple[str, datetime]] = {}

    def rows(self, count: int, extra: bool = False) -> pa.Table:
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        cats = [self.rng.choice("abc") for _ in ids]
        stamps = [self.start + timedelta(hours=self.rng.randrange(72)) for _ in ids]
        self.keys.update(zip(ids, zip(cats, stamps, strict=True), strict=True))
        columns: dict[str, Any] = {
            "id": pa.array(ids, pa.int64()),
            "cat": pa.array(cats, pa.string()),
            "ts": pa.array(stamps, pa.timestamp("us")),
            "val": pa.array([None if i % 9 == 0 else i * 0.5 for i in ids], pa.float64()),
        }
        names = self.table.schema().column_names
        note = "remark" if "remark" in names else "note"
        columns[note] = pa.array([f"n{i}" if i % 4 else None for i in ids], pa.string())
        if extra:
            columns["extra"] = pa.array([f"x{i}" for i in ids], pa.string())
        return pa.table(columns)

    def append(self, count: int, extra: bool = False) -> None:
        self.table.append(conform(self.table, self.rows(count, extra)))

    def upsert(self, ids: list[int], extra: bool = False) -> None:
        """Equality-delete `ids` and insert new versions (same partition) in one snapshot (CDC)."""
        old = self._rows_of(ids)
        current = self.rows(len(ids), extra)
        current = current.set_column(0, "id", pa.array(ids, pa.int64()))
        current = current.set_column(1, "cat", old["cat"]).set_column(2, "ts", old["ts"])
        deletes = write_equality_deletes_by_partition(self.table, old, ["id"])
        commit_row_delta(self.table, data_files=write_data_files(self.table, current), delete_files=deletes)

    def delete_keys(self, ids: list[int]) -> None:
        """Equality-delete `ids` without re-inserting them."""
        deletes = write_equality_deletes_by_partition(self.table, self._rows_of(ids), ["id"])
        commit_row_delta(self.table, delete_files=deletes)

    def _rows_of(self, ids: list[int]) -> pa.Table:
        """Key and partition source columns of rows written earlier (ids, cat and ts never change)."""
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "cat": pa.array([self.keys[i][0] for i in ids], pa.string()),
                "ts": pa.array([self.keys[i][1] for i in ids], pa.timestamp("us")),
            }
        )


def build_table(
    catalog: SqlCatalog, reference: ReferenceReader, layout: str, evolve_schema: bool = True
) -> tuple[Table, Writer]:
    """A table with fragments, undersized segments, segments, eq and position deletes."""
    table = catalog.create_table("db.t", SCHEMA, partition_spec=LAYOUTS[layout], properties=MOR)
    writer = Writer(table)
    writer.append(400)  # segments
    for _ in range(3):
        writer.append(120)  # undersized segments
    for _ in range(6):
        writer.append(8)  # fragments
    writer.upsert([3, 50, 401, 405])
    writer.delete_keys([7, 402])
    name = qualified_name(catalog.name, "db.t")
    reference.sql(f"DELETE FROM {name} WHERE id % 13 = 0")
    reference.sql(f"DELETE FROM {name} WHERE id % 17 = 1")
    reference.sql(f"UPDATE {name} SET val = -1 WHERE id % 19 = 2")
    if evolve_schema:
        with table.update_schema() as update:
            update.add_column("extra", StringType())
            update.rename_column("note", "remark")
        table.refresh()
        writer.append(10, extra=True)
        writer.upsert([11, 12, 600], extra=True)
        reference.sql(f"DELETE FROM {name} WHERE remark = 'n601'")
    table.refresh()
    return table, writer


def optimize(
    table: Table, spark: SparkSession, forced: OptimizingType | None, **options: Any
) -> OptimizeResult:
    """One optimizing of ``db.t`` under ``CONFIG`` on the session's Spark; ``options`` go to optimize_once."""
    return optimize_once(table, "db.t", CONFIG, spark=lambda: spark, forced=forced, **options)


def rows_at(reference: ReferenceReader, catalog: SqlCatalog, snapshot_id: int | None = None) -> Counter[Any]:
    return reference.rows(catalog.name, "db.t", snapshot_id)


def data_files_on_disk(table: Table) -> set[str]:
    root = Path(table.metadata.location.removeprefix("file://")) / "data"
    return {p.as_uri() for p in root.rglob("*.parquet")}


@pytest.mark.parametrize("kind", list(OptimizingType), ids=lambda t: t.label)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_rows_unchanged(
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
    spark: SparkSession,
    layout: str,
    kind: OptimizingType,
) -> None:
    table, _ = build_table(sql_catalog, reference, layout)
    start = scan_table(table).files
    before = rows_at(reference, sql_catalog, start.snapshot_id)

    result = optimize(table, spark, kind)

    assert result.commit is not None, result.plan
    assert rows_at(reference, sql_catalog) == before
    after = scan_table(table).files
    assert len(after.data_files) < len(start.data_files)
    if kind == OptimizingType.FULL:
        assert after.delete_files == ()
    else:
        assert len(after.delete_files) < len(start.delete_files)
    # Time travel to the starting snapshot still reads the original rows.
    assert rows_at(reference, sql_catalog, start.snapshot_id) == before


def test_automatic_evaluation_converges(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, _ = build_table(sql_catalog, reference, "identity")
    before = rows_at(reference, sql_catalog)
    first = optimize(table, spark, None)
    assert first.commit is not None and first.plan.optimizing_type is not None
    assert rows_at(reference, sql_catalog) == before
    second = optimize(table, spark, None)
    assert second.commit is None and second.plan.is_empty


@pytest.mark.parametrize("favor", ["reads", "writes"])
def test_floes_policy_keeps_every_row_until_it_has_nothing_left_to_do(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession, favor: str
) -> None:
    # floe's policy converts, merges levels and packs by live rows: each process must keep the
    # rows, and the processes must end.
    table, _ = build_table(sql_catalog, reference, "bucket")
    before = rows_at(reference, sql_catalog)
    config = replace(CONFIG, policy="floe", favor=favor)
    commits = 0
    while (result := optimize_once(table, "db.t", config, spark=lambda: spark)).commit is not None:
        commits += 1
        assert rows_at(reference, sql_catalog) == before
        assert commits < 5, "floe's policy kept finding work on a table nothing writes to"
    assert commits >= 1 and result.plan.is_empty


def test_partition_spec_evolution(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, writer = build_table(sql_catalog, reference, "identity", evolve_schema=False)
    with table.update_spec() as update:
        update.add_field("ts", DayTransform(), "ts_day")
    table.refresh()
    for _ in range(4):
        writer.append(10)
    newest = writer.next_id - 1  # written under the new spec
    writer.upsert([2, newest])
    reference.sql(f"DELETE FROM {qualified_name(sql_catalog.name, 'db.t')} WHERE id = {newest - 2}")
    table.refresh()
    start = scan_table(table).files
    assert {f.partition.spec_id for f in start.data_files} == {0, 1}
    before = rows_at(reference, sql_catalog, start.snapshot_id)

    result = optimize(table, spark, OptimizingType.FULL)

    assert result.commit is not None
    assert rows_at(reference, sql_catalog) == before
    after = scan_table(table).files
    assert after.delete_files == ()
    # Files stay in the spec they were written with.
    assert {f.partition.spec_id for f in after.data_files} == {0, 1}


def test_concurrent_append_and_equality_delete_are_kept(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, writer = build_table(sql_catalog, reference, "bucket")
    before = rows_at(reference, sql_catalog)
    late_rows: list[pa.Table] = []

    def write_concurrently(plan: OptimizingPlan) -> None:
        assert not plan.is_empty
        batch = writer.rows(5)
        late_rows.append(batch)
        table.append(conform(table, batch))
        writer.delete_keys([20, 21])  # equality deletes on rows being rewritten

    result = optimize(table, spark, OptimizingType.FULL, on_plan=write_concurrently)

    assert result.commit is not None
    expected = Counter({row: n for row, n in before.items() if row[0] not in (20, 21)})
    expected.update(_as_rows(conform(table, late_rows[0])))
    assert rows_at(reference, sql_catalog) == expected


def test_concurrent_position_delete_on_a_rewritten_file_aborts_cleanly(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, _ = build_table(sql_catalog, reference, "day", evolve_schema=False)
    files_before = data_files_on_disk(table)

    def delete_concurrently(plan: OptimizingPlan) -> None:
        reference.sql(f"DELETE FROM {qualified_name(sql_catalog.name, 'db.t')} WHERE id = 401")

    with pytest.raises(CommitConflict, match="position deletes"):
        optimize(table, spark, OptimizingType.FULL, on_plan=delete_concurrently)
    table.refresh()
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None and summary.operation.value != "replace"
    # The only new data files are the position-delete file Spark wrote; ours are gone.
    new_files = data_files_on_disk(table) - files_before
    assert all("deletes" in p or "delete" in p for p in new_files), new_files


def _as_rows(batch: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in batch.to_pylist())
