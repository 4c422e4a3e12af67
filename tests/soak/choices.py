"""The seed's choices: which table each operation goes to, which writer commits it, on which keys.

Each table's writers take turns in rounds (each writer once a round, in an order the seed draws),
once the table has a few rows to work on.

The operations of a seed are a fixed sequence (the same seed gives the same operations in the same
order, whatever the timing), except that the keys an operation targets come from the rows the
writers have committed so far, which depends on which commits lost to a conflict.
"""

from __future__ import annotations

import random

from .oracle import TableOracle
from .rows import Delete, Insert, Merge, Op, Row, Update, Upsert, new_row
from .writers import SoakTable

INSERTING = ("spark-insert", "pyiceberg-append", "java-row-delta", "floe-row-delta")
FEW_ROWS = 8


class Choices:
    """The seed's sequence of operations over its tables."""

    def __init__(self, seed: int, tables: list[SoakTable], writers: dict[str, list[str]]) -> None:
        """``writers``: per table identifier, the writers that can write it."""
        self.seed = seed
        self.tables = tables
        self.writers = writers
        self._rng = random.Random(seed)
        self._next_key = dict.fromkeys((t.identifier for t in tables), 0)
        self._rounds: dict[str, list[str]] = {t.identifier: [] for t in tables}
        self._number = 0

    def next(self, oracles: dict[str, TableOracle]) -> tuple[SoakTable, Op]:
        """The next operation and its table."""
        rng = self._rng
        self._number += 1
        table = rng.choice(self.tables)
        keys = oracles[table.identifier].recent_keys()
        names = self.writers[table.identifier]
        if len(keys) < FEW_ROWS:
            writer = rng.choice([n for n in names if n in INSERTING])
        else:
            # Every writer once a round, in an order of the seed's: a short run has them all.
            round_ = self._rounds[table.identifier]
            if not round_:
                round_ += rng.sample(names, len(names))
            writer = round_.pop()
        return table, self._op(table, writer, keys)

    def _op(self, table: SoakTable, writer: str, keys: list[int]) -> Op:
        rng = self._rng
        number = self._number
        note = f"{number}:{writer}"
        if writer in ("spark-insert", "pyiceberg-append"):
            with_ancient = rng.random() < 0.25
            rows = tuple(
                new_row(
                    self._key(table), rng.randrange(10**6), note, ancient=with_ancient and rng.random() < 0.4
                )
                for _ in range(rng.randint(3, 30))
            )
            return Insert(writer, number, rows)
        if writer == "spark-delete":
            return Delete(writer, number, frozenset(rng.sample(keys, rng.randint(1, 4))))
        if writer == "spark-update":
            chosen = frozenset(rng.sample(keys, rng.randint(1, 6)))
            return Update(writer, number, chosen, rng.randint(1, 100), note)
        source = self._touching(table, keys, note)
        return Merge(writer, number, source) if writer == "spark-merge" else Upsert(writer, number, source)

    def _touching(self, table: SoakTable, keys: list[int], note: str) -> tuple[Row, ...]:
        """Rows for some existing keys and some new ones (at least one row)."""
        rng = self._rng
        old = rng.sample(keys, min(len(keys), rng.randint(0, 5)))
        new = [self._key(table) for _ in range(rng.randint(0 if old else 1, 4))]
        return tuple(new_row(key, rng.randrange(10**6), note) for key in [*old, *new])

    def _key(self, table: SoakTable) -> int:
        key = self._next_key[table.identifier]
        self._next_key[table.identifier] = key + 1
        return key
