"""Commit an optimizing process in one catalog commit, safely next to live writers.

A process that rewrites data files makes a ``replace`` snapshot; one that converts data files'
deletes into new position-delete files or deletion vectors makes a ``delete`` snapshot of them,
as Iceberg Java's RowDelta does, so that another engine's concurrent rewrite of a converted file
sees them (`_snapshot_parts`). A process doing both makes the two, the ``delete`` on the
``replace``, added together: main moves to the second or not at all.

The rules (docs/design/commit.md, "The rules that keep data safe"):
- new files carry the starting snapshot's data sequence number, so equality deletes
  committed after planning still apply to the rewritten rows;
- the commit fails when, since the starting snapshot, a rewritten or converted data file
  was removed, or a new position delete may target a rewritten one (appends, equality
  deletes, and position deletes of converted files are fine: they stay in force), or the
  table's format version, or a rewritten or converted file's ``first_row_id``, changed;
- no snapshot holds two deletion vectors for one data file;
- a delete file is removed only when every live data file it can apply to is rewritten,
  or converted (its deletes, as of the starting snapshot, are in its new position-delete
  file);
- on catalog conflicts the commit is rebuilt on the new head and retried; when it is
  abandoned, the caller deletes every file the process wrote (by name, in its output
  directories), unless the catalog may have applied an attempt after all, in this call or in
  an earlier one (`CommitHistory`).

The checks against commits made since the start, and which delete files may go, are
`floe.commit.validation`; the request and the ways a commit fails, `floe.commit.request`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntry, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot

from floe.commit.request import CommitAbandoned, CommitConflict, CommitFailed, CommitPending, RewriteRequest
from floe.commit.retry import on_fresh_head
from floe.commit.snapshot import CommitStateUnknown, SnapshotDraft, SnapshotRefused
from floe.commit.validation import (
    check_first_row_ids,
    check_format_version,
    committed_snapshots,
    removable_delete_paths,
    validate_since_start,
)
from floe.commit.vectors import check_one_vector_per_data_file
from floe.tables.history import SUMMARY_DEFERRED_PARTITIONS, SUMMARY_OPTIMIZING_TYPE, SUMMARY_PROCESS_ID
from floe.tables.manifest_io import content_key, manifest_first_row_id
from floe.tables.pyiceberg_compat import ROW_LINEAGE_VERSION
from floe.tables.support import UnsupportedTableError

log = logging.getLogger(__name__)


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
    snapshot_ids: tuple[int, ...] = ()
    """Every snapshot the commit added, oldest first: `snapshot_id` alone, or a ``replace``
    and then the ``delete`` holding the conversions."""

    @property
    def changes(self) -> str:
        """What the snapshot swapped, in a few words: ``3 data + 2 delete files → 1 data file``."""
        added = f"{self.added_data_files} data file{'s' if self.added_data_files != 1 else ''}"
        if self.added_delete_files:
            added += f" + {self.added_delete_files} position-delete"
            added += " files" if self.added_delete_files != 1 else " file"
        changes = f"{self.removed_data_files} data + {self.removed_delete_files} delete files → {added}"
        if len(self.snapshot_ids) > 1:
            changes += (
                f"; the rewrite in replace snapshot {self.snapshot_ids[0]}, the conversions in a delete on it"
            )
        return changes


@dataclass
class CommitHistory:
    """What one process's commit attempts so far leave unresolved, kept by the caller across the
    `commit_rewrite` calls of one request (a delayed commit is tried again later)."""

    outcome_unknown: bool = False
    """An attempt's catalog call failed after it may have been applied, and no call has found
    the process's snapshot since. Until one does, a snapshot may hold the process's files: they
    are never deleted, but left to orphan cleanup (which keeps what a snapshot references)."""
    attempts: int = 0
    """Commit attempts made so far, over every call: more than one after conflicts or delays."""


def commit_rewrite(
    table: Table, request: RewriteRequest, max_attempts: int = 4, history: CommitHistory | None = None
) -> RewriteCommitResult:
    """Commit `request` (one snapshot, or two: see the module), retrying on catalog conflicts.

    Idempotent: when main already holds the process's snapshots (a commit whose answer was
    lost), they are the result. Before anything is written, every added file must still be
    in storage (CommitConflict otherwise).

    It deletes none of the process's files, whatever happens: its caller, which knows where
    the process wrote and under which names, removes them (`remove_uncommitted_outputs`) when
    the commit failed and `history` says no attempt may have landed. A caller that commits the
    same request again passes the same `history` each time: an unknown outcome of an earlier
    call stays unknown until a call finds the snapshot. CommitPending when the table cannot be
    read or written now, or every attempt's outcome was unknown: committing the same request
    again later finds the snapshot if it landed.
    """
    history = history if history is not None else CommitHistory()
    try:
        _check_added_files_stored(table, request)
        result = _commit_with_retries(table, request, max_attempts, history)
    except CommitStateUnknown as exc:
        raise CommitPending(f"commit of {request.process_id} may not have landed: {exc}", True) from exc
    except CommitFailed as exc:
        exc.outcome_unknown = history.outcome_unknown
        raise
    except UnsupportedTableError:
        raise
    except Exception as exc:
        # Reading the table or its metadata failed (the catalog or the storage is down), or
        # writing the snapshot's metadata did: nothing is known to be wrong with the request.
        raise CommitPending(
            f"commit of {request.process_id} could not be made now: {type(exc).__name__}: {exc}",
            history.outcome_unknown,
        ) from exc
    history.outcome_unknown = False  # resolved: the process's snapshot is on main
    return result


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
    table: Table, request: RewriteRequest, max_attempts: int, history: CommitHistory
) -> RewriteCommitResult:
    attempts = 0

    def attempt(draft: SnapshotDraft) -> RewriteCommitResult:
        nonlocal attempts
        attempts += 1
        history.attempts += 1
        landed = committed_snapshots(table, draft.metadata, request)
        if landed:
            log.info("%s: snapshot %d already committed it", request.process_id, landed[-1].snapshot_id)
            removed = sum(
                int(s.summary.get("removed-delete-files") or 0) for s in landed if s.summary is not None
            )
            return _result_of(landed, request, attempts, removed)
        check_format_version(draft.metadata, request)
        validate_since_start(table, draft.metadata, request)
        try:
            snapshots, removed_deletes = _build_and_commit(draft, request)
        except CommitStateUnknown:
            history.outcome_unknown = True
            raise
        except SnapshotRefused as exc:
            raise CommitConflict(f"{exc}; nothing was committed") from exc
        return _result_of(snapshots, request, attempts, removed_deletes)

    try:
        return on_fresh_head(table, attempt, max_attempts)
    except CommitFailedException as exc:
        raise CommitAbandoned(f"commit of {request.process_id} failed {max_attempts} times: {exc}") from None


def _result_of(
    snapshots: Sequence[Snapshot], request: RewriteRequest, attempts: int, removed_deletes: int
) -> RewriteCommitResult:
    added_data = sum(1 for f in request.added_files if f.content == DataFileContent.DATA)
    last = snapshots[-1]
    return RewriteCommitResult(
        snapshot_id=last.snapshot_id,
        sequence_number=last.sequence_number or 0,
        removed_data_files=len(request.rewritten_data_paths),
        removed_delete_files=removed_deletes,
        added_data_files=added_data,
        added_delete_files=len(request.added_files) - added_data,
        attempts=attempts,
        snapshot_ids=tuple(s.snapshot_id for s in snapshots),
    )


@dataclass(frozen=True)
class _Part:
    """One snapshot of a process's commit."""

    operation: Operation
    removed: frozenset[str]
    """Paths (`content_key`) of the live files it removes."""
    added: tuple[DataFile, ...]


