"""Shared pieces of the benchmarks: the table schema, child-process steps and result tables.

Every measurement runs in a fresh child process (the same script, started with ``--step``)
so that one engine's warm JIT, caches or heap never help or hurt another; the child
writes its result as JSON to a file the parent reads back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
)

MiB = 1024 * 1024
CATALOG_NAME = "bench"
NAMESPACE = "bench"

EVENTS_SCHEMA = Schema(
    NestedField(1, "event_id", LongType(), required=True),
    NestedField(2, "ts", TimestampType(), required=True),
    NestedField(3, "user_id", LongType(), required=False),
    NestedField(4, "session_id", StringType(), required=False),
    NestedField(5, "event_type", StringType(), required=False),
    NestedField(6, "country", StringType(), required=False),
    NestedField(7, "url", StringType(), required=False),
    NestedField(8, "referrer", StringType(), required=False),
    NestedField(9, "device", StringType(), required=False),
    NestedField(10, "price", DecimalType(12, 2), required=False),
    NestedField(11, "quantity", IntegerType(), required=False),
    NestedField(12, "latency_ms", DoubleType(), required=False),
    NestedField(13, "is_mobile", BooleanType(), required=False),
)
"""A clickstream-like table: ids, a timestamp, low- and high-cardinality strings, a decimal,
numbers and a flag, most of them nullable."""

EVENTS_SPEC = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day")
)
"""Partitioned by day of ``ts``."""

TABLE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}
"""Format v2, zstd Parquet (floe, pyiceberg and Iceberg Java all honour it) and merge-on-read
row-level operations, so Spark's ``DELETE`` writes position deletes."""


class StepFailed(RuntimeError):
    """A benchmark child process exited with an error."""


def run_step(script: Path, args: Sequence[str], work_dir: Path, label: str) -> dict[str, Any]:
    """Run ``script --step ...`` in a fresh interpreter and return the JSON it wrote.

    The child's output goes to ``<work_dir>/logs/<label>.log``; on failure its tail is
    put in the raised ``StepFailed``.
    """
    logs = work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{label}.log"
    result_path = logs / f"{label}.json"
    result_path.unlink(missing_ok=True)
    command = [sys.executable, str(script), *args, "--result", str(result_path)]
    started = time.monotonic()
    with log_path.open("w") as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if code != 0 or not result_path.is_file():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise StepFailed(f"step {label} exited with {code} after {time.monotonic() - started:.0f}s:\n{tail}")
    result: dict[str, Any] = json.loads(result_path.read_text())
    return result


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Write a child's result for ``run_step`` to read."""
    path.write_text(json.dumps(result, indent=2, sort_keys=True))


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table, columns padded so it also reads as plain text."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |"

    separator = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
    return "\n".join([line(cells[0]), separator, *(line(row) for row in cells[1:])])


def load_average() -> str:
    """The 1/5/15-minute load averages, to show how busy the shared machine was."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
