"""Whether a rewrite commit is still safe: the checks of a request against the commits made
since its starting snapshot and against the head it would commit on, the snapshots on main
that committed it already (an attempt whose answer was lost), and which delete files the
rewrite leaves without a live data file to apply to.

The rules are `floe.commit.rewrite`'s (docs/design/commit.md, "The rules that keep data safe"); a
check that fails raises CommitConflict, and nothing is committed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from floe.commit.request import CommitConflict, RewriteRequest
from floe.planning.files import ContentFile, DeleteIndex
from floe.tables.history import SUMMARY_PROCESS_ID
from floe.tables.manifest_io import (
    added_entries,
    content_key,
    deletion_vector_location,
    file_first_row_id,
    manifest_entries,
    snapshot_manifests,
)
from floe.tables.scan import content_file
from floe.tables.writer import POS_DELETE_FILE_PATH_ID


def committed_snapshots(table: Table, metadata: TableMetadata, request: RewriteRequest) -> list[Snapshot]:
    """The snapshots on main, since the starting one, that committed `request`, oldest first (none:
    not committed): each carries the process's id, and together they added exactly the request's
    files. One catalog commit added them all, so they follow each other."""
    found: list[Snapshot] = []
    snapshot = metadata.snapshot_by_name("main")
    while snapshot is not None and snapshot.snapshot_id != request.starting_snapshot_id:
        summary = snapshot.summary
        if summary is not None and summary.get(SUMMARY_PROCESS_ID) == request.process_id:
            found.insert(0, snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    added = {path for s in found for path in _added_paths(table, s)}
    return found if found and added == {f.file_path for f in request.added_files} else []


def _added_paths(table: Table, snapshot: Snapshot) -> set[str]:
    return {e.data_file.file_path for e in added_entries(snapshot, table.io, table.metadata.format_version)}


def check_format_version(metadata: TableMetadata, request: RewriteRequest) -> None:
    """Raise CommitConflict when the table's format version is not the one the process planned
    for: its files follow that version's rules (a v3 table takes no Parquet position deletes)."""
    if metadata.format_version != request.format_version:
        raise CommitConflict(
            f"the table's format version changed from {request.format_version} to "
            f"{metadata.format_version} since planning; the process's files were written for "
            f"v{request.format_version}; nothing was committed"
        )


def check_first_row_ids(live: Iterable[ManifestEntry], request: RewriteRequest) -> None:
    """Raise CommitConflict when a rewritten or converted data file's ``first_row_id`` at the head
    is not the one it had at planning: the tasks gave its rows the ids it had then (or none, and
    the commit new ones), and another commit has assigned it ids meanwhile."""
    replaced = request.rewritten_data_paths | request.converted_data_paths
    for entry in live:
        path = entry.data_file.file_path
        if entry.data_file.content != DataFileContent.DATA or path not in replaced:
            continue
        planned, now = request.planned_first_row_ids.get(path), file_first_row_id(entry.data_file)
        if planned != now:
            raise CommitConflict(
                f"data file {path} has first_row_id {now} where it had {planned} at planning "
                "(another commit assigned its rows ids meanwhile); nothing was committed"
            )


def validate_since_start(table: Table, metadata: TableMetadata, request: RewriteRequest) -> None:
    """Raise CommitConflict if a commit since the starting snapshot makes the rewrite unsafe."""
    version = metadata.format_version
    for snapshot in _snapshots_since(metadata, request.starting_snapshot_id):
        for manifest in snapshot_manifests(snapshot, table.io, version):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest_entries(manifest, table.io, version, discard_deleted=False):
                if entry.snapshot_id != snapshot.snapshot_id:
                    continue
                _check_entry(entry, snapshot, request)


def _snapshots_since(metadata: TableMetadata, starting_snapshot_id: int) -> list[Snapshot]:
    newer: list[Snapshot] = []
    snapshot = metadata.snapshot_by_name("main")
    while snapshot is not None and snapshot.snapshot_id != starting_snapshot_id:
        newer.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    if snapshot is None:
        raise CommitConflict(
            f"starting snapshot {starting_snapshot_id} is no longer an ancestor of main "
            "(the table was rolled back or its history replaced)"
        )
    return newer


def _check_entry(entry: ManifestEntry, snapshot: Snapshot, request: RewriteRequest) -> None:
    df = entry.data_file
    op = snapshot.summary.operation.value if snapshot.summary else "?"
    if entry.status == ManifestEntryStatus.DELETED and (
        df.file_path in request.rewritten_data_paths or df.file_path in request.converted_data_paths
    ):
        raise CommitConflict(
            f"data file {df.file_path} was removed by snapshot {snapshot.snapshot_id} ({op}) after planning"
        )
    if entry.status == ManifestEntryStatus.ADDED and df.content == DataFileContent.POSITION_DELETES:
        vector = deletion_vector_location(df)
        if vector is None:
            target = _position_delete_targets(df, request.rewritten_data_paths)
        else:
            # A converted file gets a new deletion vector, and a data file may have only one.
            replaced = request.rewritten_data_paths | request.converted_data_paths
            target = vector[0] if vector[0] in replaced else None
        if target is not None:
            what = "position deletes" if vector is None else "a deletion vector in"
            raise CommitConflict(
                f"snapshot {snapshot.snapshot_id} ({op}) added {what} {df.file_path} "
                f"that may target data file {target}, which this process rewrites or converts"
            )


def _position_delete_targets(delete: DataFile, rewritten: frozenset[str]) -> str | None:
    """A rewritten path the position delete may reference, judged by its file_path bounds."""
    lower_b = (delete.lower_bounds or {}).get(POS_DELETE_FILE_PATH_ID)
    upper_b = (delete.upper_bounds or {}).get(POS_DELETE_FILE_PATH_ID)
    if lower_b is None or upper_b is None:
        return next(iter(sorted(rewritten)), None)
    lower, upper = lower_b.decode("utf-8", "replace"), upper_b.decode("utf-8", "replace")
    # Bounds may be truncated prefixes; a path inside [lower, upper + anything] may match.
    for path in sorted(rewritten):
        if lower <= path and (path <= upper or path.startswith(upper)):
            return path
    return None


def removable_delete_paths(
    metadata: TableMetadata,
    live: Iterable[ManifestEntry],
    removed_data_paths: Collection[str],
    candidate_delete_paths: Collection[str],
    converted_data_paths: Collection[str] = (),
) -> set[str]:
    """Candidate delete files that no live data file, but those removed or converted, can be
    affected by.

    A converted data file needs none of the candidates: each candidate that applies to it
    existed when it was planned, so its task applied it. A rewrite's added files are not
    considered: position deletes cannot name them and they carry the starting sequence
    number, which no pre-existing equality delete exceeds.
    A position delete without a single referenced data file is taken to apply to every
    data file of its partition with a sequence number not above its own.
    """
    remaining_data: list[ContentFile] = []
    candidates: list[ContentFile] = []
    for entry in live:
        path = content_key(entry.data_file)
        if entry.data_file.content == DataFileContent.DATA:
            if path not in removed_data_paths and path not in converted_data_paths:
                remaining_data.append(content_file(metadata, entry))
        elif path in candidate_delete_paths:
            candidates.append(content_file(metadata, entry))
    still_needed: set[str] = set()
    index = DeleteIndex(candidates)
    for data in remaining_data:
        still_needed.update(d.path for d in index.deletes_for(data))
    return {c.path for c in candidates if c.path not in still_needed}
