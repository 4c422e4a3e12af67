"""Manifest rewrite: merge the current snapshot's small manifests so planning reads fewer files.

The live entries of the small manifests are rewritten, per partition spec and separately
for data and delete manifests, sorted by partition so that each new manifest covers a
narrow partition range (scan planning prunes manifests by their partition summaries),
into manifests of about the target size. Every entry is written EXISTING with its
original snapshot id, data sequence number and file sequence number: sequence numbers
decide which delete files apply to which data files, so the table's contents stay the
same. The result is one ``replace`` snapshot that adds and removes no file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from floe.commit.retry import on_fresh_head
from floe.commit.snapshot import SnapshotDraft
from floe.maintenance.job import MaintenanceJob, MaintenanceReport
from floe.planning.files import partition_identity
from floe.tables.manifest_io import manifest_entries

SUMMARY_MANIFESTS_CREATED = "manifests-created"
SUMMARY_MANIFESTS_REPLACED = "manifests-replaced"
SUMMARY_MANIFESTS_KEPT = "manifests-kept"
SUMMARY_ENTRIES_PROCESSED = "entries-processed"


@dataclass(frozen=True)
class _Outcome:
    summary: str
    snapshot_id: int | None = None


def rewrite_manifests(
    table: Table,
    *,
    trigger_small_manifests: int,
    target_manifest_size: int,
    dry_run: bool = False,
    max_attempts: int = 4,
) -> MaintenanceReport:
    """Rewrite the small manifests of main's head when there are at least `trigger_small_manifests`.

    A manifest is small below `target_manifest_size` bytes; only data manifests count
    toward the trigger, but small delete manifests are merged too. Below the trigger
    nothing happens and the summary says why. The commit asserts main's head unchanged; on
    a conflict the rewrite is redone on the new head (up to `max_attempts` times). A dry
    run only says what would be rewritten. Nothing is deleted: the replaced manifests stay
    referenced by the older snapshots until those expire.
    """
    if target_manifest_size <= 0:
        raise ValueError(f"target_manifest_size must be positive, got {target_manifest_size}")

    def attempt(draft: SnapshotDraft) -> _Outcome:
        head = draft.parent
        if head is None:
            return _Outcome("the table has no snapshot")
        manifests = draft.manifests(head)
        small = [m for m in manifests if m.manifest_length < target_manifest_size]
        small_data = sum(1 for m in small if m.content == ManifestContent.DATA)
        if small_data < trigger_small_manifests:
            return _Outcome(
                f"{small_data} small data manifests of {len(manifests)}, below the trigger of "
                f"{trigger_small_manifests}: nothing to rewrite"
            )
        groups: dict[tuple[int, ManifestContent], list[ManifestFile]] = {}
        for manifest in small:
            groups.setdefault((manifest.partition_spec_id, manifest.content), []).append(manifest)
        # A lone small manifest of its spec and content has nothing to merge with.
        merged = {key: group for key, group in groups.items() if len(group) > 1}
        replaced = {m.manifest_path for group in merged.values() for m in group}
        if dry_run:
            return _Outcome(f"would rewrite {len(replaced)} small manifests of {len(manifests)}")
        created, entries = _rewrite(draft, merged, target_manifest_size)
        kept = [m for m in manifests if m.manifest_path not in replaced]
        summary = draft.summary(
            Operation.REPLACE,
            added=[],
            removed=[],
            extra={
                SUMMARY_MANIFESTS_CREATED: str(len(created)),
                SUMMARY_MANIFESTS_REPLACED: str(len(replaced)),
                SUMMARY_MANIFESTS_KEPT: str(len(kept)),
                SUMMARY_ENTRIES_PROCESSED: str(entries),
            },
        )
        snapshot = draft.commit([*created, *kept], summary)
        return _Outcome(
            f"rewrote {len(small)} small manifests into {len(created)} ({entries} entries), kept {len(kept)}",
            snapshot.snapshot_id,
        )

    outcome = on_fresh_head(table, attempt, max_attempts)
    return MaintenanceReport(
        job=MaintenanceJob.MANIFESTS,
        summary=outcome.summary,
        snapshot_id=outcome.snapshot_id,
        dry_run=dry_run,
    )


def _rewrite(
    draft: SnapshotDraft, groups: dict[tuple[int, ManifestContent], list[ManifestFile]], target_size: int
) -> tuple[list[ManifestFile], int]:
    """New manifests holding the live entries of each (spec, content) group; also how many entries."""
    created: list[ManifestFile] = []
    total = 0
    for (spec_id, content), group in sorted(groups.items(), key=lambda kv: (kv[0][0], int(kv[0][1]))):
        version = draft.metadata.format_version
        entries = [e for m in group for e in manifest_entries(m, draft.io, version)]
        entries.sort(key=_partition_order)
        total += len(entries)
        # Size per entry as the inputs show it (their fixed overhead included, so this errs small).
        per_entry = max(1, sum(m.manifest_length for m in group) // max(1, len(entries)))
        per_manifest = max(1, target_size // per_entry)
        for start in range(0, len(entries), per_manifest):
            with draft.manifest_writer(spec_id, content) as writer:
                for entry in entries[start : start + per_manifest]:
                    # Keeps snapshot id and both sequence numbers (read with inheritance resolved).
                    writer.existing(entry)
            created.append(writer.to_manifest_file())
    return created, total


def _partition_order(entry: ManifestEntry) -> tuple[tuple[bool, Any], ...]:
    """Sort key of an entry's partition; nulls sort last, values of one field share a type, and
    floats sort as Iceberg Java orders them (a NaN would leave Python's sort unordered)."""
    partition = entry.data_file.partition
    values = partition_identity(tuple(partition[i] for i in range(len(partition))))
    return tuple((value is None, value if value is not None else 0) for value in values)
