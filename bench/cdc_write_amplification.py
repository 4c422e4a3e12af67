"""CDC write amplification: floe before and after it converted equality deletes, side by side.

A table holding over 20x an "hour" (``--rounds-per-hour`` rounds) of upserts gets a round of CDC
upserts (`harness.cdc_orders`) every ``--round-period-s``, and floe optimizes it after each with
its own triggers, as ``floe run`` does, the minor interval compressed to ``--minor-interval-rounds``
(an hour by default, Amoro's). The same rounds run with floe at ``--before`` and with this
checkout's, each in a fresh interpreter. After every round both record bytes written per byte
ingested (write amplification), live delete files, and a full read against one of the same rows
compacted (`harness.compacted_reads`); both must read the same rows.

Run: ``nice -n 10 .venv/bin/python bench/cdc_write_amplification.py``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import MiB
from harness.cdc_orders import TABLE, create_table, upsert
from harness.cli import benchmark_parser
from harness.compacted_reads import full_reads
from harness.conditions import load_conditions, save_conditions, under
from harness.plots import FLOE_STYLE, REFERENCE_STYLE, Line, Panel, add_plots_argument, save_plot, shown_path
from harness.results import BenchResult, Figures, Target, new_result, report_result
from harness.revisions import run_before_and_after
from harness.steps import run_requested_step
from harness.warehouse import live_files, opened, sql_catalog_properties
from pyiceberg.catalog.sql import SqlCatalog

SCRIPT = Path(__file__).resolve()
BEFORE = "05bdee5"
"""The last revision of main whose minor optimizing rewrote segments with equality deletes."""
SIDES = ("before", "after")
TARGETS = {
    "write_amplification": ("write amplification, worst round", 3.0, ""),
    "scan_ratio": ("full read / compacted rows' read, worst round", 1.5, "x"),
}
"""floe's (the after side's) targets, by metric: what, at most what, unit."""
SIDE_FLAGS = ["seed", "base_rows", "base_files", "upserts", "rounds", "target_mib"]
SIDE_FLAGS += ["round_period_s", "minor_interval_rounds", "duplicate_ratio"]
"""The flags a side's own process gets."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's flags, each checked, with the minor interval defaulting to an hour."""
    parser = benchmark_parser(__doc__ or "", "cdc", seed="row and key generator seed", steps=["side"])
    add = parser.add_argument
    add("--before", default=BEFORE, help="git revision of floe before the change")
    add("--base-rows", type=int, default=2_400_000, help="rows before the first upsert")
    add(
        "--base-files",
        type=int,
        default=8,
        help="appends of the base rows, each one file (a segment by default)",
    )
    add("--upserts", type=int, default=24_000, help="rows upserted per round")
    add("--rounds", type=int, default=24)
    add("--rounds-per-hour", type=int, default=4)
    add("--target-mib", type=float, default=8.0, help="target file size, MiB")
    add(
        "--round-period-s",
        type=float,
        default=15.0,
        help="wall time from one round's upserts to the next's (longer than a round's work)",
    )
    add(
        "--minor-interval-rounds",
        type=int,
        help="minor interval, in rounds (default: an hour); 0: whenever a table has more than one "
        "fragment or equality-delete file",
    )
    add(
        "--duplicate-ratio",
        type=float,
        default=0.1,
        help="self-optimizing.major.trigger.duplicate-ratio (Amoro's default: 0.1)",
    )
    add("--side", choices=SIDES, help=argparse.SUPPRESS)
    add("--report-only", action="store_true", help="report the last run left in --dir")
    add_plots_argument(parser)
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
    logs = args.dir / "logs"
    if not args.report_only:
        args.dir.mkdir(parents=True, exist_ok=True)
        flags = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in SIDE_FLAGS]
        run_before_and_after(SCRIPT, flags, args.before, args.dir)
        settings = {k: getattr(args, k) for k in [*SIDE_FLAGS, "before", "rounds_per_hour"]}
        save_conditions(logs / "run.json", settings)
    # The report is of the run in --dir: its settings and conditions, whatever this command's.
    conditions, settings = load_conditions(logs / "run.json")
    vars(args).update(settings)
    results = {side: json.loads((logs / f"{side}.json").read_text()) for side in SIDES}
    rounds = {side: _derived(results[side]["rounds"]) for side in SIDES}
    for b, a in zip(*rounds.values(), strict=True):
        if (b["rows"], b["rows_hash"]) != (a["rows"], a["rows_hash"]):
            raise AssertionError(f"round {b['round']}: the two sides read different rows")
    plots = _plot(rounds, args.plots)
    report_result(under(_result(args, results["after"]["base"], rounds, plots), conditions), args.record)


# -- one side, in a child process -----------------------------------------------------------


def run_side(args: argparse.Namespace) -> dict[str, Any]:
    """Build the table, then upsert and optimize round after round, measuring after each."""
    import floe
    from floe.local.optimize import optimize_once
    from floe.local.reference_jars import reference_jars
    from floe.local.reference_reader import ReferenceReader, qualified_name
    from floe.planning.config import OptimizingConfig
    from floe_optimizer.spark_session import get_spark

    target = int(args.target_mib * MiB)
    # The minor interval fires every --minor-interval-rounds rounds (0: no interval), half a period
    # short of them so that the jitter of a round's start cannot move it by one.
    every = args.minor_interval_rounds
    config = OptimizingConfig(
        target_size=target,
        max_task_size_bytes=target,
        minor_trigger_interval_s=(every - 0.5) * args.round_period_s if every > 0 else 0.0,
        major_duplicate_ratio=args.duplicate_ratio,
    )
    args.dir.mkdir(parents=True, exist_ok=True)
    properties = sql_catalog_properties(args.dir / "catalog.db", args.dir / "warehouse")
    spark = get_spark(master="local[2]", app_name="floe-bench-cdc", extra_jars=reference_jars())
    reader = ReferenceReader(spark)
    name, compacted = qualified_name("cdc", TABLE), qualified_name("cdc", f"{TABLE}_compacted")
    rounds: list[dict[str, Any]] = []
    with opened(SqlCatalog("cdc", **properties)) as catalog:
        reader.register_sql_catalog("cdc", args.dir / "catalog.db", properties["warehouse"])
        table, orders = create_table(catalog, reader, args.seed, args.base_rows, args.base_files, args.dir)
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
            ingested = upsert(table, orders.upsert(args.upserts))
            started = time.monotonic()
            result = optimize_once(table, TABLE, config, spark=lambda: spark)
            optimize_s = time.monotonic() - started
            snapshot = table.metadata.snapshot_by_id(result.commit.snapshot_id) if result.commit else None
            written = int(snapshot.summary["added-files-size"] or 0) if snapshot and snapshot.summary else 0
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
                    **full_reads(reader, name, compacted, target),
                }
            )
            print(rounds[-1], flush=True)
    return {"floe": str(Path(floe.__file__).parent), "base": base, "rounds": rounds}


# -- the report -----------------------------------------------------------------------------


def _derived(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each round with its write amplification (cumulative) and its scan ratio."""
    ingested = written = 0
    derived = []
    for r in rounds:
        ingested += r["ingested_bytes"]
        written += r["written_bytes"]
        ratio = r["scan_s"] / r["compacted_scan_s"]
        derived.append({**r, "write_amplification": written / ingested, "scan_ratio": ratio})
    return derived


