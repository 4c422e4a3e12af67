"""floe's policy merges a data file's position deletes in levels (format v2): each conversion
writes only the rows the file's merged position-delete files do not hold, and merges them when a
level is full. Run for real: pyiceberg's SQLite catalog, the tasks in Spark, rows read back by
Iceberg's Java reader after every round."""

from __future__ import annotations

from dataclasses import replace

import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession
from test_cdc_positions import CONFIG, cdc_table, segments
from test_correctness import rows_at

from floe.local.optimize import optimize_once
from floe.local.reference_reader import ReferenceReader
from floe.planning.files import ContentFile, FileKind, TableFiles, merged_positions
from floe.planning.floe_policy import position_level
from floe.planning.plan import OptimizingType
from floe.tables.scan import scan_table

# favor reads: a level of position-delete files merges at 3 (its fanout).
FLOE_READS = replace(CONFIG, policy="floe", favor="reads")


def merged_by_segment(files: TableFiles) -> dict[str, list[ContentFile]]:
    return {path: list(merged_positions(f, files.delete_files)) for f in files.data_files if (path := f.path)}


def positions_in(table: Table, delete: ContentFile) -> set[int]:
    with table.io.new_input(delete.path).open() as stream:
        return set(pq.read_table(stream, columns=["pos"]).column("pos").to_pylist())


def test_conversions_write_only_new_positions_and_merge_a_full_level(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, writer = cdc_table(sql_catalog)
    kept_segments = segments(scan_table(table).files)
    earlier: dict[str, list[ContentFile]] = {}
    merges = 0
    for round_number in range(1, 8):
        if round_number > 1:
            writer.upsert(list(range(round_number, 13_500, 211 + round_number)))
            table.refresh()
        before = rows_at(reference, sql_catalog)
        result = optimize_once(table, "db.t", FLOE_READS, spark=lambda: spark)
        assert result.commit is not None, result.plan.partitions
        assert rows_at(reference, sql_catalog) == before
        files = scan_table(table).files
        assert segments(files) == kept_segments  # converted, never rewritten
        assert not [d for d in files.delete_files if d.kind == FileKind.EQUALITY_DELETES]
        merged = merged_by_segment(files)
        for segment in kept_segments:
            held = [positions_in(table, d) for d in merged[segment]]
            # Each row is deleted by one file only: a kept file's rows are not written again.
            assert sum(len(p) for p in held) == len(set().union(*held))
            paths = {d.path for d in merged[segment]}
            previous = {d.path for d in earlier.get(segment, [])}
            # A level merges once it holds the fanout (a new file may land a level above the
            # smallest, where it was counted): at most three files of each of the few levels.
            levels = {position_level(d.record_count, 3) for d in merged[segment]}
            assert len(paths) <= 3 * len(levels)
            if round_number == 2:
                # The first conversion's file stays; the new one holds this round's rows only.
                assert previous < paths and len(paths) == 2
                [new] = [d for d in merged[segment] if d.path not in previous]
                assert new.record_count < sum(d.record_count for d in merged[segment])
            elif len(paths) <= len(previous):
                # A full level merged into the new file, which holds all their rows.
                merges += 1
                [new] = [d for d in merged[segment] if d.path not in previous]
                gone = [d for d in earlier[segment] if d.path not in paths]
                assert len(gone) >= 2
                assert set().union(*(positions_in(table, d) for d in gone)) <= positions_in(table, new)
        earlier = merged
    assert merges


def test_a_conversion_under_amoros_policy_still_merges_every_position(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, writer = cdc_table(sql_catalog)
    assert optimize_once(table, "db.t", CONFIG, spark=lambda: spark).commit is not None
    writer.upsert(list(range(2, 13_500, 213)))
    table.refresh()
    before = rows_at(reference, sql_catalog)
    second = optimize_once(table, "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.MINOR)
    assert second.commit is not None
    assert rows_at(reference, sql_catalog) == before
    merged = merged_by_segment(scan_table(table).files)
    assert all(len(merged[s]) == 1 for s in segments(scan_table(table).files))
