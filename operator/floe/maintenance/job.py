"""What a maintenance job is, and what one run of it did."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class MaintenanceJob(StrEnum):
    """The maintenance jobs, by the name status and ``floe optimize --type`` use."""

    EXPIRE = "expire"
    ORPHANS = "orphans"
    MANIFESTS = "manifests"
    DANGLING_DELETES = "dangling-deletes"
    RETENTION = "retention"

    @property
    def commits(self) -> bool:
        """Whether the job commits a new snapshot of the table's data.

        Such jobs never run beside an optimizing process of the same table: both would
        replace the same files. Expiry and orphan cleanup only remove history and
        unreferenced files, so they may run while a process is in flight, protecting it.
        """
        return self in (MaintenanceJob.MANIFESTS, MaintenanceJob.DANGLING_DELETES, MaintenanceJob.RETENTION)


@dataclass(frozen=True)
class MaintenanceReport:
    """One run of a job: what it removed (or, in a dry run, would remove)."""

    job: MaintenanceJob
    summary: str
    """One line for status, Events and the CLI, e.g. "expired 12 snapshots, removed 40 files"."""
    files_removed: int = 0
    bytes_removed: int = 0
    snapshot_id: int | None = None
    """The snapshot the job committed, if it committed one."""
    dry_run: bool = False
    paths: tuple[str, ...] = ()
    """Files removed (or, in a dry run, that would be removed)."""
    settled_at: str | None = None
    """The metadata file the job read, when it left nothing to do there however long the table
    waits (a job that depends on metadata alone and committed nothing, or an expiry that found
    only snapshots kept whatever their age): the job is not due again until the table changes."""


GC_DISABLED = "GcDisabled"
"""Refusal reason: the table's ``gc.enabled`` is false; its files may belong to another table."""
LOCATION_SHARED = "LocationShared"
"""Refusal reason: a location orphan cleanup would list is shared with, inside, or contains
another table's location or write path."""
LOCATION_NOT_OWNED = "LocationNotOwned"
"""Refusal reason: a location named for orphan cleanup is not one the table writes to."""


class MaintenanceRefused(Exception):
    """A maintenance job floe refuses to run on a table, since it could delete files the table
    does not own: nothing was committed and nothing deleted.

    `reason` is the condition reason (`GC_DISABLED`, `LOCATION_SHARED`, `LOCATION_NOT_OWNED`),
    `detail` the sentence that explains it.
    """

    def __init__(self, table: str, job: MaintenanceJob, reason: str, detail: str) -> None:
        super().__init__(f"{job} of table {table} refused: {detail}; nothing was committed or deleted")
        self.table = table
        self.job = job
        self.reason = reason
        self.detail = detail


GC_ENABLED = "gc.enabled"

_GC_REFUSALS = {
    MaintenanceJob.EXPIRE: "Cannot expire snapshots",
    MaintenanceJob.ORPHANS: "Cannot delete orphan files",
}


def require_gc_enabled(table: str, job: MaintenanceJob, properties: Mapping[str, str]) -> None:
    """Raise `MaintenanceRefused` when the table's ``gc.enabled`` says its files may not be deleted.

    As Iceberg Java's RemoveSnapshots and DeleteOrphanFilesSparkAction: "Cannot expire snapshots:
    GC is disabled (deleting files may corrupt other tables)". Java reads the property with
    ``Boolean.parseBoolean``, so any value but "true" (in any case) disables GC; so does floe.
    """
    value = properties.get(GC_ENABLED)
    if value is None or value.lower() == "true":
        return
    raise MaintenanceRefused(
        table,
        job,
        GC_DISABLED,
        f"{_GC_REFUSALS[job]}: GC is disabled ({GC_ENABLED}={value}: "
        "deleting files may corrupt other tables)",
    )