def _snapshot_parts(
    metadata: TableMetadata, live: list[ManifestEntry], request: RewriteRequest
) -> tuple[list[_Part], int]:
    """The snapshots that commit `request` on a head whose live entries are `live`, oldest first,
    and how many delete files they remove in all.

    The position-delete files (deletion vectors on v3) of converted data files go into a
    ``delete`` snapshot, as Iceberg Java's RowDelta commits added deletes (BaseRowDelta.operation:
    delete files added, no data files: ``delete``). Another engine's rewrite of a converted file,
    planned before an equality delete that this process converted and removes, relies on that
    equality delete; Iceberg Java's RewriteFiles refuses to commit when a snapshot since its start
    added a delete for a file it replaces, but looks only in ``overwrite`` and ``delete``
    snapshots (MergingSnapshotProducer.validateNoNewDeletesForDataFiles,
    VALIDATE_ADDED_DELETE_FILES_OPERATIONS). In a ``replace`` it would commit, dropping the new
    deletes with the data file while the equality delete is gone: the deleted rows come back.

    The added deletes keep the starting snapshot's data sequence number, and Java still sees
    them where it matters: it only counts deletes above its own starting snapshot's sequence
    number (DeleteFileIndex.afterSequenceNumber). A rewrite that started before the equality
    delete has a starting sequence number below the delete's, which is at most this process's
    starting one: the new deletes count, the rewrite is refused. A rewrite that started at or
    after this process's starting snapshot does not count them, and need not: it read the data
    file with that equality delete applied, so its output holds none of the rows it deletes.

    The rewrite (rewritten data files out, new ones in) is a ``replace`` made first, removing the
    delete files no remaining data file needs once the rewritten ones are gone (the converted
    ones still count); the ``delete`` on it removes those the converted files no longer need
    either. Each snapshot is a table as the process leaves it in part. In this order, on a v3
    table whose files have no row ids yet (upgraded, with no v3 snapshot since), the rewritten
    rows get their ids once, from the rewrite, not first from a snapshot that still holds their
    old files. A process with only conversions, or only rewrites, makes one snapshot; one whose
    conversions wrote no file (nothing left to delete) only a ``replace``.
    """
    data = tuple(f for f in request.added_files if f.content == DataFileContent.DATA)
    deletes = tuple(f for f in request.added_files if f.content != DataFileContent.DATA)
    rewritten, candidates = request.rewritten_data_paths, request.candidate_delete_paths
    removable = frozenset(
        removable_delete_paths(metadata, live, rewritten, candidates, request.converted_data_paths)
    )
    if not deletes:
        return [_Part(Operation.REPLACE, rewritten | removable, data)], len(removable)
    if not rewritten and not data:
        return [_Part(Operation.DELETE, removable, deletes)], len(removable)
    after_rewrite = frozenset(removable_delete_paths(metadata, live, rewritten, candidates))
    return [
        _Part(Operation.REPLACE, rewritten | after_rewrite, data),
        _Part(Operation.DELETE, removable - after_rewrite, deletes),
    ], len(removable)


