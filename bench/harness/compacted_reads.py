"""A table's full read against the same rows compacted: what its files and deletes cost a reader.

Iceberg's Java reader (Spark, through floe's reference reader) reads the table and a CTAS
copy of its rows in files of the target size with no deletes, with the same query.
"""

from __future__ import annotations

import time
from typing import Any

FULL_READ = "SELECT count(*), sum(hash(*)) FROM {table}"
READS = 5
"""Reads of each; the fastest counts, the one least disturbed by other work on a shared machine."""


def full_reads(reader: Any, name: str, compacted: str, target_bytes: int) -> dict[str, Any]:
    """The fastest of `READS` full reads of table ``name`` and of ``compacted``, its rows copied anew.

    The two reads alternate, so both meet the same machine: reads of under a second vary by a
    third from one to the next on a shared machine. Both must read the same rows.
    """
    reader.sql(
        f"CREATE OR REPLACE TABLE {compacted} USING iceberg "
        f"TBLPROPERTIES ('write.target-file-size-bytes' = '{target_bytes}') AS SELECT * FROM {name}"
    )
    fastest = {name: float("inf"), compacted: float("inf")}
    rows: dict[str, tuple[int, int]] = {}
    for _ in range(READS):
        for table in (name, compacted):
            started = time.monotonic()
            count, digest = reader.sql(FULL_READ.format(table=table))[0]
            fastest[table] = min(fastest[table], time.monotonic() - started)
            rows[table] = (int(count), int(digest))
    if rows[name] != rows[compacted]:
        raise AssertionError(f"the compacted copy reads {rows[compacted]}, the table {rows[name]}")
    return {
        "scan_s": fastest[name],
        "compacted_scan_s": fastest[compacted],
        "rows": rows[name][0],
        "rows_hash": rows[name][1],
    }
