"""Commit an optimizing process as one Iceberg ``replace`` snapshot, safely next to live writers.

The rules (DESIGN.md, "Commit rules that keep data safe"):
- new files carry the starting snapshot's data sequence number, so equality deletes
  committed after planning still apply to the rewritten rows;
- the commit fails when, since the starting snapshot, a rewritten or converted data file
  was removed, or a new position delete may target a rewritten one (appends, equality
  deletes, and position deletes of converted files are fine: they stay in force);
- a delete file is removed only when every live data file it can apply to is rewritten,
  or converted (its deletes, as of the starting snapshot, are in its new position-delete
  file);
- on catalog conflicts the commit is rebuilt on the new head and retried; when it is
  abandoned, the caller deletes every file the process wrote (by name, in its output
  directories), unless the catalog may have applied an attempt after all.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot

from floe.commit.retry import on_fresh_head
from floe.commit.snapshot import CommitStateUnknown, SnapshotDraft
from floe.planning.files import ContentFile, DeleteIndex
from floe.tables.history import SUMMARY_DEFERRED_PARTITIONS, SUMMARY_OPTIMIZING_TYPE, SUMMARY_PROCESS_ID
from floe.tables.manifest_io import (
    content_key,
    deletion_vector_location,
    manifest_entries,
    snapshot_manifests,
)
from floe.tables.scan import POS_DELETE_FILE_PATH_ID, content_file
from floe.tables.support import UnsupportedTableError

log = logging.getLogger(__name__)


class CommitFailed(RuntimeError):
    """Nothing was committed, and this request never will be.

    ``outcome_unknown``: an earlier attempt's catalog call failed after it may have been
    applied, and was not found since; a catalog that applies requests late could still land
    it, so the process's files stay for orphan cleanup (which keeps what a snapshot references)
    instead of being deleted."""

    outcome_unknown: bool = False


class CommitConflict(CommitFailed):
    """A concurrent commit makes this process's result unsafe; nothing was committed."""


class CommitAbandoned(CommitFailed):
    """The commit could not be made after all retries; nothing was committed."""


class CommitPending(RuntimeError):
    """The commit could not be finished now (the catalog or the storage did not answer, or
    answered so that whether the snapshot landed is unknown): commit the same request again
    later, which finds the snapshot if it landed. Every file the process wrote is kept.

    ``outcome_unknown`` says whether a catalog call may have applied the commit; when it is
    False, nothing was committed, and a caller that gives up may delete the files."""

    def __init__(self, message: str, outcome_unknown: bool) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


@dataclass(frozen=True)
class RewriteRequest:
    """What an optimizing process wants to swap in."""

    process_id: str
    optimizing_type: str
    starting_snapshot_id: int
    starting_sequence_number: int
    rewritten_data_paths: frozenset[str]
    candidate_delete_paths: frozenset[str]
    added_files: tuple[DataFile, ...]
    """New data files, and the position-delete files of converted data files."""
    deferred_partitions: int = 0
    converted_data_paths: frozenset[str] = frozenset()
    """Data files kept, whose deletes the added position-delete files hold."""


@dataclass(frozen=True)
class RewriteCommitResult:
    """The snapshot made and what it changed."""

    snapshot_id: int
    sequence_number: int
    removed_data_files: int
    removed_delete_files: int
    added_data_files: int
    attempts: int
    added_delete_files: int = 0
    """Position-delete files of converted data files."""

    @property
    def changes(self) -> str:
        """What the snapshot swapped, in a few words: ``3 data + 2 delete files → 1 data file``."""
        added = f"{self.added_data_files} data file{'s' if self.added_data_files != 1 else ''}"
        if self.added_delete_files:
            added += f" + {self.added_delete_files} position-delete"
            added += " files" if self.added_delete_files != 1 else " file"
        return f"{self.removed_data_files} data + {self.removed_delete_files} delete files → {added}"


def commit_rewrite(table: Table, request: RewriteRequest, max_attempts: int = 4) -> RewriteCommitResult:
    """Commit `request` as one replace snapshot, retrying on catalog conflicts.

    Idempotent: when main already holds the process's snapshot (a commit whose answer was
    lost), that snapshot is the result. Before anything is written, every added file must
    still be in storage (CommitConflict otherwise).

    It deletes none of the process's files, whatever happens: its caller, which knows where
    the process wrote and under which names, removes them (`remove_uncommitted_outputs`) when
    the commit failed (CommitFailed without ``outcome_unknown``, UnsupportedTableError).
    CommitPending when the table cannot be read or written now, or every attempt's outcome
    was unknown: committing the same request again later finds the snapshot if it landed.
    """
    attempts = _Attempts()
    try:
        _check_added_files_stored(table, request)
        return _commit_with_retries(table, request, max_attempts, attempts)
    except CommitStateUnknown as exc:
        raise CommitPending(f"commit of {request.process_id} may not have landed: {exc}", True) from exc
    except CommitFailed as exc:
        exc.outcome_unknown = attempts.outcome_unknown
        raise
    except UnsupportedTableError:
        raise
    except Exception as exc:
        # Reading the table or its metadata failed (the catalog or the storage is down), or
        # writing the snapshot's metadata did: nothing is known to be wrong with the request.
        raise CommitPending(
            f"commit of {request.process_id} could not be made now: {type(exc).__name__}: {exc}",
            attempts.outcome_unknown,
        ) from exc


