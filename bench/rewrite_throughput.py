"""Rewrite throughput: floe's full optimizing against Iceberg's ``rewrite_data_files`` and a pyarrow bound.

The input is the events table with no deletes, 5% position deletes, or the same rows as
equality deletes (`harness.variants`), restored from a pristine copy before every run; the
engines are in `harness.rewrite_engines`. Only the rewrite is timed, with the CPU time of the
whole process tree; after each floe and Iceberg run, Iceberg's Java reader checks the content
against the pristine table's. Described in full in ``docs/benchmarks/index.md``.

Run: ``.venv/bin/python bench/rewrite_throughput.py [--scale 0.01]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import MiB
from harness.cli import benchmark_parser, comma_separated
from harness.figures import columns_figures
from harness.pristine import Layout
from harness.results import BenchResult, Figures, Target, new_result, report_result
from harness.rewrite_attempts import CHILD_STEPS, RewriteAttempts, prepare
from harness.rows import DAYS
from harness.steps import run_requested_step
from harness.timing import fastest
from harness.variants import VARIANTS, Variants

ENGINES = ("bound", "floe", "iceberg")
TARGET_VS_ICEBERG = 2.0
TARGET_VS_BOUND = 0.7
TARGET_CHECK_SHARE = 0.02
"""Checking a task's result before it may be committed costs under 2 % of the task's time."""
SCAN_REPEAT = 5
"""Full reads per rewritten table, the fastest kept: single reads of 1 to 2 s vary by several percent."""


@dataclass(frozen=True)
class _Run:
    """One engine's fastest run on one variant, and the rates the report derives from it."""

    variant: str
    engine: str
    run: dict[str, Any]
    stats: dict[str, int]
    cores: int

    @property
    def mib(self) -> float:
        """What the engine must read: data and delete file bytes (the bound reads data files only)."""
        deletes = 0 if self.engine == "bound" else self.stats["delete_bytes"]
        return (self.stats["data_bytes"] + deletes) / MiB

    @property
    def wall_rate(self) -> float:
        """Input MiB per second per core."""
        return self.mib / float(self.run["seconds"]) / self.cores

    @property
    def cpu_rate(self) -> float:
        """Input MiB per CPU second."""
        return self.mib / float(self.run["cpu_seconds"])

    @property
    def output(self) -> str:
        """Files and MiB the run left: the bound's own output, or the table's data files after the rewrite."""
        run, after = self.run, self.run.get("after", {})
        size = after.get("data_bytes", run.get("output_bytes"))
        return f"{after.get('data_files', run.get('output_files'))} files, {size / MiB:,.0f} MiB"

    @property
    def deletes_left(self) -> str:
        """Delete files left in the table after the rewrite (the bound commits nothing)."""
        after = self.run.get("after")
        return str(after["pos_delete_files"] + after["eq_delete_files"]) if after else "-"


Engines = dict[str, _Run]
"""One variant's fastest run of each engine, by engine (floe's always among them)."""


def _over(other: str, rate: str) -> Callable[[Engines], float | None]:
    """floe's wall or CPU rate over ``other``'s (None when ``other`` did not run)."""
    return lambda e: getattr(e["floe"], rate) / getattr(e[other], rate) if other in e else None


def _than_iceberg(key: Callable[[dict[str, Any]], float]) -> Callable[[Engines], float | None]:
    """floe's figure ``key`` over Iceberg's (None when Iceberg did not run)."""
    return lambda e: key(e["floe"].run) / key(e["iceberg"].run) if "iceberg" in e else None


def _check_share(e: Engines) -> float:
    """floe's result-check time against its tasks' time (the rewrite phase on every core)."""
    return float(e["floe"].run["check_seconds"] / (e["floe"].run["phases"][1] * e["floe"].cores))


@dataclass(frozen=True)
class _Ratio:
    """A figure of floe against a peer: header, value, format, and its target if any (``goal``'s
    comparison with ``threshold``)."""

    header: str
    value: Callable[[Engines], float | None]
    form: str
    goal: str = ""
    threshold: float = 0.0

    def cell(self, e: Engines) -> str:
        """The figure as shown, ``-`` when the peer did not run."""
        return "-" if (value := self.value(e)) is None else self.form.format(value)