PLOTS = {
    "write_amplification": "bytes written by optimizing / bytes ingested (cumulative)",
    "eq_delete_files": "live equality-delete files",
    "scan_ratio": "full read / full read of the compacted rows",
}


def _plot(rounds: dict[str, list[dict[str, Any]]], directory: Path) -> list[Path]:
    """A PNG per metric, a line per side; returns the files written."""
    styles = {"before": REFERENCE_STYLE, "after": FLOE_STYLE}
    written, x = [], [r["round"] for r in rounds["after"]]
    for metric, title in PLOTS.items():
        lines = [Line(f"floe {s}", x, [r[metric] for r in rounds[s]], styles[s]) for s in SIDES]
        panel = Panel(lines, target=TARGETS[metric][1] if metric in TARGETS else None)
        written.append(save_plot(directory / f"cdc_{metric}.png", title, "upsert round", "", [panel]))
    return written


PER_ROUND: dict[str, Callable[[dict[str, Any]], str]] = {
    "WA": lambda r: f"{r['write_amplification']:.2f}",
    "type": lambda r: str(r["optimizing"]),
    "written MiB": lambda r: f"{r['written_bytes'] / MiB:.1f}",
    "eq files": lambda r: str(r["eq_delete_files"]),
    "pos files": lambda r: str(r["pos_delete_files"]),
    "scan ratio": lambda r: f"{r['scan_ratio']:.2f}",
}
"""The per-round table's cells: each for both sides, but position-delete files for after alone."""
COLUMNS = [(c, s) for c in PER_ROUND for s in SIDES if (c, s) != ("pos files", "before")]
SUMMARY = ["side", "WA at the end", "WA worst", "MiB written, by type", "scan ratio worst", "scan ratio mean"]


