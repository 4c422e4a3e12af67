"""Minor optimizing of a CDC table keeps its segments: their equality deletes become one
position-delete file each, and Iceberg's Java reader reads the same rows after every step,
next to concurrent upserts, position deletes and file removals."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession
from test_correctness import LAYOUTS, MOR, SCHEMA, Writer, data_files_on_disk, rows_at

from floe.commit.request import CommitConflict
from floe.commit.row_delta import commit_row_delta
from floe.local.optimize import OptimizeResult, optimize_once
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.planning.config import OptimizingConfig
from floe.planning.files import ContentFile, FileKind, TableFiles
from floe.planning.plan import POSITIONS, OptimizingPlan, OptimizingType
from floe.tables.scan import scan_table
from floe.tables.writer import POS_DELETE_FILE_PATH_ID, write_position_deletes

# 1500 rows per partition make a segment (15 KB > 0.75 x 16 KiB); an upsert's few rows a fragment.
CONFIG = OptimizingConfig(target_size=16 * 1024, fragment_ratio=8, max_task_size_bytes=16 * 1024)


def cdc_table(catalog: SqlCatalog) -> tuple[Table, Writer]:
    """Three segments per partition (cat a, b, c), then upserts spread over all of them."""
    table = catalog.create_table("db.t", SCHEMA, partition_spec=LAYOUTS["identity"], properties=MOR)
    writer = Writer(table)
    for _ in range(3):
        writer.append(4500)
    for batch in range(4):
        writer.upsert(list(range(batch * 7, 13_500, 997)))
    table.refresh()
    return table, writer


def optimize(table: Table, spark: SparkSession, on_plan: Any = None) -> OptimizeResult:
    return optimize_once(table, "db.t", CONFIG, spark=lambda: spark, on_plan=on_plan)


def segments(files: TableFiles) -> set[str]:
    return {f.path for f in files.data_files if f.size_bytes > CONFIG.undersized_size}


def deletes_of(files: TableFiles, kind: FileKind) -> list[ContentFile]:
    return [d for d in files.delete_files if d.kind == kind]


def parent_of_current(table: Table) -> int:
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.parent_snapshot_id is not None
    return snapshot.parent_snapshot_id


def test_minor_converts_equality_deletes_and_keeps_the_segments(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, writer = cdc_table(sql_catalog)
    start = scan_table(table).files
    assert len(segments(start)) == 9 and deletes_of(start, FileKind.EQUALITY_DELETES)
    before = rows_at(reference, sql_catalog, start.snapshot_id)

    first = optimize(table, spark)

    assert first.plan.optimizing_type == OptimizingType.MINOR, first.plan.partitions
    assert any(task.kind == POSITIONS for task in first.plan.tasks)
    assert rows_at(reference, sql_catalog) == before
    after = scan_table(table).files
    assert segments(after) == segments(start)  # kept, not rewritten
    assert deletes_of(after, FileKind.EQUALITY_DELETES) == []
    positions = deletes_of(after, FileKind.POSITION_DELETES)
    # One file per segment, each naming only its segment (file_path bounds).
    assert sorted(p.referenced_data_file or "" for p in positions) == sorted(segments(start))
    table.refresh()
    for entry in table.inspect.delete_files().to_pylist():
        lower = entry["lower_bounds"] and dict(entry["lower_bounds"]).get(POS_DELETE_FILE_PATH_ID)
        upper = entry["upper_bounds"] and dict(entry["upper_bounds"]).get(POS_DELETE_FILE_PATH_ID)
        assert lower is not None and lower == upper
    # Positions are delta-encoded (Iceberg's Java reader read the rows above through them).
    for p in positions:
        with table.io.new_input(p.path).open() as stream:
            column = pq.ParquetFile(stream).metadata.row_group(0).column(1)
        assert column.path_in_schema == "pos" and "DELTA_BINARY_PACKED" in column.encodings

    # More upserts: the next minor merges each segment's new positions into one file again.
    writer.upsert(list(range(3, 13_500, 1009)))
    writer.upsert(list(range(5, 13_500, 1013)))
    table.refresh()
    before = rows_at(reference, sql_catalog)
    second = optimize_once(table, "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.MINOR)
    assert second.commit is not None
    assert rows_at(reference, sql_catalog) == before
    again = scan_table(table).files
    assert segments(again) == segments(start)
    assert deletes_of(again, FileKind.EQUALITY_DELETES) == []
    positions = deletes_of(again, FileKind.POSITION_DELETES)
    targets = [p.referenced_data_file for p in positions]
    # One merged file per data file (an undersized compacted file may have one too).
    assert len(targets) == len(set(targets)) and segments(start) <= set(targets)


def test_major_rewrites_the_segments_over_the_duplicate_ratio(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, writer = cdc_table(sql_catalog)
    # Over 10% of the first segments' rows upserted: once converted, they pass the ratio.
    writer.upsert(list(range(0, 4500, 7)))
    table.refresh()
    before = rows_at(reference, sql_catalog)
    minor = optimize(table, spark)
    assert minor.plan.optimizing_type == OptimizingType.MINOR
    converted = scan_table(table).files

    major = optimize(table, spark)

    assert major.plan.optimizing_type == OptimizingType.MAJOR, major.plan.partitions
    assert rows_at(reference, sql_catalog) == before
    after = scan_table(table).files
    rewritten = segments(converted) - segments(after)
    assert len(rewritten) == 3  # the first append's segment of each partition
    targets = {p.referenced_data_file for p in deletes_of(after, FileKind.POSITION_DELETES)}
    assert targets.isdisjoint(rewritten)


def test_concurrent_upsert_stays_in_force(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, writer = cdc_table(sql_catalog)

    def upsert_concurrently(plan: OptimizingPlan) -> None:
        assert any(task.kind == POSITIONS for task in plan.tasks)
        writer.upsert([1, 2, 4501, 9002, 13_000])

    result = optimize(table, spark, on_plan=upsert_concurrently)

    assert result.commit is not None
    # What the table held once the upsert landed is what it holds after floe's commit.
    assert rows_at(reference, sql_catalog) == rows_at(reference, sql_catalog, parent_of_current(table))
    late = [d for d in deletes_of(scan_table(table).files, FileKind.EQUALITY_DELETES)]
    assert late, "the upsert's equality deletes were removed"


def test_concurrent_position_delete_on_a_converted_segment_stays_in_force(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, _ = cdc_table(sql_catalog)

    def delete_concurrently(plan: OptimizingPlan) -> None:
        # Rows only the segments hold (no upsert touched them): Spark writes position deletes.
        name = qualified_name(sql_catalog.name, "db.t")
        reference.sql(f"DELETE FROM {name} WHERE id IN (100, 4600, 9100, 9101)")

    result = optimize(table, spark, on_plan=delete_concurrently)

    assert result.commit is not None
    assert rows_at(reference, sql_catalog) == rows_at(reference, sql_catalog, parent_of_current(table))


@pytest.mark.filterwarnings("ignore:Merge on read is not yet supported")
def test_concurrent_removal_of_a_converted_segment_conflicts(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, _ = cdc_table(sql_catalog)
    files_before = data_files_on_disk(table)

    def drop_partition(plan: OptimizingPlan) -> None:
        table.delete("cat == 'a'")  # copy-on-write: removes the partition's files whole

    with pytest.raises(CommitConflict, match="was removed"):
        optimize(table, spark, on_plan=drop_partition)
    table.refresh()
    assert table.current_snapshot().summary.operation.value != "replace"  # type: ignore[union-attr]
    assert data_files_on_disk(table) <= files_before, "the process's files were left behind"
    assert Counter(r[1] for r in rows_at(reference, sql_catalog)).get("a") is None


def test_a_position_delete_shared_with_an_unconverted_segment_is_not_merged_again(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, writer = cdc_table(sql_catalog)
    writer.append(4500)  # newer segments: the upserts' equality deletes do not apply to them
    table.refresh()
    scanned = scan_table(table)
    in_a = sorted(
        (
            f
            for f in scanned.files.data_files
            if f.partition.values == ("a",) and f.path in segments(scanned.files)
        ),
        key=lambda f: f.data_sequence_number,
    )
    old, new = in_a[0], in_a[-1]
    # One position-delete file naming rows of both: the old segment's conversion merges it, the
    # new segment still needs it.
    shared = write_position_deletes(
        table, [(old.path, 5), (new.path, 6)], old.partition.spec_id, scanned.partition_records[old.partition]
    )
    commit_row_delta(table, delete_files=[shared])
    table.refresh()
    before = rows_at(reference, sql_catalog)

    first = optimize(table, spark)
    assert first.commit is not None
    assert rows_at(reference, sql_catalog) == before
    after = scan_table(table).files
    assert shared.file_path in {d.path for d in after.delete_files}

    # The old segment holds its merged file and the shared one: nothing is left to do.
    second = optimize(table, spark)
    assert second.commit is None and second.plan.is_empty, second.plan.partitions
