"""The replace commit against a real SQLite catalog, checked with Iceberg's Java reader.

The "rewrite" here is done by hand (rows read by the reference reader, written back with
pyiceberg) so these tests exercise only the snapshot producer and its validation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from floe.commit import snapshot as snapshot_module
from floe.commit.request import CommitConflict, RewriteRequest
from floe.commit.rewrite import commit_rewrite
from floe.commit.row_delta import commit_row_delta
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.planning.files import FileKind
from floe.tables.scan import live_entries, scan_table
from floe.tables.writer import conform, write_data_files, write_equality_deletes

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=True),
    NestedField(3, "v", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))


def _rows(ids: range, region: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "region": pa.array([region] * len(ids), pa.string()),
            "v": pa.array([f"v{i}" for i in ids], pa.string()),
        }
    )


def _table(catalog: SqlCatalog) -> Table:
    table = catalog.create_table("db.t", SCHEMA, partition_spec=SPEC, properties={"format-version": "2"})
    for start in range(0, 40, 10):
        table.append(conform(table, _rows(range(start, start + 10), "eu")))
    table.append(conform(table, _rows(range(100, 110), "us")))
    # Upsert-style delete of ids 3 and 15 in eu.
    deletes = write_equality_deletes(
        table,
        pa.table({"id": pa.array([3, 15], pa.int64())}),
        ["id"],
        table.metadata.default_spec_id,
        Record("eu"),
    )
    commit_row_delta(table, delete_files=[deletes])
    return table


def _read(reference: ReferenceReader, catalog: SqlCatalog, snapshot_id: int | None = None) -> Counter[Any]:
    return reference.rows(catalog.name, "db.t", snapshot_id)


def _rewrite_partition(
    table: Table, reference: ReferenceReader, catalog: SqlCatalog, region: str
) -> tuple[RewriteRequest, Counter[Any]]:
    """Rewrite one partition by hand: the live rows of its files as of the current snapshot."""
    scanned = scan_table(table)
    start = scanned.files
    assert start.snapshot_id is not None
    rewritten = [f for f in start.data_files if f.partition.values == (region,)]
    deletes = [f for f in start.delete_files if f.partition.values == (region,)]
    rows = reference.sql(
        f"SELECT id, region, v FROM {qualified_name(catalog.name, 'db.t')} "
        f"VERSION AS OF {start.snapshot_id} WHERE region = '{region}'"
    )
    new_rows = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "region": pa.array([r[1] for r in rows], pa.string()),
            "v": pa.array([r[2] for r in rows], pa.string()),
        }
    )
    added = write_data_files(table, new_rows)
    request = RewriteRequest(
        process_id="test-process",
        optimizing_type="minor",
        starting_snapshot_id=start.snapshot_id,
        starting_sequence_number=start.sequence_number,
        rewritten_data_paths=frozenset(f.path for f in rewritten),
        candidate_delete_paths=frozenset(f.path for f in deletes),
        added_files=tuple(added),
        format_version=table.metadata.format_version,
    )
    return request, _read(reference, catalog, start.snapshot_id)


def test_replace_keeps_rows_removes_applied_deletes_and_keeps_start_sequence_number(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table = _table(sql_catalog)
    request, before = _rewrite_partition(table, reference, sql_catalog, "eu")
    result = commit_rewrite(table, request)

    assert _read(reference, sql_catalog) == before
    after = scan_table(table).files
    assert result.removed_data_files == 4 and result.removed_delete_files == 1
    assert after.delete_files == ()
    assert table.current_snapshot() is not None
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None and summary.operation.value == "replace"
    added = {f.file_path for f in request.added_files}
    new_entries = [e for e in live_entries(table, after.snapshot_id) if e.data_file.file_path in added]
    assert new_entries and all(e.sequence_number == request.starting_sequence_number for e in new_entries)
    assert all(e.file_sequence_number == result.sequence_number for e in new_entries)


def test_delete_that_still_applies_to_untouched_files_is_kept(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table = _table(sql_catalog)
    request, _ = _rewrite_partition(table, reference, sql_catalog, "eu")
    keep_one = sorted(request.rewritten_data_paths)[0]
    partial = replace(request, rewritten_data_paths=request.rewritten_data_paths - {keep_one}, added_files=())
    # Only the removal side matters for this check; no data is added, so rows shrink.
    commit = commit_rewrite(table, partial)
    assert commit.removed_delete_files == 0
    assert len(scan_table(table).files.delete_files) == 1


def test_concurrent_equality_delete_still_applies_to_rewritten_rows(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table = _table(sql_catalog)
    request, before = _rewrite_partition(table, reference, sql_catalog, "eu")
    late_delete = write_equality_deletes(
        table,
        pa.table({"id": pa.array([7], pa.int64())}),
        ["id"],
        table.metadata.default_spec_id,
        Record("eu"),
    )
    commit_row_delta(table, delete_files=[late_delete])
    commit_rewrite(table, request)

    expected = Counter({row: n for row, n in before.items() if row[0] != 7})
    assert _read(reference, sql_catalog) == expected
    # The late delete still applies to the new files (their sequence number is older).
    assert late_delete.file_path in {f.path for f in scan_table(table).files.delete_files}


def test_concurrent_append_is_kept(sql_catalog: SqlCatalog, reference: ReferenceReader) -> None:
    table = _table(sql_catalog)
    request, before = _rewrite_partition(table, reference, sql_catalog, "eu")
    table.append(conform(table, _rows(range(500, 505), "eu")))
    commit_rewrite(table, request)
    appended = Counter((i, "eu", f"v{i}") for i in range(500, 505))
    assert _read(reference, sql_catalog) == before + appended


def test_concurrent_removal_of_a_rewritten_file_fails_and_changes_nothing(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table = _table(sql_catalog)
    request, _ = _rewrite_partition(table, reference, sql_catalog, "eu")
    other, _ = _rewrite_partition(table, reference, sql_catalog, "eu")
    commit_rewrite(table, other)  # another optimizer got there first
    snapshot_before = table.current_snapshot()

    with pytest.raises(CommitConflict, match="was removed by snapshot") as conflict:
        commit_rewrite(table, request)
    table.refresh()
    assert table.current_snapshot() == snapshot_before
    assert not conflict.value.outcome_unknown
    # The commit deletes nothing: the process's owner removes its files by name.
    for f in request.added_files:
        assert Path(f.file_path.removeprefix("file://")).exists()


def test_concurrent_position_delete_on_rewritten_file_fails(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table = _table(sql_catalog)
    with table.transaction() as tx:
        tx.set_properties({"write.delete.mode": "merge-on-read"})
    request, _ = _rewrite_partition(table, reference, sql_catalog, "eu")
    reference.sql(f"DELETE FROM {qualified_name(sql_catalog.name, 'db.t')} WHERE id = 21")
    with pytest.raises(CommitConflict, match="position deletes"):
        commit_rewrite(table, request)
    assert reference.count(sql_catalog.name, "db.t") == 50 - 2 - 1


def test_catalog_conflict_is_retried_on_the_new_head(
    sql_catalog: SqlCatalog, reference: ReferenceReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(sql_catalog)
    request, before = _rewrite_partition(table, reference, sql_catalog, "eu")
    original = snapshot_module.SnapshotDraft.swap
    calls = {"n": 0}

    def racing_swap(self: snapshot_module.SnapshotDraft, *args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            # Another writer lands between our validation and our swap.
            racer = sql_catalog.load_table("db.t")
            racer.append(conform(racer, _rows(range(900, 902), "us")))
        return original(self, *args)

    monkeypatch.setattr(snapshot_module.SnapshotDraft, "swap", racing_swap)
    result = commit_rewrite(table, request)
    assert result.attempts == 2
    assert _read(reference, sql_catalog) == before + Counter((i, "us", f"v{i}") for i in (900, 901))


def test_row_delta_rejects_wrong_content(sql_catalog: SqlCatalog) -> None:
    table = _table(sql_catalog)
    data = write_data_files(table, _rows(range(1, 2), "eu"))
    with pytest.raises(ValueError, match="is not a delete file"):
        commit_row_delta(table, delete_files=data)
    with pytest.raises(ValueError, match="at least one"):
        commit_row_delta(table)
    deletes = scan_table(table).files.delete_files
    assert deletes and all(f.kind == FileKind.EQUALITY_DELETES for f in deletes)