def _summary_row(side: str, rounds: list[dict[str, Any]]) -> list[str]:
    wa, ratio = ([r[metric] for r in rounds] for metric in ("write_amplification", "scan_ratio"))
    by_type: Counter[str] = Counter()
    for r in rounds:
        by_type[r["optimizing"]] += r["written_bytes"]
    written = ", ".join(f"{kind} {size / MiB:.1f}" for kind, size in sorted(by_type.items()) if size) or "-"
    mean_ratio = f"{sum(ratio) / len(ratio):.2f}"
    return [f"floe {side}", f"{wa[-1]:.2f}", f"{max(wa):.2f}", written, f"{max(ratio):.2f}", mean_ratio]


def _result(
    args: argparse.Namespace, base: dict[str, int], rounds: dict[str, list[dict[str, Any]]], plots: list[Path]
) -> BenchResult:
    worst = {metric: max(r[metric] for r in rounds["after"]) for metric in TARGETS}
    ingested = sum(r["ingested_bytes"] for r in rounds["after"]) / MiB
    hours = args.base_rows / (args.upserts * args.rounds_per_hour)
    late = {side: [r["late_s"] for r in rounds[side] if r["late_s"] > 0.5] for side in SIDES}
    late_words = [
        f"{s}: {len(t)} rounds late, at most {max(t):.1f} s" if t else f"{s}: no round late"
        for s, t in late.items()
    ]
    return new_result(
        SCRIPT.stem,
        "CDC write amplification",
        "How many bytes floe's optimizing writes per byte a CDC table ingests, and how a full read of the "
        "table compares with one of the same rows compacted: floe converting equality deletes (after, this "
        "checkout) against floe rewriting segments with them (before).",
        targets=[
            Target(what, f"<= {goal:g}{unit}", f"{worst[metric]:.2f}{unit}", worst[metric] <= goal)
            for metric, (what, goal, unit) in TARGETS.items()
        ],
        figures=[
            Figures("Both sides over the run", SUMMARY, [_summary_row(side, rounds[side]) for side in SIDES]),
            Figures(
                "Per round",
                ["round", *(f"{column} {side}" for column, side in COLUMNS)],
                [[str(i + 1), *(PER_ROUND[c](rounds[s][i]) for c, s in COLUMNS)] for i in range(args.rounds)],
            ),
        ],
        notes=[
            f"Base: {base['data_files']} data files, {base['data_bytes'] / MiB:.0f} MiB, "
            f"{base['records']:,} rows written by Iceberg's Java writer (Spark), as the compacted copy's; "
            f"{args.rounds} rounds of {args.upserts:,} upserts ({args.rounds_per_hour} rounds = 1 hour: the "
            f"base is {hours:.0f}x an hour of upserts); {ingested:.1f} MiB ingested in all, a round every "
            f"{args.round_period_s:g} s ({'; '.join(late_words)}). Target file size {args.target_mib:g} MiB, "
            f"minor interval {args.minor_interval_rounds} rounds (0: whenever there is more than one "
            f"fragment or equality-delete file), duplicate ratio {args.duplicate_ratio:g}. "
            f"Before: floe at `{args.before}`.",
            "WA = bytes written by optimizing / bytes ingested (data + equality-delete files), cumulative. "
            "Scan ratio = the fastest of five full reads (`count(*)`, `sum(hash(*))`) of the table by "
            "Iceberg's Java reader / the same of a CTAS copy of its rows in files of the target size. "
            "The targets are floe's (after). Both sides read the same rows after every round.",
            "Plots: " + ", ".join(f"`{shown_path(path)}`" for path in plots) + ".",
        ],
    )


if __name__ == "__main__":
    main()
