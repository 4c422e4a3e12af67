"""The autoscaling benchmarks' bursty pattern: tables that each get a burst of small files every period.

Each round, every table gets ``--burst-files`` files at once (its minor trigger, so floe
plans a minor optimizing), then nothing until the next round. Two groups run the same
rounds one after the other, each on its own tables: ``static``, ``--max-executors``
executors all the time, and ``autoscaled``, from zero up to the same maximum. What differs
between the in-process and the kind benchmark is where floe runs, not the pattern.
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from floe.tables.writer import conform
from harness.cli import benchmark_parser

MODES = ("static", "autoscaled")
PROCESS_ID_KEY = "floe.process-id"
"""The snapshot summary property naming the optimizing process that committed it."""
PLANNED = re.compile(r"OptimizingStarted: \w+ optimizing (\S+): \d+ tasks")
"""The operator's log line, or Event message, of a process it planned."""
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "payload", StringType()))


@dataclass(frozen=True)
class Burst:
    """One table's burst of a measured round: when its last file landed, and floe's commit of it."""

    table: str
    triggered_s: float
    committed_s: float
    process_id: str

    @property
    def latency_s(self) -> float:
        """Trigger to commit."""
        return self.committed_s - self.triggered_s


def pattern_parser(
    doc: str, work_dir: str, *, tables: int, rounds: int, jitter: float
) -> argparse.ArgumentParser:
    """The shared parser with the pattern's and the groups' flags; each script adds its own."""
    parser = benchmark_parser(doc, work_dir, seed="the bursts' offsets in their rounds")
    parser.add_argument("--tables", type=int, default=tables)
    parser.add_argument(
        "--burst-files", type=int, default=4, help="files per table per burst (its minor trigger)"
    )
    parser.add_argument("--rows", type=int, default=20_000, help="rows per file")
    parser.add_argument("--rounds", type=int, default=rounds, help="measured rounds")
    parser.add_argument(
        "--warmup-rounds", type=int, default=1, help="rounds before the measured ones (not counted)"
    )
    parser.add_argument("--period", type=float, default=120.0, help="seconds from one burst to the next")
    parser.add_argument(
        "--jitter",
        type=float,
        default=jitter,
        help="each table's burst lands at a random offset of its own up to this: the table refresh",
    )
    parser.add_argument(
        "--max-executors",
        type=int,
        default=2,
        help="executors of the static group, and the autoscaled group's maximum",
    )
    parser.add_argument("--cores", type=int, default=1, help="cores (task threads) per executor")
    parser.add_argument(
        "--scale-down-delay", type=float, default=30.0, help="the autoscaled group's scaleDownDelay"
    )
    parser.add_argument(
        "--round-timeout",
        type=float,
        default=600.0,
        help="a round's bursts must all be committed within this",
    )
    return parser


def check_jitter(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """`args`, once its ``--jitter`` is known to fit in a round: from 0 up to ``--period``."""
    if not 0 <= args.jitter <= args.period:
        parser.error(f"--jitter must be from 0 up to --period ({args.period:g} s), not {args.jitter:g}")
    return args


def group_spec(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """The OptimizerGroup spec of `mode`: `--max-executors` executors all the time (static), or
    from zero up to them (autoscaled)."""
    spec: dict[str, Any] = {"executorCores": args.cores, "executorMemory": "1Gi"}
    if mode == "static":
        spec["executors"] = args.max_executors
    else:
        spec["autoscaling"] = {
            "minExecutors": 0,
            "maxExecutors": args.max_executors,
            "scaleDownDelay": f"{args.scale_down_delay:g}s",
        }
    return spec


def burst(table: Table, files: int, rows: int, round_index: int) -> None:
    """Append `files` files of `rows` rows to `table`, one commit each."""
    for index in range(files):
        first = (round_index * files + index) * rows
        batch = pa.table(
            {
                "id": pa.array(range(first, first + rows), pa.int64()),
                "payload": pa.array([f"row-{i}" for i in range(first, first + rows)], pa.string()),
            }
        )
        table.append(conform(table, batch))


def floe_commit_after(table: Table, after_ms: int) -> tuple[float, str] | None:
    """floe's first snapshot of `table` after `after_ms`: its time and process id."""
    table.refresh()
    for snapshot in table.snapshots():
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if PROCESS_ID_KEY in summary and snapshot.timestamp_ms > after_ms:
            return snapshot.timestamp_ms / 1000, summary[PROCESS_ID_KEY]
    return None


def run_rounds(
    mode: str, tables: list[Table], args: argparse.Namespace, start_measuring: Callable[[], None]
) -> tuple[list[Burst], float]:
    """Every round's bursts, each waited for until floe committed every table; the bursts of
    the measured rounds and their wall time. `start_measuring` is called as the first measured
    round starts: Spark's Python workers and the JVM are warm from there on, for both groups
    alike.

    Each table's burst lands at a random offset of its own (seeded: the same for both groups) in
    the round's first `--jitter` seconds. With a period that is a multiple of the table refresh,
    bursts would otherwise all land at one phase of the refresh, and each group's latencies would
    carry the one wait for the refresh that its start happened to give it; one offset for all the
    tables of a round would still give each group only one phase a round (tables that committed
    together are refreshed together)."""
    bursts: list[Burst] = []
    offsets = random.Random(args.seed)
    started = time.monotonic()
    for round_index in range(args.warmup_rounds + args.rounds):
        round_start = time.monotonic()
        measured = round_index >= args.warmup_rounds
        if round_index == args.warmup_rounds:
            start_measuring()
            started = round_start
        landing = sorted((offsets.uniform(0.0, args.jitter), index) for index in range(len(tables)))
        triggered: dict[str, float] = {}
        for offset, index in landing:
            time.sleep(max(0.0, round_start + offset - time.monotonic()))
            burst(tables[index], args.burst_files, args.rows, round_index)
            triggered[tables[index].name()[-1]] = time.time()
        pending = dict(zip([t.name()[-1] for t in tables], tables, strict=True))
        deadline = time.monotonic() + args.round_timeout
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}, round {round_index}: not committed in time: {sorted(pending)}")
            for name, table in list(pending.items()):
                committed = floe_commit_after(table, int(triggered[name] * 1000))
                if committed is not None:
                    if measured:
                        bursts.append(Burst(name, triggered[name], *committed))
                    del pending[name]
            time.sleep(0.5)
        took = time.monotonic() - round_start
        logging.info("%s: round %d committed in %.1f s", mode, round_index, took)
        time.sleep(max(0.0, round_start + args.period - time.monotonic()))
    return bursts, time.monotonic() - started
