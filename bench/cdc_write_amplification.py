"""CDC write amplification: floe before and after it converted equality deletes, side by side.

A table whose segments hold over 20x an "hour" of upserts gets rounds of CDC upserts (the
old rows' equality deletes plus their new versions, in one snapshot, keys drawn uniformly
from all keys), and floe evaluates and optimizes it after every round with its own triggers,
as ``floe run`` does when a table's snapshot changes. The same rounds (same seed) run twice,
each in a fresh interpreter: with floe at ``--before`` (a git revision: by default the one
before conversion landed) and with this checkout's floe. After every round both sides record
the bytes optimizing wrote per byte ingested since the start (write amplification), the live
delete files, and the time Iceberg's Java reader takes to read the whole table against the
same rows fully compacted (a CTAS copy, no deletes, read with the same query). Both sides
must read the same rows after every round. Output: a markdown section and a PNG per metric
in ``bench/plots/``.

One "hour" is ``--rounds-per-hour`` rounds. Rounds start every ``--round-period-s`` of wall
time, and the minor interval is compressed to ``--minor-interval-rounds`` of them (by default
an hour, Amoro's default), so minor optimizing fires by its file-count trigger or after that
many rounds, whatever a round's own work takes.

Run: ``nice -n 10 .venv/bin/python bench/cdc_write_amplification.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from harness import MiB
from harness.cli import BENCH_DIR, benchmark_parser
from harness.machine import load_average
from harness.report import command_line, emit, markdown_table
from harness.steps import run_requested_step, run_step
from harness.warehouse import live_files, opened, sql_catalog_properties
from matplotlib.figure import Figure
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parent.parent
BEFORE = "05bdee5"
"""The last revision of main whose minor optimizing rewrote segments with equality deletes."""
SIDES = ("before", "after")
TABLE = "db.orders"
SCHEMA = Schema(
    NestedField(1, "order_id", LongType(), required=True),
    NestedField(2, "customer", StringType(), required=False),
    NestedField(3, "status", StringType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
    NestedField(5, "updated_at", TimestampType(), required=False),
    NestedField(6, "note", StringType(), required=False),
    identifier_field_ids=[1],
)
PROPERTIES = {"format-version": "2", "write.parquet.compression-codec": "zstd"}
STATUSES = ["new", "paid", "packed", "shipped", "delivered", "returned"]
FULL_READ = "SELECT count(*), sum(hash(*)) FROM {table}"
TARGETS = {"write_amplification": 3.0, "scan_ratio": 1.5}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's flags, each checked, with the minor interval defaulting to an hour."""
    parser = benchmark_parser(__doc__ or "", "cdc", seed="row and key generator seed", steps=["side"])
    parser.add_argument("--before", default=BEFORE, help="git revision of floe before the change")
    parser.add_argument("--base-rows", type=int, default=2_400_000, help="rows before the first upsert")
    parser.add_argument(
        "--base-files",
        type=int,
        default=8,
        help="appends of the base rows, each one file (a segment by default)",
    )
    parser.add_argument("--upserts", type=int, default=24_000, help="rows upserted per round")
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--rounds-per-hour", type=int, default=4)
    parser.add_argument("--target-mib", type=float, default=8.0, help="target file size, MiB")
    parser.add_argument(
        "--round-period-s",
        type=float,
        default=15.0,
        help="wall time from one round's upserts to the next's (longer than a round's work)",
    )
    parser.add_argument(
        "--minor-interval-rounds",
        type=int,
        help="minor interval, in rounds (default: an hour); 0: whenever a table has more than one "
        "fragment or equality-delete file",
    )
    parser.add_argument(
        "--duplicate-ratio",
        type=float,
        default=0.1,
        help="self-optimizing.major.trigger.duplicate-ratio (Amoro's default: 0.1)",
    )
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--report-only", action="store_true", help="report the last run left in --dir")
    args = parser.parse_args(argv)
    if args.minor_interval_rounds is None:
        args.minor_interval_rounds = args.rounds_per_hour
    if args.minor_interval_rounds < 0:
        parser.error(f"--minor-interval-rounds must be 0 or more, not {args.minor_interval_rounds}")
    if args.round_period_s <= 0:
        parser.error(f"--round-period-s must be positive, not {args.round_period_s:g}")
    hourly = args.upserts * args.rounds_per_hour
    # A side's own process gets only the side's flags (not --rounds-per-hour): the parent checked.
    if not args.step and args.base_rows < 20 * hourly:
        parser.error(f"--base-rows must be at least 20x an hour of upserts ({20 * hourly})")
    if args.report_only:
        missing = [side for side in SIDES if not (args.dir / "logs" / f"{side}.json").is_file()]
        if missing:
            parser.error(f"--report-only: no results of {' and '.join(missing)} in {args.dir / 'logs'}")
    return args