@dataclass
class _Attempts:
    count: int = 0
    outcome_unknown: bool = False
    """An attempt's catalog call failed after it may have been applied."""


def _check_added_files_stored(table: Table, request: RewriteRequest) -> None:
    """Raise CommitConflict when a file the process wrote is no longer in storage."""
    paths = [f.file_path for f in request.added_files]
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(paths)))) as pool:
        present = list(pool.map(lambda path: table.io.new_input(path).exists(), paths))
    missing = [path for path, there in zip(paths, present, strict=True) if not there]
    if missing:
        raise CommitConflict(
            f"{len(missing)} file(s) the process wrote are gone from storage, e.g. {missing[0]}; "
            "nothing was committed"
        )


def _commit_with_retries(
    table: Table, request: RewriteRequest, max_attempts: int, attempts: _Attempts
) -> RewriteCommitResult:
    def attempt(draft: SnapshotDraft) -> RewriteCommitResult:
        attempts.count += 1
        landed = committed_snapshot(table, draft.metadata, request)
        if landed is not None:
            log.info("%s: snapshot %d already committed it", request.process_id, landed.snapshot_id)
            summary = landed.summary
            removed = int(summary.get("removed-delete-files", "0")) if summary is not None else 0
            return _result_of(landed, request, attempts.count, removed)
        validate_since_start(table, draft.metadata, request)
        try:
            snapshot, removed_deletes = _build_and_commit(draft, request)
        except CommitStateUnknown:
            attempts.outcome_unknown = True
            raise
        return _result_of(snapshot, request, attempts.count, removed_deletes)

    try:
        return on_fresh_head(table, attempt, max_attempts)
    except CommitFailedException as exc:
        raise CommitAbandoned(f"commit of {request.process_id} failed {max_attempts} times: {exc}") from None


def committed_snapshot(table: Table, metadata: TableMetadata, request: RewriteRequest) -> Snapshot | None:
    """The snapshot on main, since the starting one, that committed `request`, if any: it carries
    the process's id and added exactly the request's files."""
    snapshot = metadata.snapshot_by_name("main")
    while snapshot is not None and snapshot.snapshot_id != request.starting_snapshot_id:
        summary = snapshot.summary
        if summary is not None and summary.get(SUMMARY_PROCESS_ID) == request.process_id:
            wanted = {f.file_path for f in request.added_files}
            if _added_paths(table, snapshot) == wanted:
                return snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return None


def _added_paths(table: Table, snapshot: Snapshot) -> set[str]:
    added = set()
    version = table.metadata.format_version
    for manifest in snapshot_manifests(snapshot, table.io, version):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for entry in manifest_entries(manifest, table.io, version):
            if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id:
                added.add(entry.data_file.file_path)
    return added


def _result_of(
    snapshot: Snapshot, request: RewriteRequest, attempts: int, removed_deletes: int
) -> RewriteCommitResult:
    added_data = sum(1 for f in request.added_files if f.content == DataFileContent.DATA)
    return RewriteCommitResult(
        snapshot_id=snapshot.snapshot_id,
        sequence_number=snapshot.sequence_number or 0,
        removed_data_files=len(request.rewritten_data_paths),
        removed_delete_files=removed_deletes,
        added_data_files=added_data,
        added_delete_files=len(request.added_files) - added_data,
        attempts=attempts,
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


def _build_and_commit(draft: SnapshotDraft, request: RewriteRequest) -> tuple[Snapshot, int]:
    """Commit the request on `draft`'s head; the snapshot and how many delete files it removed."""
    head = draft.parent
    if head is None:
        raise CommitConflict("the table has no snapshot any more")
    head_entries = draft.head_entries()
    live = [e for _, entries in head_entries for e in entries]
    live_paths = {e.data_file.file_path for e in live}
    missing = (request.rewritten_data_paths | request.converted_data_paths) - live_paths
    if missing:
        raise CommitConflict(f"rewritten or converted data file {sorted(missing)[0]} is no longer live")

    removed_deletes = removable_delete_paths(
        draft.metadata,
        live,
        request.rewritten_data_paths,
        request.candidate_delete_paths,
        request.converted_data_paths,
    )
    removed = set(request.rewritten_data_paths) | removed_deletes

    carried, removed_files = draft.carry_over(head_entries, removed)
    added_entries = [
        ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=draft.snapshot_id, data_file=f)
        for f in request.added_files
    ]
    manifests = (
        draft.write_entries(added_entries, added_sequence_number=request.starting_sequence_number) + carried
    )
    summary = draft.summary(
        Operation.REPLACE,
        added=request.added_files,
        removed=removed_files,
        extra={
            SUMMARY_OPTIMIZING_TYPE: request.optimizing_type,
            SUMMARY_PROCESS_ID: request.process_id,
            SUMMARY_DEFERRED_PARTITIONS: str(request.deferred_partitions),
        },
    )
    snapshot = draft.commit(manifests, summary)
    return snapshot, len(removed_deletes)


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
