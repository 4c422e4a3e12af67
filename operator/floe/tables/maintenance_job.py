"""What a maintenance job is, and what one run of it did."""

from __future__ import annotations

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
