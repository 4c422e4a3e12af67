"""Snapshot expiry: drop old snapshots from the metadata, then the files only they referenced.

The retention rules follow Iceberg Java's ``RemoveSnapshots``:
- each branch keeps its newest ancestors while fewer than its minimum are kept or they are
  younger than its maximum age (a branch's own ``min-snapshots-to-keep`` /
  ``max-snapshot-age-ms`` override the job's values); the first ancestor past both ends
  the branch's history;
- every branch head and tagged snapshot is kept;
- a snapshot no branch reaches (e.g. after a rollback) is kept while younger than max age.
floe adds one rule: a snapshot an optimizing process started from is kept, with every
snapshot between it and the head of each branch it is an ancestor of, because the
process's commit walks that chain to validate what changed since it started.

Files are deleted only after the metadata commit, and only when no snapshot left in the
committed metadata references them, so a snapshot committed concurrently is respected.

A table whose ``gc.enabled`` is false is refused, dry runs included, as Iceberg Java's
RemoveSnapshots refuses it: its files may belong to another table (Spark's snapshot procedure
and ``add_files`` set it for that reason).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Sequence

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    RemovePartitionStatisticsUpdate,
    RemoveSnapshotsUpdate,
    TableRequirement,
    TableUpdate,
)

from floe.kit.files import delete_paths
from floe.maintenance.job import MaintenanceJob, MaintenanceReport, require_gc_enabled
from floe.maintenance.reachable import referenced_files

log = logging.getLogger(__name__)


def expire_snapshots(
    table: Table,
    *,
    min_snapshots: int,
    max_age_s: float,
    now_s: float,
    protected_snapshot_ids: Collection[int] = (),
    dry_run: bool = False,
    max_attempts: int = 4,
    delete: Callable[[Sequence[str]], None] | None = None,
) -> MaintenanceReport:
    """Expire the snapshots of `table` that the retention rules (module docstring) do not keep.

    `min_snapshots` newest snapshots of each branch are always kept; others expire once
    older than `max_age_s` before `now_s` (seconds since the epoch). Branch heads, tagged
    snapshots and `protected_snapshot_ids` (and the chains from them to branch heads) never
    expire. The metadata change is committed with every ref asserted unchanged, retried on
    conflicts up to `max_attempts` times; then manifest lists, manifests, data, delete and
    statistics files that no remaining snapshot references are deleted, by `delete` when
    given (the group's executors), else here. A dry run commits and deletes nothing and
    reports what would go. Raises `MaintenanceRefused` when ``gc.enabled`` is false.
    """
    if min_snapshots < 1:
        raise ValueError(f"min_snapshots must be at least 1, got {min_snapshots}")
    if max_age_s <= 0:
        raise ValueError(f"max_age_s must be positive, got {max_age_s}")
    for attempt in range(1, max_attempts + 1):
        table.refresh()
        before = table.metadata
        require_gc_enabled(".".join(table.name()), MaintenanceJob.EXPIRE, before.properties)
        kept = retained_snapshot_ids(before, min_snapshots, max_age_s, now_s, protected_snapshot_ids)
        expired = [s for s in before.snapshots if s.snapshot_id not in kept]
        if not expired:
            settled = not dry_run and nothing_ages_out(before, min_snapshots, max_age_s)
            return MaintenanceReport(
                job=MaintenanceJob.EXPIRE,
                summary=f"no snapshot to expire ({len(before.snapshots)} kept)",
                dry_run=dry_run,
                settled_at=table.metadata_location if settled else None,
            )
        if dry_run:
            return _report(table.io, before, expired, _without(before, expired), dry_run=True)
        try:
            _commit_removal(table, before, expired)
        except CommitFailedException as exc:
            log.info("expiry attempt %d of %s hit a concurrent commit: %s", attempt, table.name(), exc)
            time.sleep(min(0.1 * 2**attempt, 2.0))
            continue
        table.refresh()
        # What is left after the commit (concurrent snapshots included) decides what is still needed.
        return _report(table.io, before, expired, table.metadata, dry_run=False, delete=delete)
    raise CommitFailedException(f"snapshot expiry of {table.name()} conflicted {max_attempts} times")


def nothing_ages_out(metadata: TableMetadata, min_snapshots: int, max_age_s: float) -> bool:
    """Whether the retention rules keep every snapshot of `metadata` however old it gets (the
    newest of each branch, heads, tags): expiry has nothing to do on it, now or later."""
    kept = retained_snapshot_ids(metadata, min_snapshots, max_age_s, math.inf)
    return kept >= {s.snapshot_id for s in metadata.snapshots}


def retained_snapshot_ids(
    metadata: TableMetadata,
    min_snapshots: int,
    max_age_s: float,
    now_s: float,
    protected_snapshot_ids: Collection[int] = (),
) -> set[int]:
    """Ids of the snapshots the retention rules keep (see the module docstring)."""
    default_cutoff_ms = (now_s - max_age_s) * 1000.0
    existing = {s.snapshot_id for s in metadata.snapshots}
    protected = set(protected_snapshot_ids) & existing
    kept = set(protected)
    on_a_branch: set[int] = set()
    for ref in metadata.refs.values():
        kept.add(ref.snapshot_id)
        if ref.snapshot_ref_type != SnapshotRefType.BRANCH:
            on_a_branch.add(ref.snapshot_id)
            continue
        head = metadata.snapshot_by_id(ref.snapshot_id)
        if head is None:
            continue
        keep_count = ref.min_snapshots_to_keep or min_snapshots
        cutoff_ms = now_s * 1000.0 - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms else default_cutoff_ms
        ancestry = list(ancestors_of(head, metadata))
        on_a_branch.update(s.snapshot_id for s in ancestry)
        for index, snapshot in enumerate(ancestry):
            if index < keep_count or snapshot.timestamp_ms >= cutoff_ms:
                kept.add(snapshot.snapshot_id)
            else:
                break
        # The commit of a process started from a protected ancestor walks back to it.
        for index, snapshot in enumerate(ancestry):
            if snapshot.snapshot_id in protected:
                kept.update(s.snapshot_id for s in ancestry[: index + 1])
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id not in on_a_branch and snapshot.timestamp_ms >= default_cutoff_ms:
            kept.add(snapshot.snapshot_id)
    return kept


def _commit_removal(table: Table, metadata: TableMetadata, expired: list[Snapshot]) -> None:
    """Remove `expired` from the metadata, provided no ref moved since `metadata` was read.

    A ref moved concurrently (a commit, a rollback, a new tag on an old snapshot) could
    make an expired snapshot needed again, so such a commit fails and is recomputed.
    """
    expired_ids = {s.snapshot_id for s in expired}
    requirements: tuple[TableRequirement, ...] = tuple(
        AssertRefSnapshotId.model_validate({"ref": name, "snapshot-id": ref.snapshot_id})
        for name, ref in metadata.refs.items()
    )
    # Removing snapshots drops their statistics entries but not their partition statistics.
    updates: tuple[TableUpdate, ...] = (
        RemoveSnapshotsUpdate.model_validate({"snapshot-ids": sorted(expired_ids)}),
        *(
            RemovePartitionStatisticsUpdate.model_validate({"snapshot-id": stats.snapshot_id})
            for stats in metadata.partition_statistics
            if stats.snapshot_id in expired_ids
        ),
    )
    table.catalog.commit_table(table, requirements=requirements, updates=updates)


def _statistics_paths(metadata: TableMetadata, snapshot_ids: set[int] | None = None) -> dict[str, int]:
    """Statistics and partition-statistics files of `snapshot_ids` (all when None), with sizes."""
    stats = [*metadata.statistics, *metadata.partition_statistics]
    return {
        s.statistics_path: s.file_size_in_bytes
        for s in stats
        if snapshot_ids is None or s.snapshot_id in snapshot_ids
    }


def _without(metadata: TableMetadata, expired: list[Snapshot]) -> TableMetadata:
    """`metadata` as the removal of `expired` would leave it (what a dry run compares with)."""
    expired_ids = {s.snapshot_id for s in expired}
    return metadata.model_copy(
        update={
            "snapshots": [s for s in metadata.snapshots if s.snapshot_id not in expired_ids],
            "statistics": [s for s in metadata.statistics if s.snapshot_id not in expired_ids],
            "partition_statistics": [
                s for s in metadata.partition_statistics if s.snapshot_id not in expired_ids
            ],
        }
    )


def _report(
    io: FileIO,
    before: TableMetadata,
    expired: list[Snapshot],
    after: TableMetadata,
    *,
    dry_run: bool,
    delete: Callable[[Sequence[str]], None] | None = None,
) -> MaintenanceReport:
    """Delete (unless `dry_run`) what only `expired` referenced, and say what that was.

    `after` is the metadata without them: what decides which files are still needed.
    """
    still = referenced_files(io, after.snapshots, live_only=True)
    gone = referenced_files(io, expired, live_only=False)
    still_stats = _statistics_paths(after)
    gone_stats = _statistics_paths(before, {s.snapshot_id for s in expired})

    sizes: dict[str, int] = {}
    sizes.update({p: n for p, n in gone.content_files.items() if p not in still.content_files})
    sizes.update({p: n for p, n in gone.manifests.items() if p not in still.manifests})
    sizes.update({p: n for p, n in gone_stats.items() if p not in still_stats})
    manifest_lists = sorted(gone.manifest_lists - still.manifest_lists)
    for path in manifest_lists:
        try:
            sizes[path] = len(io.new_input(path))
        except FileNotFoundError:
            sizes[path] = 0
    paths = tuple(sorted(sizes))
    if not dry_run:
        if delete is None:
            delete_paths(io, paths, workers=8, on_error="raise")
        else:
            delete(paths)
    verb = "would expire" if dry_run else "expired"
    return MaintenanceReport(
        job=MaintenanceJob.EXPIRE,
        summary=(
            f"{verb} {len(expired)} snapshots, {'would remove' if dry_run else 'removed'} {len(paths)} files "
            f"({len(manifest_lists)} manifest lists, "
            f"{sum(1 for p in paths if p in gone.manifests)} manifests, "
            f"{sum(1 for p in paths if p in gone.content_files)} data/delete files)"
        ),
        files_removed=len(paths),
        bytes_removed=sum(sizes.values()),
        dry_run=dry_run,
        paths=paths,
    )
