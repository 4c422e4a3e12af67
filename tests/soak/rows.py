"""The soak tables' rows and the operations writers commit on them, as pure functions of the rows.

Every table has the columns ``(id bigint, cat string, v bigint, ts timestamp, note string)``: ``id``
is the key (the oracle keeps it unique, so equality deletes and MERGE match one row), ``cat`` is
derived from ``id`` (a partitioned table is partitioned by it, so no update moves a row between
partitions), ``note`` names the operation that last wrote the row (it shows in a diff). ``ts`` is
either recent or ancient: data retention runs with a cutoff between the two, so exactly the ancient
rows may go, and no writer ever targets an ancient row.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

Row = tuple[int, str, int, datetime, str]
Rows = Counter[Row]

COLUMNS = "id bigint NOT NULL, cat string NOT NULL, v bigint, ts timestamp, note string"
CATEGORIES = 3
RECENT_START = datetime(2025, 1, 1, tzinfo=UTC)
ANCIENT_START = datetime(2001, 1, 1, tzinfo=UTC)
# Retention deletes rows older than this many days: every ancient row, never a recent one.
RETENTION_DAYS = 3650


def category(key: int) -> str:
    """The partition value of ``key``."""
    return str(key % CATEGORIES)


def new_row(key: int, value: int, note: str, ancient: bool = False) -> Row:
    """A row for ``key``; ``ts`` is a function of the key within the recent or the ancient range."""
    start = ANCIENT_START if ancient else RECENT_START
    return (key, category(key), value, start + timedelta(seconds=key), note)


def is_ancient(row: tuple[Any, ...]) -> bool:
    """Whether data retention may delete ``row``."""
    ts: datetime = row[3]
    return ts < RECENT_START


def split(rows: Rows) -> tuple[Rows, Rows]:
    """``rows`` as (recent, ancient)."""
    recent: Rows = Counter()
    ancient: Rows = Counter()
    for row, count in rows.items():
        (ancient if is_ancient(row) else recent)[row] = count
    return recent, ancient


@dataclass(frozen=True)
class Op(ABC):
    """One writer's operation: what it commits, as a function of the rows it commits on."""

    writer: str
    """Which writer commits it (``spark-delete``, ``java-row-delta``, ...)."""
    number: int
    """Its place in the seed's sequence of operations."""

    @property
    def touched(self) -> frozenset[int]:
        """The keys whose rows it may change or remove."""
        return frozenset()

    @abstractmethod
    def apply(self, rows: Rows) -> Rows:
        """The rows after it, given the rows it commits on."""

    def describe(self) -> str:
        """One line for a report."""
        return f"#{self.number} {self.writer}"


@dataclass(frozen=True)
class Insert(Op):
    """New rows (new keys)."""

    rows: tuple[Row, ...]

    def apply(self, rows: Rows) -> Rows:
        """``rows`` and the new ones."""
        return rows + Counter(self.rows)

    def describe(self) -> str:
        """One line for a report."""
        return f"{super().describe()}: insert {len(self.rows)} rows"


@dataclass(frozen=True)
class Delete(Op):
    """Delete the rows of some keys."""

    keys: frozenset[int]

    @property
    def touched(self) -> frozenset[int]:
        """The deleted keys."""
        return self.keys

    def apply(self, rows: Rows) -> Rows:
        """``rows`` without those keys."""
        return Counter({row: n for row, n in rows.items() if row[0] not in self.keys})

    def describe(self) -> str:
        """One line for a report."""
        return f"{super().describe()}: delete keys {sorted(self.keys)}"


@dataclass(frozen=True)
class Update(Op):
    """``v = v + delta, note = note`` for the rows of some keys."""

    keys: frozenset[int]
    delta: int
    note: str

    @property
    def touched(self) -> frozenset[int]:
        """The updated keys."""
        return self.keys

    def apply(self, rows: Rows) -> Rows:
        """``rows`` with those keys' rows updated."""
        out: Rows = Counter()
        for row, n in rows.items():
            if row[0] in self.keys:
                row = (row[0], row[1], row[2] + self.delta, row[3], self.note)
            out[row] += n
        return out

    def describe(self) -> str:
        """One line for a report."""
        return f"{super().describe()}: update keys {sorted(self.keys)} v += {self.delta}"


@dataclass(frozen=True)
class Merge(Op):
    """MERGE by key: a matched row takes the source's ``v`` and ``note``; an unmatched source row
    is inserted."""

    source: tuple[Row, ...]

    @property
    def touched(self) -> frozenset[int]:
        """The source's keys."""
        return frozenset(row[0] for row in self.source)

    def apply(self, rows: Rows) -> Rows:
        """``rows`` merged with the source."""
        by_key = {row[0]: row for row in self.source}
        out: Rows = Counter()
        matched = set()
        for row, n in rows.items():
            source = by_key.get(row[0])
            if source is not None:
                matched.add(row[0])
                row = (row[0], row[1], source[2], row[3], source[4])
            out[row] += n
        out.update(row for row in self.source if row[0] not in matched)
        return out

    def describe(self) -> str:
        """One line for a report."""
        return f"{super().describe()}: merge {len(self.source)} rows by key"


@dataclass(frozen=True)
class Upsert(Op):
    """CDC upsert: every row of the new rows' keys is deleted (an equality delete) and the new rows
    inserted, in one commit."""

    rows: tuple[Row, ...]

    @property
    def touched(self) -> frozenset[int]:
        """The upserted keys."""
        return frozenset(row[0] for row in self.rows)

    def apply(self, rows: Rows) -> Rows:
        """``rows`` with the keys' rows replaced by the new ones."""
        keys = self.touched
        out = Counter({row: n for row, n in rows.items() if row[0] not in keys})
        return out + Counter(self.rows)

    def describe(self) -> str:
        """One line for a report."""
        return f"{super().describe()}: upsert keys {sorted(self.touched)}"


def keys_of(rows: Iterable[Row]) -> set[int]:
    """The keys of ``rows``."""
    return {row[0] for row in rows}
