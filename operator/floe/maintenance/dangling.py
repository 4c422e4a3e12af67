"""Dangling delete files: delete files no live data file can be affected by.

They appear when compaction (floe's with deferred partitions, or another engine's) or a
copy-on-write overwrite removes data files but leaves their delete files behind. Every
reader still opens them, so they cost planning and reading time for nothing.

Iceberg's scoping rules decide (floe.planning.files.delete_applies_to): an equality
delete applies to data files of its partition (of any partition when its spec is
unpartitioned) with a smaller data sequence number; a position delete to data files of
its partition with a data sequence number not above its own, and only to the paths it
names. The shared rule (floe.commit.validation.removable_delete_paths) knows the named path
only when the file references a single one; for the other position deletes the
``file_path`` bounds, and when needed the ``file_path`` column itself, say which paths
they name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation

from floe.commit.retry import on_fresh_head
from floe.commit.snapshot import SnapshotDraft
from floe.commit.validation import removable_delete_paths
from floe.maintenance.job import MaintenanceJob, MaintenanceReport
from floe.planning.files import ContentFile, FileKind, PartitionKey
from floe.tables.manifest_io import content_key
from floe.tables.scan import content_file
from floe.tables.writer import POS_DELETE_FILE_PATH_ID


@dataclass(frozen=True)
class _Outcome:
    summary: str
    removed: tuple[DataFile, ...] = ()
    snapshot_id: int | None = None


def remove_dangling_deletes(
    table: Table, *, dry_run: bool = False, max_attempts: int = 4
) -> MaintenanceReport:
    """Remove the delete files of main's head that no live data file can be affected by.

    They are removed in one ``replace`` snapshot (no data file changes, so no row does);
    the decision is made on the head the commit replaces, and redone on the new head when
    a concurrent commit moves main (up to `max_attempts` times). The files themselves stay
    for the older snapshots until those expire. A dry run lists them and commits nothing.
    """

    def attempt(draft: SnapshotDraft) -> _Outcome:
        if draft.parent is None:
            return _Outcome("the table has no snapshot")
        head_entries = draft.head_entries()
        live = [e for _, entries in head_entries for e in entries]
        dangling = dangling_delete_paths(draft.io, draft.metadata, live)
        deletes = sum(1 for e in live if e.data_file.content != DataFileContent.DATA)
        if not dangling:
            return _Outcome(f"no dangling delete file among {deletes}")
        removed = tuple(e.data_file for e in live if content_key(e.data_file) in dangling)
        if dry_run:
            return _Outcome(f"would remove {len(dangling)} dangling delete files of {deletes}", removed)
        new_manifests, removed_files = draft.carry_over(head_entries, set(dangling))
        summary = draft.summary(Operation.REPLACE, added=[], removed=removed_files, extra={})
        snapshot = draft.commit(new_manifests, summary)
        return _Outcome(
            f"removed {len(dangling)} dangling delete files of {deletes}", removed, snapshot.snapshot_id
        )

    outcome = on_fresh_head(table, attempt, max_attempts)
    return MaintenanceReport(
        job=MaintenanceJob.DANGLING_DELETES,
        summary=outcome.summary,
        files_removed=len(outcome.removed),
        bytes_removed=sum(f.file_size_in_bytes for f in outcome.removed),
        snapshot_id=outcome.snapshot_id,
        dry_run=dry_run,
        paths=tuple(sorted(f.file_path for f in outcome.removed)),
    )


def dangling_delete_paths(io: FileIO, metadata: TableMetadata, live: Sequence[ManifestEntry]) -> set[str]:
    """Paths of the live delete files in `live` that no live data file in `live` can be affected by
    (a deletion vector's by its `content_key`)."""
    deletes = {content_key(e.data_file) for e in live if e.data_file.content != DataFileContent.DATA}
    dangling = removable_delete_paths(metadata, live, (), deletes)
    data_by_partition: dict[PartitionKey, list[ContentFile]] = {}
    for entry in live:
        if entry.data_file.content == DataFileContent.DATA:
            data = content_file(metadata, entry)
            data_by_partition.setdefault(data.partition, []).append(data)
    for entry in live:
        delete = content_file(metadata, entry)
        if delete.kind != FileKind.POSITION_DELETES or delete.path in dangling:
            continue
        if delete.referenced_data_file is not None:
            continue  # the shared rule already judged it by that one path
        candidates = {
            d.path
            for d in data_by_partition.get(delete.partition, [])
            if d.data_sequence_number <= delete.data_sequence_number
        }
        if not _names_any(io, entry.data_file, candidates):
            dangling.add(delete.path)
    return dangling


def _names_any(io: FileIO, delete: DataFile, paths: set[str]) -> bool:
    """Whether position delete file `delete` names any of `paths` (True when unsure)."""
    lower_b = (delete.lower_bounds or {}).get(POS_DELETE_FILE_PATH_ID)
    upper_b = (delete.upper_bounds or {}).get(POS_DELETE_FILE_PATH_ID)
    if lower_b is not None and upper_b is not None:
        lower, upper = lower_b.decode("utf-8", "replace"), upper_b.decode("utf-8", "replace")
        # Bounds may be truncated prefixes: a path in [lower, upper + anything] may be named.
        paths = {p for p in paths if lower <= p and (p <= upper or p.startswith(upper))}
    if not paths:
        return False
    if delete.file_format != FileFormat.PARQUET:
        return True
    with io.new_input(delete.file_path).open() as stream:
        named = pc.unique(pq.read_table(stream, columns=["file_path"])["file_path"]).to_pylist()
    return not paths.isdisjoint(named)
