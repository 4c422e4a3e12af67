"""A table's history as the soak observes it: every snapshot seen in its metadata, kept after expiry.

The soak's tables have no branch, so every committed snapshot is on main and the snapshots form
one chain ordered by sequence number (each commit takes the next one). Polling often enough
keeps each snapshot's record even after another engine expires it; a sequence number never seen
is a snapshot made and expired between two polls.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

RETENTION_SUMMARY = ("floe.maintenance", "retention")
FLOE_PREFIX = "floe."
# Iceberg Java's SnapshotProducer puts the EnvironmentContext (engine name and versions) into every
# summary it writes; pyiceberg, which floe commits with, puts none.
JAVA_SUMMARY_KEY = "iceberg-version"


class Kind(StrEnum):
    """What a snapshot may do to the rows."""

    WRITER = "writer"
    """A writer's commit (append, overwrite, delete): the oracle applies its operation."""
    RETENTION = "retention"
    """floe's data retention: only rows older than the cutoff may go."""
    REPLACE = "replace"
    """A rewrite (optimizing, compaction, manifests, dangling deletes): rows unchanged."""
    FLOE_OTHER = "floe-other"
    """Any other commit floe tags: rows unchanged."""


@dataclass(frozen=True)
class Snap:
    """One snapshot as first seen."""

    snapshot_id: int
    sequence: int
    parent_id: int | None
    operation: str
    summary: dict[str, str]

    @property
    def kind(self) -> Kind:
        """What the snapshot may do to the rows, from its operation and floe's summary keys."""
        if self.summary.get(RETENTION_SUMMARY[0]) == RETENTION_SUMMARY[1]:
            return Kind.RETENTION
        if self.operation == "replace":
            return Kind.REPLACE
        if any(key.startswith(FLOE_PREFIX) for key in self.summary):
            return Kind.FLOE_OTHER
        return Kind.WRITER

    @property
    def committer(self) -> str:
        """``floe`` or ``java`` for the snapshots that keep rows (or retention), ``writer`` for the rest."""
        if self.kind is Kind.WRITER:
            return "writer"
        return "java" if JAVA_SUMMARY_KEY in self.summary else "floe"

    @property
    def job(self) -> str:
        """The commit's job, for the figures: ``floe:minor``, ``floe:retention``, ``java:replace``..."""
        if self.committer == "floe":
            optimizing = self.summary.get("floe.optimizing-type")
            if optimizing:
                return f"floe:{optimizing.lower()}"
            if self.kind is Kind.RETENTION:
                return "floe:retention"
            if "manifests-created" in self.summary:
                return "floe:manifests"
            return "floe:dangling-deletes" if self.kind is Kind.REPLACE else "floe:other"
        return f"{self.committer}:{self.operation}"

    def describe(self) -> str:
        """One line for a report."""
        return f"snapshot {self.snapshot_id} (sequence {self.sequence}, {self.operation}, {self.job})"


class History:
    """The snapshots of one table seen so far, by sequence number; thread-safe."""

    def __init__(self, catalog: Catalog, identifier: str) -> None:
        """Observe ``identifier`` in ``catalog``."""
        self.catalog = catalog
        self.identifier = identifier
        self._lock = threading.Lock()
        self._by_sequence: dict[int, Snap] = {}

    def poll(self) -> list[Snap]:
        """Load the table and record the snapshots not seen before; returns them."""
        table = self._load()
        new: list[Snap] = []
        with self._lock:
            for snapshot in table.metadata.snapshots:
                sequence = snapshot.sequence_number
                if sequence is None or sequence in self._by_sequence:
                    continue
                summary = snapshot.summary
                properties = dict(summary.additional_properties) if summary is not None else {}
                operation = str(summary.operation.value) if summary is not None else "unknown"
                snap = Snap(
                    snapshot.snapshot_id, sequence, snapshot.parent_snapshot_id, operation, properties
                )
                self._by_sequence[sequence] = snap
                new.append(snap)
        return sorted(new, key=lambda s: s.sequence)

    def get(self, sequence: int) -> Snap | None:
        """The snapshot of ``sequence``, if it was seen."""
        with self._lock:
            return self._by_sequence.get(sequence)

    def last_sequence(self) -> int:
        """The highest sequence number seen (0 before the first snapshot)."""
        with self._lock:
            return max(self._by_sequence, default=0)

    def all(self) -> list[Snap]:
        """Every snapshot seen, in order."""
        with self._lock:
            return [self._by_sequence[s] for s in sorted(self._by_sequence)]

    def live_ids(self) -> set[int]:
        """The ids of the snapshots the table's metadata has now (another engine may have expired
        some that were seen)."""
        return {s.snapshot_id for s in self._load().metadata.snapshots}

    def table(self) -> Table:
        """The table, freshly loaded."""
        return self._load()

    def _load(self) -> Table:
        return self.catalog.load_table(self.identifier)
