"""Snapshot expiry on real tables, checked with Iceberg Java's reader and file existence."""

from __future__ import annotations

import time

from maintenance_tables import (
    appending_writer,
    build_history,
    create_table,
    files_of_snapshot,
    missing_files,
    read,
    rows,
)
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table.statistics import StatisticsFile

from floe.api.table import MaintenanceSpec
from floe.local.reference_reader import ReferenceReader
from floe.maintenance.expire import expire_snapshots
from floe.maintenance.job import MaintenanceJob
from floe.maintenance.jobs import run_maintenance_job
from floe.tables.writer import conform

DAY = 86400.0


def _later() -> float:
    """A `now` at which every snapshot of a freshly built table is ten days old."""
    return time.time() + 10 * DAY


def test_expiry_keeps_the_newest_and_deletes_only_what_expired_snapshots_referenced(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, ids = build_history(sql_catalog, reference)
    kept, expired = ids[-3:], ids[:-3]
    before = {sid: read(reference, sql_catalog, sid) for sid in kept}
    still_needed = set().union(*(files_of_snapshot(table, sid) for sid in kept))
    only_expired = set().union(*(files_of_snapshot(table, sid) for sid in expired)) - still_needed

    report = expire_snapshots(table, min_snapshots=3, max_age_s=DAY, now_s=_later())

    assert report.job == MaintenanceJob.EXPIRE and not report.dry_run
    assert sorted(s.snapshot_id for s in table.metadata.snapshots) == sorted(kept)
    assert missing_files(table) == []
    # The us file rewritten by the copy-on-write delete was only read by expired snapshots.
    assert any(p.endswith(".parquet") for p in only_expired)
    assert only_expired <= set(report.paths)
    assert not any(table.io.new_input(p).exists() for p in report.paths)
    assert report.files_removed == len(report.paths) and report.bytes_removed > 0
    assert read(reference, sql_catalog) == before[kept[-1]]
    for sid in kept:
        assert read(reference, sql_catalog, sid) == before[sid]


def test_branch_tag_and_protected_snapshots_never_expire(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, ids = build_history(sql_catalog, reference)
    table.manage_snapshots().create_tag(ids[0], "first").create_branch(ids[2], "audit").commit()
    before = {sid: read(reference, sql_catalog, sid) for sid in ids}

    expire_snapshots(table, min_snapshots=1, max_age_s=DAY, now_s=_later(), protected_snapshot_ids=[ids[4]])

    remaining = {s.snapshot_id for s in table.metadata.snapshots}
    # Tag, branch head, the protected start and the chain from it to main's head stay.
    assert remaining == {ids[0], ids[2], ids[4], ids[5], ids[6], ids[7]}
    assert table.metadata.refs["first"].snapshot_id == ids[0]
    assert table.metadata.refs["audit"].snapshot_id == ids[2]
    assert missing_files(table) == []
    for sid in remaining:
        assert read(reference, sql_catalog, sid) == before[sid]


def test_young_snapshots_stay_and_a_dry_run_changes_nothing(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, ids = build_history(sql_catalog, reference)
    young = expire_snapshots(table, min_snapshots=1, max_age_s=3600, now_s=time.time())
    assert young.files_removed == 0 and len(table.metadata.snapshots) == len(ids)

    location = table.metadata_location
    dry = expire_snapshots(table, min_snapshots=1, max_age_s=DAY, now_s=_later(), dry_run=True)
    assert dry.dry_run and dry.files_removed == len(dry.paths) > 0
    table.refresh()
    assert table.metadata_location == location
    assert all(table.io.new_input(p).exists() for p in dry.paths)

    real = expire_snapshots(table, min_snapshots=1, max_age_s=DAY, now_s=_later())
    assert set(real.paths) == set(dry.paths)
    assert [s.snapshot_id for s in table.metadata.snapshots] == [ids[-1]]


def test_an_expiry_is_settled_only_when_no_snapshot_can_age_out(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    """Young snapshots beyond minSnapshots will expire some day: the job is not settled. Once
    only the snapshots kept at any age are left, it is, on the metadata file it read; the other
    jobs that depend on metadata alone settle when they commit nothing, orphan cleanup never."""
    table, ids = build_history(sql_catalog, reference)
    young = expire_snapshots(table, min_snapshots=1, max_age_s=3600, now_s=time.time())
    assert young.settled_at is None
    kept_all = expire_snapshots(table, min_snapshots=len(ids), max_age_s=3600, now_s=time.time())
    assert kept_all.settled_at == table.metadata_location
    dry = expire_snapshots(table, min_snapshots=1, max_age_s=DAY, now_s=_later(), dry_run=True)
    assert dry.settled_at is None
    expire_snapshots(table, min_snapshots=1, max_age_s=DAY, now_s=_later())
    spec = MaintenanceSpec()
    jobs = set(MaintenanceJob) - {MaintenanceJob.RETENTION}  # needs a column to filter on
    reports = {job: run_maintenance_job(table, job, spec, now_s=time.time()) for job in jobs}
    location = table.metadata_location
    assert reports[MaintenanceJob.EXPIRE].settled_at == location
    assert reports[MaintenanceJob.ORPHANS].settled_at is None
    assert reports[MaintenanceJob.MANIFESTS].snapshot_id is None
    assert reports[MaintenanceJob.MANIFESTS].settled_at == location
    assert reports[MaintenanceJob.DANGLING_DELETES].settled_at == location


def test_expiry_racing_a_writer_loses_no_committed_row(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, _ = build_history(sql_catalog, reference)
    with appending_writer(sql_catalog) as committed:
        for _ in range(3):
            expire_snapshots(table, min_snapshots=1, max_age_s=DAY, now_s=_later(), max_attempts=20)

    assert committed
    assert missing_files(table) == []
    ids = {row[0] for row in read(reference, sql_catalog)}
    assert ids.issuperset(committed)


def test_statistics_files_of_expired_snapshots_only_are_deleted(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table = create_table(sql_catalog)
    for start in (0, 10, 20):
        table.append(conform(table, rows(range(start, start + 10), "eu")))
    oldest, newest = table.metadata.snapshots[0].snapshot_id, table.metadata.snapshots[-1].snapshot_id
    stats = {}
    for sid in (oldest, newest):
        # The puffin content does not matter to expiry, only which snapshot a file belongs to.
        path = f"{table.metadata.location}/metadata/{sid}-stats.puffin"
        with table.io.new_output(path).create() as out:
            out.write(b"PFA1")
        stats[sid] = path
        statistics = StatisticsFile.model_validate(
            {
                "snapshot-id": sid,
                "statistics-path": path,
                "file-size-in-bytes": 4,
                "file-footer-size-in-bytes": 0,
                "blob-metadata": [],
            }
        )
        with table.update_statistics() as update:
            update.set_statistics(statistics)

    report = expire_snapshots(table, min_snapshots=1, max_age_s=DAY, now_s=_later())

    assert stats[oldest] in report.paths and stats[newest] not in report.paths
    assert not table.io.new_input(stats[oldest]).exists()
    assert table.io.new_input(stats[newest]).exists()
    assert [s.snapshot_id for s in table.metadata.statistics] == [newest]