RATIOS = (
    _Ratio("floe / Iceberg, wall", _over("iceberg", "wall_rate"), "{:.2f}x", ">= 2x", TARGET_VS_ICEBERG),
    _Ratio("floe / Iceberg, CPU", _over("iceberg", "cpu_rate"), "{:.2f}x"),
    _Ratio("floe / bound, wall", _over("bound", "wall_rate"), "{:.0%}", ">= 70%", TARGET_VS_BOUND),
    _Ratio("floe / bound, CPU", _over("bound", "cpu_rate"), "{:.0%}"),
    _Ratio("result checks, share of task time", _check_share, "{:.2%}", "< 2%", TARGET_CHECK_SHARE),
    _Ratio(
        "floe / Iceberg output bytes",
        _than_iceberg(lambda r: r["after"]["data_bytes"]),
        "{:.3f}x",
        "<= 0.92x",
        0.92,
    ),
    _Ratio("floe / Iceberg full scan", _than_iceberg(lambda r: r["scan_seconds"]), "{:.2f}x", "<= 1x", 1.0),
)
"""floe against its peers; the output and full-scan targets: floe's output at most 0.92x the bytes of
Iceberg's for the same rows, and Spark reading it no slower than Iceberg's."""
MET = {">=": float.__ge__, "<=": float.__le__, "<": float.__lt__}


def _targets(floe_runs: list[Engines]) -> list[Target]:
    """Each ratio with a target over the variants it was measured on: every variant's figure, met by all."""
    targets = []
    for ratio in RATIOS:
        values = [(e["floe"].variant, v) for e in floe_runs if (v := ratio.value(e)) is not None]
        if ratio.goal and values:
            what = f"{ratio.header} ({' / '.join(variant for variant, _ in values)})"
            figures = " / ".join(ratio.form.format(v) for _, v in values)
            met = all(MET[ratio.goal.split()[0]](v, ratio.threshold) for _, v in values)
            targets.append(Target(what, ratio.goal, figures, met))
    return targets