def main() -> None:
    args = parse_args()
    if args.step:
        run_requested_step(args, {"side": run_side})
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        results = {side: json.loads((args.dir / "logs" / f"{side}.json").read_text()) for side in SIDES}
        run = _recorded_run(args)
    else:
        results = {side: _run_side(args, side) for side in SIDES}
        run = _record_run(args)
    _check_same_rows(results)
    _plot(results)
    emit(_section(args, results, run), args.markdown)


_RUN_RECORD = "run.json"


def _record_run(args: argparse.Namespace) -> dict[str, str]:
    """Keep the run's command, settings and load beside its results, for `--report-only`."""
    settings = {k: v for k, v in vars(args).items() if k in (*_SIDE_FLAGS, "before", "rounds_per_hour")}
    run = {"command": command_line(), "load_average": load_average(), "settings": settings}
    (args.dir / "logs" / _RUN_RECORD).write_text(json.dumps(run, indent=1))
    return run


def _recorded_run(args: argparse.Namespace) -> dict[str, Any]:
    """The recorded run's command and load; its settings replace `args`' for the report."""
    path = args.dir / "logs" / _RUN_RECORD
    if not path.is_file():
        raise SystemExit(f"--report-only: {path} is missing (the run did not finish)")
    run: dict[str, Any] = json.loads(path.read_text())
    for key, value in run["settings"].items():
        setattr(args, key, value)
    return run


def _run_side(args: argparse.Namespace, side: str) -> dict[str, Any]:
    source = _revision_source(args.before, args.dir) if side == "before" else REPO
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k in _SIDE_FLAGS]
    flags += [f"--dir={args.dir / side}", f"--side={side}", "--step=side"]
    with _python_path(source):
        return run_step(SCRIPT, flags, args.dir, side)


_SIDE_FLAGS = (
    "seed",
    "base_rows",
    "base_files",
    "upserts",
    "rounds",
    "target_mib",
    "round_period_s",
    "minor_interval_rounds",
    "duplicate_ratio",
)


def _revision_source(revision: str, work_dir: Path) -> Path:
    """floe's packages at `revision`, extracted once from git."""
    commit = subprocess.check_output(["git", "-C", str(REPO), "rev-parse", revision], text=True).strip()
    target = work_dir / f"src-{commit[:12]}"
    if not (target / "operator").is_dir():
        archive = work_dir / f"{commit[:12]}.tar"
        subprocess.run(
            ["git", "-C", str(REPO), "archive", "-o", str(archive), commit, "operator", "optimizer_image"],
            check=True,
        )
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        archive.unlink()
    return target


@contextlib.contextmanager
def _python_path(source: Path) -> Iterator[None]:
    """Children import floe from `source` (ahead of the checkout's editable install)."""
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(source / "operator"), str(source / "optimizer_image"), str(BENCH_DIR)]
    )
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = previous


# -- one side, in a child process -----------------------------------------------------------


