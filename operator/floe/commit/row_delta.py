"""A ``RowDelta``-style commit: add data files and delete files in one snapshot.

Used to write equality deletes (CDC upserts: delete the old version of a key and insert
the new one in the same snapshot, so the delete does not hide the insert) and by tests.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot

from floe.commit.snapshot import SnapshotDraft


def commit_row_delta(
    table: Table,
    data_files: Sequence[DataFile] = (),
    delete_files: Sequence[DataFile] = (),
    max_attempts: int = 4,
) -> Snapshot:
    """Add `data_files` and `delete_files` in one snapshot on main, retrying on conflicts.

    Added files inherit the new snapshot's sequence number, as a writer's files do.
    """
    if not data_files and not delete_files:
        raise ValueError("a row delta needs at least one data or delete file")
    for f in data_files:
        if f.content != DataFileContent.DATA:
            raise ValueError(f"{f.file_path} is not a data file")
    for f in delete_files:
        if f.content == DataFileContent.DATA:
            raise ValueError(f"{f.file_path} is not a delete file")
    if not delete_files:
        operation = Operation.APPEND
    else:
        operation = Operation.OVERWRITE if data_files else Operation.DELETE
    attempt = 0
    while True:
        attempt += 1
        table.refresh()
        draft = SnapshotDraft(table=table, metadata=table.metadata)
        try:
            entries = [
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED, snapshot_id=draft.snapshot_id, data_file=f
                )
                for f in (*data_files, *delete_files)
            ]
            manifests = draft.write_entries(entries, added_sequence_number=None)
            if draft.parent is not None:
                manifests += draft.manifests(draft.parent)
            summary = draft.summary(operation, added=[*data_files, *delete_files], removed=[], extra={})
            snapshot = draft.commit(manifests, summary)
        except CommitFailedException:
            draft.discard()
            if attempt >= max_attempts:
                raise
            continue
        except BaseException:
            draft.discard()
            raise
        table.refresh()
        return snapshot
