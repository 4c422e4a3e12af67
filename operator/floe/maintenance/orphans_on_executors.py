"""Orphan cleanup of a big table on its group's executors: they list and delete, the operator
only checks what commits made meanwhile reference.

Safety is the local cleanup's (`floe.maintenance.orphans`), split over two processes: the
executor lists the table's locations, then reads the metadata file the operator named when
it sent the task. A commit made after that file but before the listing ended may reference a
listed file, so once the scan returns the operator reloads the table and drops from the
orphans whatever the commits since then reference (`referenced_since`: their manifest lists
and the manifests they added, no more). Only then do delete tasks go out.

The scan's answer is checked before anything is deleted, as far as the operator can without
reading every manifest (the work it gave away): each orphan lies under a listed location,
and none is a metadata file, statistics file or manifest list the current metadata names,
nor a live file of a snapshot the operator has scanned (`known_live`, the engine's last
evaluation) that the metadata still holds. A scan that fails these checks fails the job,
and nothing is deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from floe.kit.files import delete_paths
from floe.maintenance.job import MaintenanceJob, MaintenanceReport, require_gc_enabled
from floe.maintenance.orphans import (
    checksummed_path,
    cleanup_roots,
    metadata_references,
    orphans_report,
    referenced_since,
)
from floe.planning.files import TableFiles
from floe.protocol.file_tasks import (
    DELETE_BATCH,
    DeleteFilesSpec,
    FileTaskResult,
    FileTaskSpec,
    OrphanFile,
    OrphanScanResult,
    OrphanScanSpec,
)
from floe.tables.catalog_locations import CatalogLocations
from floe.tables.listing import fs_path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecutorPool:
    """A group's executors as a maintenance job uses them: `run` sends file tasks and waits for
    every result (raising if one fails for good); tasks carry `io_properties` and name
    `storage_secret` (`floe.protocol.storage.task_io_properties`)."""

    run: Callable[[Sequence[FileTaskSpec]], list[FileTaskResult]]
    io_properties: dict[str, str]
    storage_secret: str | None

    def delete(self, locations: Sequence[str]) -> None:
        """Delete `locations` on the executors, in tasks of at most `DELETE_BATCH`."""
        if locations:
            self.run(
                [
                    DeleteFilesSpec(
                        task_id=f"delete-{start // DELETE_BATCH:05d}",
                        io_properties=self.io_properties,
                        storage_secret=self.storage_secret,
                        paths=list(locations[start : start + DELETE_BATCH]),
                    )
                    for start in range(0, len(locations), DELETE_BATCH)
                ]
            )

    def delete_or_here(self, io: FileIO, locations: Sequence[str]) -> None:
        """`delete` on the executors, and where they cannot (the table left its group, the tasks
        ran out of retries or time, the engine stops), here through `io`: these files are
        unreferenced already (an expiry committed), and no later run would find them again."""
        try:
            self.delete(locations)
        except Exception as exc:  # whatever stopped the executors, the files must still go
            log.warning("deleting %d files here, the executors did not: %s", len(locations), exc)
            delete_paths(io, locations, workers=8, on_error="raise")


def remove_orphan_files_on_executors(
    table: Table,
    executors: ExecutorPool,
    *,
    older_than_s: float,
    now_s: float,
    protected_prefixes: Collection[str] = (),
    dry_run: bool = False,
    known_live: TableFiles | None = None,
    locations: Sequence[str] = (),
    catalog_locations: CatalogLocations | None = None,
) -> MaintenanceReport:
    """`remove_orphan_files`, with the listing, the reading of every manifest and the deletes
    done by `executors`. Raises as `remove_orphan_files` does for a bad age or FileIO and for a
    refused table or location (`MaintenanceRefused`, before any task is sent), and
    OrphanScanRefused for a scan that names a file the table uses (`known_live`: the live
    files of a snapshot already read, which the check then covers too)."""
    io, roots = cleanup_roots(table, older_than_s, now_s, locations, catalog_locations)
    scanned_at = table.metadata_location
    known_snapshots = [snapshot.snapshot_id for snapshot in table.metadata.snapshots]
    scan = OrphanScanSpec(
        task_id="orphan-scan",
        io_properties=executors.io_properties,
        storage_secret=executors.storage_secret,
        roots=roots.roots,
        metadata_location=scanned_at,
        cutoff_ns=int((now_s - older_than_s) * 1e9),
        protected_prefixes=sorted(protected_prefixes),
    )
    [result] = executors.run([scan])
    if not isinstance(result, OrphanScanResult):
        raise TypeError(f"an orphan scan returned {type(result).__name__}")
    orphans = result.orphans
    table.refresh()
    # GC turned off during the scan: refused all the same.
    require_gc_enabled(".".join(table.name()), MaintenanceJob.ORPHANS, table.metadata.properties)
    _check_scan(io, table, scan, orphans, known_live)
    if table.metadata_location != scanned_at:
        since = {
            fs_path(io, p)
            for p in referenced_since(io, table.metadata, table.metadata_location, known_snapshots)
        }
        orphans = [o for o in orphans if o.path not in since and checksummed_path(o.path) not in since]
    if not dry_run:
        executors.delete([o.location for o in orphans])
    return orphans_report(
        len(orphans),
        sum(o.size for o in orphans),
        result.old_files,
        older_than_s,
        tuple(o.location for o in orphans),
        dry_run,
        "; ".join(note for note in ("listed on the group's executors", roots.note) if note),
    )


class OrphanScanRefused(ValueError):
    """An orphan scan named a file that cannot be an orphan: nothing is deleted."""


def _check_scan(
    io: PyArrowFileIO,
    table: Table,
    scan: OrphanScanSpec,
    orphans: Sequence[OrphanFile],
    known_live: TableFiles | None,
) -> None:
    metadata = table.metadata
    named = metadata_references(metadata, table.metadata_location)
    named.update(snapshot.manifest_list for snapshot in metadata.snapshots)
    # A snapshot the metadata still holds references its live files: none is an orphan.
    if known_live is not None and metadata.snapshot_by_id(known_live.snapshot_id or -1) is not None:
        named.update(f.path for f in (*known_live.data_files, *known_live.delete_files))
    kept = {fs_path(io, location) for location in named}
    for orphan in orphans:
        if fs_path(io, orphan.location) != orphan.path:
            problem = f"its location {orphan.location} is not its path"
        elif not any(orphan.path.startswith(root + "/") for root in scan.roots):
            problem = "it is outside the table's locations"
        elif orphan.path in kept or orphan.path.rsplit("/", 1)[-1].startswith(tuple(scan.protected_prefixes)):
            problem = "the table uses it, or an optimizing process in flight writes it"
        else:
            continue
        raise OrphanScanRefused(
            f"refused the orphan scan of {'.'.join(table.name())}: it names {orphan.path}, but {problem}; "
            "nothing was deleted"
        )
