"""What a CDC table costs its readers and its storage, against the same rows compacted.

Each round Iceberg's Java reader (Spark, through floe's reference reader) reads every policy's
table and a CTAS copy of the rows in target-sized files with no deletes: a full read, and a read
of a key range of one percent of the keys (Iceberg prunes files by their key bounds). Reads
alternate over the tables, so all meet the same machine, and the fastest of ``reads`` counts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.table import Table

FULL_READ = "SELECT count(*), sum(hash(*)) FROM {table}"
RANGE_READ = "SELECT count(*), sum(hash(*)) FROM {table} WHERE order_id BETWEEN {low} AND {high}"
RANGE_SHARE = 0.01
"""The key range read: this share of the keys."""


class FrontierReads:
    """Reads of each policy's table (``tables``, policy -> Spark name) against ``compacted``."""

    def __init__(
        self, reader: Any, tables: Mapping[str, str], compacted: str, target_bytes: int, reads: int
    ) -> None:
        self.reader = reader
        self.tables = dict(tables)
        self.compacted = compacted
        self.target_bytes = target_bytes
        self.reads = reads

    def measure(self, number: int) -> dict[str, dict[str, Any]]:
        """Round ``number``'s reads: per policy its full and range read times, their ratios to the
        compacted copy's, and the rows read. Raises when a table reads other rows than the copy."""
        first = next(iter(self.tables.values()))
        self.reader.sql(
            f"CREATE OR REPLACE TABLE {self.compacted} USING iceberg "
            f"TBLPROPERTIES ('write.target-file-size-bytes' = '{self.target_bytes}') AS SELECT * FROM {first}"
        )
        [(keys,)] = self.reader.sql(f"SELECT max(order_id) FROM {self.compacted}")
        span = max(1, int(keys * RANGE_SHARE))
        low = random.Random(number).randrange(max(1, int(keys) - span))
        queries = {"full": FULL_READ, "range": RANGE_READ}
        names = [self.compacted, *self.tables.values()]
        fastest = {(name, q): float("inf") for name in names for q in queries}
        rows: dict[tuple[str, str], tuple[int, int]] = {}
        for _ in range(self.reads):
            for name in names:
                for q, text in queries.items():
                    started = time.monotonic()
                    count, digest = self.reader.sql(text.format(table=name, low=low, high=low + span))[0]
                    fastest[name, q] = min(fastest[name, q], time.monotonic() - started)
                    rows[name, q] = (int(count), int(digest or 0))
        for name in self.tables.values():
            for q in queries:
                if rows[name, q] != rows[self.compacted, q]:
                    raise AssertionError(
                        f"round {number}: {name} reads {rows[name, q]} in its {q} read, the compacted copy "
                        f"{rows[self.compacted, q]}"
                    )
        measured = {}
        for policy, name in self.tables.items():
            measured[policy] = {
                "full_s": fastest[name, "full"],
                "compacted_full_s": fastest[self.compacted, "full"],
                "range_s": fastest[name, "range"],
                "compacted_range_s": fastest[self.compacted, "range"],
                "read_amplification": fastest[name, "full"] / fastest[self.compacted, "full"],
                "range_read_amplification": fastest[name, "range"] / fastest[self.compacted, "range"],
                "rows": rows[name, "full"][0],
                "rows_hash": rows[name, "full"][1],
            }
        return measured


@dataclass(frozen=True)
class LiveFiles:
    """The live files of a table's current snapshot, path -> bytes, data and deletes apart."""

    data: Mapping[str, int]
    deletes: Mapping[str, int]

    def counts(self) -> dict[str, int]:
        """Live data and delete files and their bytes."""
        return {
            "data_files": len(self.data),
            "data_bytes": sum(self.data.values()),
            "delete_files": len(self.deletes),
            "delete_bytes": sum(self.deletes.values()),
        }


def live_set(table: Table) -> LiveFiles:
    """The live files of ``table``'s current snapshot."""
    from floe.tables.scan import scan_table

    files = scan_table(table).files
    # A deletion vector's path names its blob; its Puffin file is what storage holds.
    return LiveFiles(
        {f.path: f.size_bytes for f in files.data_files},
        {f.location: f.size_bytes for f in files.delete_files},
    )


def held_bytes(states: Sequence[LiveFiles]) -> int:
    """Bytes storage holds for snapshots with these live files: each file once, however many keep it."""
    held: dict[str, int] = {}
    for state in states:
        held.update(state.data)
        held.update(state.deletes)
    return sum(held.values())
