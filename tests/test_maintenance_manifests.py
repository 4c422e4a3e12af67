"""Manifest rewrite on real tables: fewer manifests, same entries, same rows in Iceberg Java."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from maintenance_tables import build_history, equality_delete, read, rows
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform

from floe.commit import snapshot as snapshot_module
from floe.local.reference_reader import ReferenceReader
from floe.maintenance.job import MaintenanceJob
from floe.maintenance.manifests import rewrite_manifests
from floe.tables.scan import live_entries
from floe.tables.writer import conform

MiB = 1024 * 1024


def _entries(table: Table) -> dict[str, tuple[Any, ...]]:
    """Live files of the current snapshot with what decides which deletes apply to them."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return {
        e.data_file.file_path: (e.snapshot_id, e.sequence_number, e.file_sequence_number, e.data_file.content)
        for e in live_entries(table, snapshot.snapshot_id)
    }


def _manifest_count(table: Table) -> int:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return len(snapshot.manifests(table.io))


def test_rewrite_merges_manifests_and_keeps_sequence_numbers(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, _ = build_history(sql_catalog, reference)
    # Re-insert a deleted id after its equality delete: only sequence numbers tell that the
    # delete hides the old row (id 3 of snapshot 1) and not the new one.
    table.append(conform(table, rows(range(3, 4), "eu")))
    before_rows = read(reference, sql_catalog)
    before_entries = _entries(table)
    before_count = _manifest_count(table)
    previous = table.current_snapshot()
    assert previous is not None and before_count >= 8

    report = rewrite_manifests(table, trigger_small_manifests=4, target_manifest_size=MiB)

    assert report.job == MaintenanceJob.MANIFESTS and report.snapshot_id is not None
    current = table.current_snapshot()
    assert current is not None and current.snapshot_id == report.snapshot_id
    assert current.summary is not None and current.summary.operation.value == "replace"
    # One data and one delete manifest for the single partition spec.
    assert _manifest_count(table) == 2 < before_count
    assert _entries(table) == before_entries
    assert read(reference, sql_catalog) == before_rows
    assert before_rows[(3, "eu", "v3")] == 1
    assert read(reference, sql_catalog, previous.snapshot_id) == before_rows


def test_a_small_target_splits_the_output_by_partition(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, _ = build_history(sql_catalog, reference)
    for start in range(200, 260, 10):
        table.append(conform(table, rows(range(start, start + 10), "us")))
    before_rows, before_entries = read(reference, sql_catalog), _entries(table)
    report = rewrite_manifests(table, trigger_small_manifests=4, target_manifest_size=16 * 1024)
    assert report.snapshot_id is not None
    snapshot = table.current_snapshot()
    assert snapshot is not None
    data_manifests = [
        m for m in snapshot.manifests(table.io) if m.content == 0 and m.manifest_length < 16 * 1024
    ]
    assert len(data_manifests) >= 2
    # Sorted by partition: at most one manifest holds both regions.
    spanning = [
        m
        for m in data_manifests
        if m.partitions and m.partitions[0].lower_bound != m.partitions[0].upper_bound
    ]
    assert len(spanning) <= 1
    assert _entries(table) == before_entries
    assert read(reference, sql_catalog) == before_rows


def test_below_the_trigger_nothing_is_committed(sql_catalog: SqlCatalog, reference: ReferenceReader) -> None:
    table, _ = build_history(sql_catalog, reference)
    location = table.metadata_location
    report = rewrite_manifests(table, trigger_small_manifests=50, target_manifest_size=MiB)
    assert report.snapshot_id is None and "below the trigger of 50" in report.summary
    dry = rewrite_manifests(table, trigger_small_manifests=2, target_manifest_size=MiB, dry_run=True)
    assert dry.dry_run and dry.snapshot_id is None and dry.summary.startswith("would rewrite")
    table.refresh()
    assert table.metadata_location == location


def test_a_concurrent_commit_is_kept_and_the_rewrite_redone_on_it(
    sql_catalog: SqlCatalog, reference: ReferenceReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, _ = build_history(sql_catalog, reference)
    before = read(reference, sql_catalog)
    original = snapshot_module.SnapshotDraft.commit
    racer = sql_catalog.load_table("db.t")
    raced: list[bool] = []

    def racing_commit(self: snapshot_module.SnapshotDraft, *args: Any) -> Any:
        if not raced:
            raced.append(True)
            # A writer lands between our reading of the head and our swap.
            racer.append(conform(racer, rows(range(900, 902), "us")))
            equality_delete(racer, [900], "us")
        return original(self, *args)

    monkeypatch.setattr(snapshot_module.SnapshotDraft, "commit", racing_commit)
    report = rewrite_manifests(table, trigger_small_manifests=4, target_manifest_size=MiB)
    monkeypatch.undo()

    assert report.snapshot_id is not None
    assert _manifest_count(table) == 2
    assert read(reference, sql_catalog) == before + Counter({(901, "us", "v901"): 1})


def test_manifests_of_each_partition_spec_are_merged_separately(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, _ = build_history(sql_catalog, reference)
    table.update_spec().add_field("id", BucketTransform(2), "id_bucket").commit()
    for start in range(300, 340, 10):
        table.append(conform(table, rows(range(start, start + 10), "eu")))
    # A delete of the old spec: it applies to old-spec eu files only, not to id 305 (new spec).
    equality_delete(table, [3, 305], "eu", spec_id=0)
    before_rows, before_entries = read(reference, sql_catalog), _entries(table)

    rewrite_manifests(table, trigger_small_manifests=4, target_manifest_size=MiB)

    snapshot = table.current_snapshot()
    assert snapshot is not None
    groups = Counter((m.partition_spec_id, int(m.content)) for m in snapshot.manifests(table.io))
    # Spec 0: data and deletes; spec 1: data only.
    assert groups == Counter({(0, 0): 1, (0, 1): 1, (1, 0): 1})
    assert _entries(table) == before_entries
    assert read(reference, sql_catalog) == before_rows
    assert before_rows[(305, "eu", "v305")] == 1