def _result(
    base: dict[str, Any], built: Variants, runs: dict[str, dict[str, Any]], cores: int
) -> BenchResult:
    """The result: the input tables, one row per run, floe against its peers and its targets."""
    stats, before = built.stats, built.content
    measured = [
        {engine: _Run(variant, engine, run, stats[variant], cores) for engine, run in engines.items()}
        for variant, engines in runs.items()
    ]

    def content(r: _Run) -> str:
        wrong = [h for h in r.run["hashes"] if h != before[r.variant]]
        return (
            "- (no deletes applied)" if r.engine == "bound" else f"DIFFERENT: {wrong}" if wrong else "equal"
        )

    input_table = Figures(
        "Input",
        ["variant", "data files", "data MiB", "delete files pos / eq", "delete MiB", "rows deleted", "rows"],
        [
            [
                v,
                f"{t['data_files']:,}",
                f"{t['data_bytes'] / MiB:,.0f}",
                f"{t['pos_delete_files']:,} / {t['eq_delete_files']:,}",
                f"{t['delete_bytes'] / MiB:,.1f}",
                f"{t['delete_records']:,}",
                f"{int(before[v][0]):,}",
            ]
            for v, t in stats.items()
        ],
    )
    run_table = columns_figures(
        "Runs",
        [
            ("variant", lambda r: r.variant),
            ("engine", lambda r: r.engine),
            ("input MiB", lambda r: f"{r.mib:,.0f}"),
            ("wall s", lambda r: " / ".join(f"{wall:.1f}" for wall in r.run["walls"])),
            ("MiB/s/core", lambda r: f"{r.wall_rate:.1f}"),
            ("CPU s", lambda r: f"{r.run['cpu_seconds']:.1f}"),
            ("CPU use", lambda r: f"{r.run['cpu_seconds'] / r.run['seconds'] / cores:.0%}"),
            ("MiB/CPU-s", lambda r: f"{r.cpu_rate:.1f}"),
            ("output", lambda r: r.output),
            ("deletes left", lambda r: r.deletes_left),
            ("content after", content),
        ],
        [r for engines in measured for r in engines.values()],
    )
    floe_runs = [engines for engines in measured if "floe" in engines]
    ratio_table = columns_figures(
        "floe against Iceberg and the bound",
        [
            ("variant", lambda e: e["floe"].variant),
            *[(ratio.header, ratio.cell) for ratio in RATIOS],
            ("result checks s", lambda e: f"{e['floe'].run['check_seconds']:.2f}"),
            (
                "full scan s, floe / Iceberg",
                lambda e: " / ".join(
                    f"{e[n].run['scan_seconds']:.2f}" for n in ("floe", "iceberg") if n in e
                ),
            ),
            (
                "floe plan / rewrite / commit s",
                lambda e: " / ".join(f"{p:.1f}" for p in e["floe"].run["phases"]),
            ),
            ("floe bytes_read MiB", lambda e: f"{e['floe'].run['floe_bytes_read'] / MiB:,.0f}"),
            ("floe tasks", lambda e: str(e["floe"].run["tasks"])),
        ],
        floe_runs,
    )
    first = next(iter(stats.values()))
    return new_result(
        "rewrite_throughput",
        "Rewrite throughput",
        "How fast floe's full optimizing rewrites a table of small files (no deletes, position deletes, "
        "equality deletes) against Iceberg's `rewrite_data_files`, and against bare pyarrow reading and "
        "writing the same bytes (the bound).",
        targets=_targets(floe_runs),
        figures=[input_table, run_table, ratio_table],
        notes=[
            f"Input: {first['data_files']:,} data files, {first['data_bytes'] / MiB:,.0f} MiB, "
            f"{base['rows']:,} rows, {DAYS} day partitions; "
            + "; ".join(f"`{v}` = {VARIANTS[v]}" for v in stats)
            + f". Engines on `local[{cores}]` (bound: {cores} processes); per-core rates divide by {cores}.",
            "input = live data + delete file bytes (bound: data files only); wall s = each attempt's, the "
            "fastest reported; CPU s = the whole process tree's (driver, JVM, Python workers), which other "
            f"work does not dilute. full scan = the fastest of {SCAN_REPEAT} `sum(hash(*))` reads by Iceberg "
            "Java; content after = Iceberg Java's `count(*)`, `sum(xxhash64(*))`, `sum(hash(*))` against "
            "the pristine table's.",
        ],
    )


def main() -> int:
    """Parse arguments and run the benchmark (or one of its child steps)."""
    parser = benchmark_parser(
        __doc__,
        "rewrite",
        "work directory (emptied first)",
        scale="multiply the table size (default 1: ~2 GiB)",
        seed="seed of the generated rows",
        repeat="runs per engine and variant; the fastest is kept",
        profile="also cProfile floe's largest task of each variant",
        engines=ENGINES,
        steps=("bound", "profile"),
    )
    parser.add_argument("--cores", type=int, default=2, help="Spark local cores and bound processes")
    variants, listed = comma_separated(list(VARIANTS)), ", ".join(VARIANTS)
    parser.add_argument(
        "--variants", type=variants, default=",".join(VARIANTS), help=f"comma-separated, from {listed}"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory afterwards")
    for hidden in ("--catalog", "--bins", "--profile-out"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    layout = Layout(args.dir.resolve())
    if args.step is not None:
        run_requested_step(args, CHILD_STEPS)
        return 0
    if layout.root.exists():
        shutil.rmtree(layout.root)
    (layout.root / "logs").mkdir(parents=True)
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:6.0f} s] {message}", flush=True)

    base, spark, built = prepare(layout, args, log)
    engines = RewriteAttempts(layout, Path(__file__).resolve(), args.cores, spark, SCAN_REPEAT, log)
    runs: dict[str, dict[str, Any]] = {}
    for variant in args.variants:
        runs[variant] = {}
        for engine in args.engines:
            attempts = [engines.attempt(variant, engine, n) for n in range(args.repeat)]
            # Every attempt's content is checked, not only the fastest one's.
            best = fastest(attempts, lambda r: float(r["seconds"]))
            runs[variant][engine] = {**best, "hashes": [r["hash"] for r in attempts if "hash" in r]}
        if args.profile:
            engines.profile(variant)
    spark.stop()
    report_result(_result(base, built, runs, args.cores), args.record)
    if not args.keep:
        shutil.rmtree(layout.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
