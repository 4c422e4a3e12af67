"""When a table was last optimized, read back from its own snapshot history.

floe tags its commits with ``floe.optimizing-type``; reading the times from the table
means a restarted engine (or another one) schedules interval triggers correctly without
a database of its own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, ancestors_of

SUMMARY_OPTIMIZING_TYPE = "floe.optimizing-type"
"""Snapshot summary key of floe's commits: minor, major or full."""
SUMMARY_PROCESS_ID = "floe.process-id"
"""Snapshot summary key: the optimizing process that committed the snapshot (at most one does)."""
SUMMARY_DEFERRED_PARTITIONS = "floe.deferred-partitions"
"""Snapshot summary key: triggered partitions the process left for the next one."""


@dataclass(frozen=True)
class OptimizingHistory:
    """Epoch seconds of the last floe commit of each type on main (None: never)."""

    last_minor_s: float | None
    last_major_s: float | None
    last_full_s: float | None


def optimizing_history(metadata: TableMetadata) -> OptimizingHistory:
    """Walk main's ancestry newest first and note the first floe commit of each type.

    Each commit counts for its own type only, as in Amoro: a major or full optimizing does
    not restart the minor interval. A process that left triggered partitions for later
    (``floe.deferred-partitions`` > 0) does not count: the interval that triggered them must
    stay elapsed until they are done too.
    """
    found: dict[str, float] = {}
    for snapshot in ancestors_of(metadata.snapshot_by_name("main"), metadata):
        summary = snapshot.summary
        kind = summary[SUMMARY_OPTIMIZING_TYPE] if summary else None
        deferred = int(summary[SUMMARY_DEFERRED_PARTITIONS] or 0) if summary else 0
        if kind in ("minor", "major", "full") and deferred == 0:
            found.setdefault(kind, snapshot.timestamp_ms / 1000.0)
        if len(found) == 3:
            break
    return OptimizingHistory(found.get("minor"), found.get("major"), found.get("full"))


def data_commit_times(metadata: TableMetadata, count: int) -> list[float]:
    """Epoch seconds of the latest `count` commits on main that changed the table's rows, oldest
    first: a rewrite (``replace``, floe's or anyone's) is no writer's commit."""
    writes = (
        s.timestamp_ms / 1000.0
        for s in ancestors_of(metadata.snapshot_by_name("main"), metadata)
        if s.summary is None or s.summary.operation != Operation.REPLACE
    )
    return list(itertools.islice(writes, count))[::-1]