def run_side(args: argparse.Namespace) -> dict[str, Any]:
    """Build the table, then upsert and optimize round after round, measuring after each."""
    import floe
    from floe.local.optimize import optimize_once
    from floe.local.reference_jars import reference_jars
    from floe.local.reference_reader import ReferenceReader, qualified_name
    from floe.planning.config import OptimizingConfig
    from floe.tables.writer import conform
    from floe_optimizer.spark_session import get_spark

    target = int(args.target_mib * MiB)
    config = OptimizingConfig(
        target_size=target,
        max_task_size_bytes=target,
        minor_trigger_interval_s=_minor_interval_s(args.minor_interval_rounds, args.round_period_s),
        major_duplicate_ratio=args.duplicate_ratio,
    )
    args.dir.mkdir(parents=True, exist_ok=True)
    properties = sql_catalog_properties(args.dir / "catalog.db", args.dir / "warehouse")
    spark = get_spark(master="local[2]", app_name="floe-bench-cdc", extra_jars=reference_jars())
    reader = ReferenceReader(spark)
    rounds: list[dict[str, Any]] = []
    with opened(SqlCatalog("cdc", **properties)) as catalog:
        catalog.create_namespace("db")
        table = catalog.create_table(TABLE, SCHEMA, properties=PROPERTIES)
        reader.register_sql_catalog("cdc", args.dir / "catalog.db", properties["warehouse"])
        orders = _Orders(args.seed)
        per_file = args.base_rows // args.base_files
        for _ in range(args.base_files):
            _append_as_spark_writes(reader, table, conform(table, orders.new(per_file)), args.dir)
        # The rounds start from the table as floe keeps it: what it writes first is not counted.
        while optimize_once(table, TABLE, config, spark=lambda: spark).commit is not None:
            pass
        table.refresh()
        base = live_files(table)
        first_round = time.monotonic()
        for number in range(1, args.rounds + 1):
            # Rounds keep a fixed pace, so the minor interval (in wall time) spans whole rounds.
            late_s = time.monotonic() - (first_round + (number - 1) * args.round_period_s)
            if late_s < 0:
                time.sleep(-late_s)
            ingested = _upsert(table, orders.upsert(args.upserts))
            started = time.monotonic()
            result = optimize_once(table, TABLE, config, spark=lambda: spark)
            optimize_s = time.monotonic() - started
            written = _added_bytes(table, result.commit.snapshot_id) if result.commit else 0
            kind = result.plan.optimizing_type.label if result.commit and result.plan.optimizing_type else "-"
            table.refresh()
            rounds.append(
                {
                    "round": number,
                    "ingested_bytes": ingested,
                    "written_bytes": written,
                    "optimizing": kind,
                    "optimize_s": optimize_s,
                    "late_s": max(late_s, 0.0),
                    **live_files(table),
                    **_full_reads(
                        reader,
                        qualified_name("cdc", TABLE),
                        qualified_name("cdc", f"{TABLE}_compacted"),
                        target,
                    ),
                }
            )
            print(rounds[-1], flush=True)
    return {"floe": str(Path(floe.__file__).parent), "base": base, "rounds": rounds}


def _minor_interval_s(rounds: int, period_s: float) -> float:
    """The minor interval that fires every `rounds` rounds of `period_s` (0: no interval).

    Half a period short of the rounds, so the jitter of a round's start cannot move it by one.
    """
    return (rounds - 0.5) * period_s if rounds > 0 else 0.0


