"""Dangling delete removal on real tables: only deletes that can no longer apply go, rows stay."""

from __future__ import annotations

import pyarrow as pa
from maintenance_tables import TABLE, create_table, equality_delete, read, rows
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from floe.commit.request import RewriteRequest
from floe.commit.rewrite import commit_rewrite
from floe.commit.row_delta import commit_row_delta
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.maintenance.dangling import remove_dangling_deletes
from floe.maintenance.job import MaintenanceJob
from floe.planning.files import ContentFile
from floe.tables.scan import scan_table
from floe.tables.writer import conform, write_data_files, write_position_deletes


def _files(table: Table, region: str) -> tuple[list[ContentFile], list[ContentFile]]:
    files = scan_table(table).files
    return (
        [f for f in files.data_files if f.partition.values == (region,)],
        [f for f in files.delete_files if f.partition.values == (region,)],
    )


def _compact_leaving_deletes(
    table: Table, catalog: SqlCatalog, reference: ReferenceReader, region: str
) -> None:
    """Rewrite `region`'s live rows into new files, removing its data files but none of its deletes.

    That is what a compaction by an engine that does not clean up delete files leaves.
    """
    scanned = scan_table(table).files
    assert scanned.snapshot_id is not None
    found = reference.sql(
        f"SELECT id, region, v FROM {qualified_name(catalog.name, TABLE)} "
        f"VERSION AS OF {scanned.snapshot_id} WHERE region = '{region}'"
    )
    new_rows = pa.table(
        {
            "id": pa.array([r[0] for r in found], pa.int64()),
            "region": pa.array([r[1] for r in found], pa.string()),
            "v": pa.array([r[2] for r in found], pa.string()),
        }
    )
    data, _ = _files(table, region)
    replace_data_files(table, {f.path for f in data}, tuple(write_data_files(table, new_rows)))


def replace_data_files(table: Table, removed: set[str], added: tuple[DataFile, ...]) -> None:
    """Commit a replace of data files that removes no delete file."""
    start = scan_table(table).files
    assert start.snapshot_id is not None
    commit_rewrite(
        table,
        RewriteRequest(
            process_id="other-engine",
            optimizing_type="minor",
            starting_snapshot_id=start.snapshot_id,
            starting_sequence_number=start.sequence_number,
            rewritten_data_paths=frozenset(removed),
            candidate_delete_paths=frozenset(),
            added_files=added,
            format_version=table.metadata.format_version,
        ),
    )


def test_deletes_left_behind_by_a_compaction_are_removed_and_live_ones_kept(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table = create_table(sql_catalog)
    table.append(conform(table, rows(range(0, 10), "eu")))
    table.append(conform(table, rows(range(10, 20), "eu")))
    table.append(conform(table, rows(range(100, 110), "us")))
    name = qualified_name(sql_catalog.name, TABLE)
    reference.sql(f"DELETE FROM {name} WHERE id IN (12, 105)")  # one position delete per partition
    table.refresh()
    equality_delete(table, [3], "eu")
    equality_delete(table, [101], "us")
    eu_data, _ = _files(table, "eu")
    # One position delete naming both eu files: its bounds cannot tell which file it targets.
    spread = write_position_deletes(
        table, [(eu_data[0].path, 0), (eu_data[1].path, 1)], table.metadata.default_spec_id, Record("eu")
    )
    commit_row_delta(table, delete_files=[spread])
    _compact_leaving_deletes(table, sql_catalog, reference, "eu")
    _, eu_deletes = _files(table, "eu")
    _, us_deletes = _files(table, "us")
    assert len(eu_deletes) == 3 and len(us_deletes) == 2
    previous = table.current_snapshot()
    assert previous is not None
    before = read(reference, sql_catalog)

    dry = remove_dangling_deletes(table, dry_run=True)
    assert dry.dry_run and dry.snapshot_id is None and set(dry.paths) == {f.path for f in eu_deletes}
    assert len(_files(table, "eu")[1]) == 3

    report = remove_dangling_deletes(table)
    assert report.job == MaintenanceJob.DANGLING_DELETES and report.snapshot_id is not None
    assert set(report.paths) == {f.path for f in eu_deletes}
    assert report.files_removed == 3 and report.bytes_removed == sum(f.size_bytes for f in eu_deletes)
    assert _files(table, "eu")[1] == []
    assert {f.path for f in _files(table, "us")[1]} == {f.path for f in us_deletes}
    current = table.current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary.operation.value == "replace"
    assert read(reference, sql_catalog) == before
    assert read(reference, sql_catalog, previous.snapshot_id) == before

    again = remove_dangling_deletes(table)
    assert again.snapshot_id is None and again.files_removed == 0


def test_a_position_delete_naming_a_live_file_among_others_is_kept(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table = create_table(sql_catalog)
    table.append(conform(table, rows(range(0, 10), "eu")))
    table.append(conform(table, rows(range(10, 20), "eu")))
    eu_data, _ = _files(table, "eu")
    spread = write_position_deletes(
        table, [(eu_data[0].path, 0), (eu_data[1].path, 1)], table.metadata.default_spec_id, Record("eu")
    )
    commit_row_delta(table, delete_files=[spread])
    # Drop one of the two named files; the delete still applies to the other.
    replace_data_files(table, {eu_data[0].path}, ())
    assert len(_files(table, "eu")[1]) == 1
    before = read(reference, sql_catalog)

    report = remove_dangling_deletes(table)

    assert report.files_removed == 0 and report.snapshot_id is None
    assert read(reference, sql_catalog) == before