def _build_and_commit(draft: SnapshotDraft, request: RewriteRequest) -> tuple[list[Snapshot], int]:
    """Commit the request on `draft`'s head; the snapshots made and how many delete files they removed."""
    head = draft.parent
    if head is None:
        raise CommitConflict("the table has no snapshot any more")
    head_entries = draft.head_entries()
    live = [e for _, entries in head_entries for e in entries]
    live_paths = {e.data_file.file_path for e in live}
    missing = (request.rewritten_data_paths | request.converted_data_paths) - live_paths
    if missing:
        raise CommitConflict(f"rewritten or converted data file {sorted(missing)[0]} is no longer live")
    check_first_row_ids(live, request)

    parts, removed_deletes = _snapshot_parts(draft.metadata, live, request)
    tags = {
        SUMMARY_OPTIMIZING_TYPE: request.optimizing_type,
        SUMMARY_PROCESS_ID: request.process_id,
        SUMMARY_DEFERRED_PARTITIONS: str(request.deferred_partitions),
    }
    # Entries read once serve the snapshots above too, but for those of a v3 data manifest
    # without a first_row_id: the snapshot below assigned it one, which its files inherit.
    known = {
        manifest.manifest_path: entries
        for manifest, entries in head_entries
        if manifest.content == ManifestContent.DELETES
        or draft.metadata.format_version < ROW_LINEAGE_VERSION
        or manifest_first_row_id(manifest) is not None
    }
    snapshots: list[Snapshot] = []
    part_draft = draft
    for part in parts:
        if snapshots:
            part_draft = part_draft.stacked(snapshots[-1])
            head_entries = part_draft.head_entries(known)
        below = [e.data_file for _, entries in head_entries for e in entries]
        check_one_vector_per_data_file(
            ".".join(draft.table.name()),
            (
                f
                for f in [*below, *part.added]
                if f.content != DataFileContent.DATA and content_key(f) not in part.removed
            ),
        )
        carried, removed_files = part_draft.carry_over(head_entries, part.removed)
        added_entries = [
            ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED, snapshot_id=part_draft.snapshot_id, data_file=f
            )
            for f in part.added
        ]
        # New files carry the starting snapshot's sequence number (see `_snapshot_parts`).
        manifests = (
            part_draft.write_entries(added_entries, added_sequence_number=request.starting_sequence_number)
            + carried
        )
        summary = part_draft.summary(part.operation, added=part.added, removed=removed_files, extra=tags)
        snapshots.append(part_draft.build(manifests, summary))
    draft.swap(snapshots)
    return snapshots, removed_deletes