class _Orders:
    """Deterministic order rows: new orders, and new versions of random existing ones."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.next_id = 0
        self.version = 0

    def new(self, count: int) -> pa.Table:
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        return self._rows(ids)

    def upsert(self, count: int) -> pa.Table:
        return self._rows(sorted(self.rng.sample(range(self.next_id), count)))

    def _rows(self, ids: list[int]) -> pa.Table:
        self.version += 1
        rng = self.rng
        stamp = 1_700_000_000_000_000 + self.version * 60_000_000
        return pa.table(
            {
                "order_id": pa.array(ids, pa.int64()),
                "customer": pa.array([f"c{rng.randrange(200_000):06d}" for _ in ids]),
                "status": pa.array([STATUSES[rng.randrange(len(STATUSES))] for _ in ids]),
                "amount": pa.array([round(rng.random() * 500, 2) for _ in ids], pa.float64()),
                "updated_at": pa.array([stamp + i for i in range(len(ids))], pa.timestamp("us")),
                # A random token per row, as CDC rows carry (a trace or request id): it keeps the
                # rows from compressing into nothing.
                "note": pa.array([f"{rng.getrandbits(96):024x}" for _ in ids]),
            }
        )


def _append_as_spark_writes(reader: Any, table: Table, rows: pa.Table, scratch: Path) -> None:
    """Append `rows` as one data file written by Iceberg's Java writer.

    CDC tables are written by Flink, Spark or Iceberg Java, whose Parquet layout (parquet-mr's
    encodings) is also the compacted copy's: a base written with pyarrow's defaults (dictionary
    pages on every column) reads 2-3x slower in Spark, and the scan ratio would measure that
    rather than the deletes.
    """
    from floe.local.reference_reader import qualified_name

    staged = scratch / "base-rows.parquet"
    pq.write_table(rows, staged)
    name = qualified_name("cdc", TABLE)
    reader.spark.read.parquet(str(staged)).coalesce(1).writeTo(name).append()
    staged.unlink()
    table.refresh()


def _upsert(table: Table, rows: pa.Table) -> int:
    """Commit `rows` as a CDC upsert (equality deletes on the key plus the rows); its bytes."""
    from floe.commit.row_delta import commit_row_delta
    from floe.tables.writer import write_data_files, write_equality_deletes_by_partition

    deletes = write_equality_deletes_by_partition(table, rows.select(["order_id"]), ["order_id"])
    data = write_data_files(table, rows)
    commit_row_delta(table, data_files=data, delete_files=deletes)
    table.refresh()
    return sum(f.file_size_in_bytes for f in (*data, *deletes))


def _added_bytes(table: Table, snapshot_id: int) -> int:
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    summary = snapshot.summary if snapshot is not None else None
    return int(summary["added-files-size"] or 0) if summary is not None else 0


def _full_reads(reader: Any, name: str, compacted: str, target: int) -> dict[str, Any]:
    """The fastest of five full reads of the table and of a compacted copy of its rows (files of
    the target size, no deletes).

    The two reads alternate, so both meet the same machine: reads of under a second vary by a
    third from one to the next on this shared machine.
    """
    reader.sql(
        f"CREATE OR REPLACE TABLE {compacted} USING iceberg "
        f"TBLPROPERTIES ('write.target-file-size-bytes' = '{target}') AS SELECT * FROM {name}"
    )
    fastest = {name: float("inf"), compacted: float("inf")}
    rows: dict[str, tuple[int, int]] = {}
    for _ in range(_READS):
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


_READS = 5


# -- the report -----------------------------------------------------------------------------


def _check_same_rows(results: dict[str, dict[str, Any]]) -> None:
    before, after = (results[side]["rounds"] for side in SIDES)
    for b, a in zip(before, after, strict=True):
        if (b["rows"], b["rows_hash"]) != (a["rows"], a["rows_hash"]):
            raise AssertionError(f"round {b['round']}: the two sides read different rows")


def _series(rounds: list[dict[str, Any]]) -> dict[str, list[float]]:
    ingested = written = 0
    amplification, ratio = [], []
    for r in rounds:
        ingested += r["ingested_bytes"]
        written += r["written_bytes"]
        amplification.append(written / ingested)
        ratio.append(r["scan_s"] / r["compacted_scan_s"])
    return {
        "write_amplification": amplification,
        "eq_delete_files": [r["eq_delete_files"] for r in rounds],
        "scan_ratio": ratio,
        "written_mib": [r["written_bytes"] / MiB for r in rounds],
    }


PLOTS = {
    "write_amplification": "bytes written by optimizing / bytes ingested (cumulative)",
    "eq_delete_files": "live equality-delete files",
    "scan_ratio": "full read / full read of the compacted rows",
}


def _plot(results: dict[str, dict[str, Any]]) -> None:
    plots = BENCH_DIR / "plots"
    plots.mkdir(exist_ok=True)
    for metric, title in PLOTS.items():
        figure = Figure(figsize=(7, 3.5))
        axes = figure.subplots()
        for side in SIDES:
            values = _series(results[side]["rounds"])[metric]
            axes.plot(range(1, len(values) + 1), values, marker=".", label=f"floe {side}")
        if metric in TARGETS:
            axes.axhline(TARGETS[metric], color="grey", linestyle="--", label="target")
        axes.set_xlabel("upsert round")
        axes.set_title(title)
        axes.legend()
        figure.tight_layout()
        figure.savefig(plots / f"cdc_{metric}.png", dpi=100)


def _section(args: argparse.Namespace, results: dict[str, dict[str, Any]], run: dict[str, Any]) -> str:
    series = {side: _series(results[side]["rounds"]) for side in SIDES}
    base = results["after"]["base"]
    rounds = {side: results[side]["rounds"] for side in SIDES}
    samples = [
        [
            r["round"],
            *(f"{series[side]['write_amplification'][i]:.2f}" for side in SIDES),
            *(rounds[side][i]["optimizing"] for side in SIDES),
            *(f"{series[side]['written_mib'][i]:.1f}" for side in SIDES),
            *(rounds[side][i]["eq_delete_files"] for side in SIDES),
            rounds["after"][i]["pos_delete_files"],
            *(f"{series[side]['scan_ratio'][i]:.2f}" for side in SIDES),
        ]
        for i, r in enumerate(rounds["after"])
    ]
    headers = [
        "round",
        "WA before",
        "WA after",
        "type before",
        "type after",
        "written MiB before",
        "written MiB after",
        "eq files before",
        "eq files after",
        "pos files after",
        "scan ratio before",
        "scan ratio after",
    ]
    summary = ["", "WA at the end", "WA worst (target <= 3)", "MiB written, by type"]
    summary += ["scan ratio worst (target <= 1.5)", "scan ratio mean"]
    ingested = sum(r["ingested_bytes"] for r in rounds["after"]) / MiB
    hours = args.base_rows / (args.upserts * args.rounds_per_hour)
    return "\n".join(
        [
            "## 5. CDC write amplification",
            "",
            f"Command: `nice -n 10 {run['command']}`. Load average at the end: {run['load_average']}.",
            "",
            f"Base: {base['data_files']} data files, {base['data_bytes'] / MiB:.0f} MiB, "
            f"{base['records']:,} rows; {args.rounds} rounds of {args.upserts:,} upserts "
            f"({args.rounds_per_hour} rounds = 1 hour: the base is {hours:.0f}x an hour of upserts); "
            f"{ingested:.1f} MiB ingested in all, a round every {args.round_period_s:g} s "
            f"({_late_rounds(rounds)}). Base rows written by Iceberg's Java writer (Spark), as the "
            f"compacted copy's. Target file size {args.target_mib:g} MiB, minor interval "
            f"{_interval_words(args.minor_interval_rounds)}, duplicate ratio {args.duplicate_ratio:g}. "
            f"Before: floe at `{args.before}`; after: this checkout.",
            "",
            markdown_table(summary, [_summary_row(side, rounds[side], series[side]) for side in SIDES]),
            "",
            markdown_table(headers, samples),
            "",
            "WA = bytes written by optimizing / bytes ingested (data + equality-delete files), cumulative. "
            "scan ratio = the fastest of five full reads (`count(*)`, `sum(hash(*))`) of the table by "
            "Iceberg's Java reader / the same of a CTAS copy of its rows in files of the target size. Both "
            "sides read the same rows after every round. Plots: `bench/plots/cdc_*.png`.",
        ]
    )


def _late_rounds(rounds: dict[str, list[dict[str, Any]]]) -> str:
    """How many rounds of each side started late, their previous round's work outlasting the period."""
    words = []
    for side in SIDES:
        late = [r["late_s"] for r in rounds[side] if r.get("late_s", 0.0) > 0.5]
        count = f"{len(late)} rounds late, at most {max(late):.1f} s" if late else "no round late"
        words.append(f"{side}: {count}")
    return "; ".join(words)


def _interval_words(rounds: int) -> str:
    if rounds == 0:
        return "0 (whenever there is more than one fragment or equality-delete file)"
    return f"{rounds} round{'s' if rounds > 1 else ''}"


def _summary_row(side: str, rounds: list[dict[str, Any]], series: dict[str, list[float]]) -> list[str]:
    by_type: dict[str, float] = {}
    for r in rounds:
        if r["written_bytes"]:
            by_type[r["optimizing"]] = by_type.get(r["optimizing"], 0.0) + r["written_bytes"] / MiB
    worst_wa, worst_scan = max(series["write_amplification"]), max(series["scan_ratio"])
    return [
        f"floe {side}",
        f"{series['write_amplification'][-1]:.2f}",
        f"{worst_wa:.2f} ({'met' if worst_wa <= TARGETS['write_amplification'] else 'missed'})",
        ", ".join(f"{kind} {mib:.1f}" for kind, mib in sorted(by_type.items())) or "-",
        f"{worst_scan:.2f} ({'met' if worst_scan <= TARGETS['scan_ratio'] else 'missed'})",
        f"{sum(series['scan_ratio']) / len(series['scan_ratio']):.2f}",
    ]


if __name__ == "__main__":
    main()
