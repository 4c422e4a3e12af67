"""Run one maintenance job of a table with the settings of its spec."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from pyiceberg.table import Table

from floe.api.table import MaintenanceSpec
from floe.maintenance.dangling import remove_dangling_deletes
from floe.maintenance.expire import expire_snapshots
from floe.maintenance.job import MaintenanceJob, MaintenanceReport
from floe.maintenance.manifests import rewrite_manifests
from floe.maintenance.orphans import remove_orphan_files
from floe.maintenance.orphans_on_executors import ExecutorPool, remove_orphan_files_on_executors
from floe.maintenance.retention import expire_rows
from floe.planning.files import TableFiles
from floe.tables.catalog_locations import CatalogLocations
from floe.tables.support import check_supported

METADATA_ONLY = frozenset({MaintenanceJob.MANIFESTS, MaintenanceJob.DANGLING_DELETES})
"""Jobs whose work depends on the table's metadata alone, not on the time: one that committed
nothing has nothing to do until the metadata changes."""


def run_maintenance_job(
    table: Table,
    job: MaintenanceJob,
    spec: MaintenanceSpec,
    *,
    now_s: float,
    protected_snapshot_ids: Collection[int] = (),
    protected_prefixes: Collection[str] = (),
    dry_run: bool = False,
    executors: ExecutorPool | None = None,
    known_live: TableFiles | None = None,
    catalog_locations: CatalogLocations | None = None,
) -> MaintenanceReport:
    """Run `job` on `table` as `spec` configures it.

    With `executors` (a big table), orphan cleanup lists, reads manifests and deletes on them,
    and expiry deletes there; everything else runs in this process. `known_live`: the live
    files of a snapshot the caller has read, which no orphan scan may name. `catalog_locations`:
    the locations of the other tables of the table's catalog, kept by the caller between runs
    (without it, orphan cleanup reads them now).

    `protected_snapshot_ids` are the starting snapshots of optimizing processes in flight
    (never expired); `protected_prefixes` the file-name prefixes of their output files
    (never removed as orphans, however old). Raises ValueError when the job cannot run as
    configured (retention without ``dataRetention``, an unknown column), and
    `UnsupportedTableError` for a table floe refuses (what its metadata says suffices: no
    job reads the files' contents), and `MaintenanceRefused` for a job that could delete files
    the table does not own (expiry and orphan cleanup of a table whose ``gc.enabled`` is false,
    orphan cleanup of a location the table does not own).
    """
    check_supported(".".join(table.name()), table)
    report = _run(
        table,
        job,
        spec,
        now_s,
        _Protection(protected_snapshot_ids, protected_prefixes, known_live),
        dry_run,
        executors,
        catalog_locations,
    )
    if job in METADATA_ONLY and report.snapshot_id is None and not dry_run:
        return replace(report, settled_at=table.metadata_location)
    return report


@dataclass(frozen=True)
class _Protection:
    """What an optimizing process in flight uses, and the live files the caller has read."""

    snapshot_ids: Collection[int]
    prefixes: Collection[str]
    known_live: TableFiles | None


def _run(
    table: Table,
    job: MaintenanceJob,
    spec: MaintenanceSpec,
    now_s: float,
    protection: _Protection,
    dry_run: bool,
    executors: ExecutorPool | None,
    catalog_locations: CatalogLocations | None,
) -> MaintenanceReport:
    if job is MaintenanceJob.EXPIRE:
        return expire_snapshots(
            table,
            min_snapshots=spec.snapshot_retention.min_snapshots,
            max_age_s=spec.snapshot_retention.max_age,
            now_s=now_s,
            protected_snapshot_ids=protection.snapshot_ids,
            dry_run=dry_run,
            delete=(lambda paths: executors.delete_or_here(table.io, paths))
            if executors is not None
            else None,
        )
    orphans = spec.orphan_files
    if job is MaintenanceJob.ORPHANS and executors is not None:
        return remove_orphan_files_on_executors(
            table,
            executors,
            older_than_s=orphans.older_than,
            now_s=now_s,
            protected_prefixes=protection.prefixes,
            dry_run=dry_run,
            known_live=protection.known_live,
            locations=orphans.locations,
            catalog_locations=catalog_locations,
        )
    if job is MaintenanceJob.ORPHANS:
        return remove_orphan_files(
            table,
            older_than_s=orphans.older_than,
            now_s=now_s,
            protected_prefixes=protection.prefixes,
            dry_run=dry_run,
            locations=orphans.locations,
            catalog_locations=catalog_locations,
        )
    if job is MaintenanceJob.MANIFESTS:
        return rewrite_manifests(
            table,
            trigger_small_manifests=spec.manifests.trigger_small_manifests,
            target_manifest_size=spec.manifests.target_manifest_size,
            dry_run=dry_run,
        )
    if job is MaintenanceJob.DANGLING_DELETES:
        return remove_dangling_deletes(table, dry_run=dry_run)
    if spec.data_retention is None:
        raise ValueError("data retention needs spec.maintenance.dataRetention (column and olderThan)")
    return expire_rows(
        table,
        column=spec.data_retention.column,
        older_than_s=spec.data_retention.older_than,
        now_s=now_s,
        dry_run=dry_run,
    )
