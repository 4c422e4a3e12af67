"""The oracle: what each snapshot of a table must hold, from what each writer committed.

A writer's snapshot applies its operation to the rows of the snapshot it was committed on; a
rewrite (floe's optimizing and maintenance, another engine's compaction) keeps the rows; floe's
data retention may remove ancient rows only. Which ancient rows a retention commit removed is
read from the snapshot; when it could not be read (expired first), the ancient rows of what follows
are known only as an upper bound until a later snapshot is read.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from .rows import Op, Row, Rows, is_ancient, split

DIFF_LINES = 6


@dataclass(frozen=True)
class Expected:
    """The rows a snapshot must have: exactly ``rows``, except that with ``ancient_exact`` false
    its ancient rows may be any part of ``rows``' ancient rows."""

    rows: Rows
    ancient_exact: bool = True

    def after(self, op: Op) -> Expected:
        """What a writer's snapshot committing ``op`` on this one must have."""
        return Expected(op.apply(self.rows), self.ancient_exact)

    def after_retention(self) -> Expected:
        """What a retention snapshot on this one may have."""
        return Expected(self.rows, ancient_exact=False)

    def differences(self, actual: Rows) -> list[str]:
        """Why ``actual`` is not what this allows: a few lines of missing and unexpected rows
        (empty when it is)."""
        if self.ancient_exact:
            missing, extra = self.rows - actual, actual - self.rows
        else:
            recent, ancient = split(self.rows)
            actual_recent, actual_ancient = split(actual)
            missing = recent - actual_recent
            extra = (actual_recent - recent) + (actual_ancient - ancient)
        return _diff_lines(missing, extra)


def _diff_lines(missing: Rows, extra: Rows) -> list[str]:
    if not missing and not extra:
        return []
    lines = [f"{sum(missing.values())} row(s) lost, {sum(extra.values())} row(s) duplicated or brought back"]
    shown = [("lost", row, n) for row, n in sorted(missing.items())] + [
        ("extra", row, n) for row, n in sorted(extra.items())
    ]
    for what, row, n in shown[:DIFF_LINES]:
        lines.append(f"  {what} x{n}: {_row_text(row)}")
    if len(shown) > DIFF_LINES:
        lines.append(f"  ... {len(shown) - DIFF_LINES} more")
    return lines


def _row_text(row: Row) -> str:
    key, cat, value, ts, note = row
    age = "ancient" if is_ancient(row) else "recent"
    return f"id={key} cat={cat} v={value} ts={ts.isoformat()} ({age}) note={note}"


class TableOracle:
    """One table's operations: which writer snapshot committed which, and what was not applied.

    ``current`` is the rows after the last applied operation: the driver chooses the next keys
    from it (data retention removes only ancient rows, which no writer targets)."""

    def __init__(self) -> None:
        """An empty table."""
        self._lock = threading.Lock()
        self._by_snapshot: dict[int, Op] = {}
        self.current: Rows = Counter()
        self.applied: list[Op] = []
        self.not_applied: list[Op] = []

    def record(self, op: Op, snapshot_id: int | None) -> None:
        """``op`` committed ``snapshot_id``, or was not applied (None)."""
        with self._lock:
            if snapshot_id is None:
                self.not_applied.append(op)
                return
            self._by_snapshot[snapshot_id] = op
            self.applied.append(op)
            self.current = op.apply(self.current)

    def op_for(self, snapshot_id: int) -> Op | None:
        """The operation that committed ``snapshot_id``, once the driver has recorded it."""
        with self._lock:
            return self._by_snapshot.get(snapshot_id)

    def recent_keys(self) -> list[int]:
        """The keys a writer may target, in order."""
        with self._lock:
            return sorted({row[0] for row in self.current if not is_ancient(row)})
