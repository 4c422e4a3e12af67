"""Rewrite throughput: floe's full optimizing against Iceberg's ``rewrite_data_files`` and a pyarrow bound.

The input is the events table in three variants, ``none``, ``pos`` and ``eq`` (no deletes,
5% position deletes, the same rows as equality deletes; `harness.variants`), each
restored from a pristine copy before every run. Engines, all on CORES cores:

- ``floe``: ``optimize_once(..., forced=FULL)`` with a 128 MiB target on the run's Spark session;
- ``iceberg``: ``CALL <catalog>.system.rewrite_data_files(...)``, binpack, on the same session;
- ``bound``: bare pyarrow in a child process, reading and rewriting the data files in
  bins of 128 MiB with no Iceberg logic: what the bytes alone cost.

Only the rewrite is timed, with the CPU time of the whole process tree (`harness.cpu`);
after each floe and Iceberg run, Iceberg's Java reader checks the content against the
pristine table's. Described in full in ``bench/README.md``.

Run: ``.venv/bin/python bench/rewrite_throughput.py [--scale 0.01]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from harness import MiB
from harness.cli import benchmark_parser, comma_separated
from harness.machine import load_average
from harness.pristine import Layout
from harness.profiling import profiled
from harness.report import columns_table, command_line, emit
from harness.rows import DAYS
from harness.steps import run_requested_step, run_step
from harness.timing import fastest, timed
from harness.variants import (
    TABLE,
    VARIANTS,
    add_equality_deletes,
    build_variants,
    content_hash,
    full_scan_seconds,
    register,
    table_stats,
    write_base,
)

from floe.local.optimize import OptimizeResult, optimize_once
from floe.local.reference_jars import reference_jars
from floe.local.reference_reader import ReferenceReader
from floe.optimizing.specs import build_process
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingType
from floe.planning.planner import plan_optimizing
from floe.rewrite.task import run_rewrite_task
from floe.tables.scan import scan_table
from floe_optimizer.spark_session import get_spark

ENGINES = ("bound", "floe", "iceberg")
TARGET_FILE_BYTES = 128 * MiB
BOUND_ROW_GROUP_BYTES = 64 * MiB
ICEBERG_OPTIONS = {
    "target-file-size-bytes": str(TARGET_FILE_BYTES),
    "rewrite-all": "true",
    "delete-file-threshold": "1",
    "remove-dangling-deletes": "true",
}
WARMUP_SCALE = 0.004
TARGET_VS_ICEBERG = 2.0
TARGET_VS_BOUND = 0.7
TARGET_CHECK_SHARE = 0.02
"""Checking a task's result before it may be committed costs under 2 % of the task's time."""
TARGET_OUTPUT_VS_ICEBERG = 0.92
"""floe's output is at most this share of the bytes Iceberg's rewrite writes for the same rows."""
TARGET_SCAN_VS_ICEBERG = 1.0
"""A full scan of floe's output by Spark takes no longer than of Iceberg's."""
SCAN_REPEAT = 5
"""Full reads per rewritten table, the fastest kept: single reads of 1 to 2 s vary by several percent."""
PROFILE_LISTING = (("tottime", 25), ("cumulative", 40))


class SparkEngines:
    """The run's one Spark session, with floe's and Iceberg's rewrites on it."""

    def __init__(self, cores: int) -> None:
        session = get_spark(master=f"local[{cores}]", app_name="floe-bench", extra_jars=reference_jars())
        self._session = session
        self.reader = ReferenceReader(session)
        """Iceberg Java on the session: the content checks and Spark's DELETE use it too."""

    def floe(self, layout: Layout, name: str) -> dict[str, Any]:
        """Time floe's full optimizing of the table in catalog ``name`` and its plan, rewrite and commit."""
        marks: dict[str, float] = {}

        def mark(event: str) -> Callable[[Any], None]:
            return lambda _: marks.__setitem__(event, time.perf_counter())

        with layout.catalog(name) as catalog:
            table = catalog.load_table(TABLE)
            config = OptimizingConfig(target_size=TARGET_FILE_BYTES, max_task_size_bytes=TARGET_FILE_BYTES)

            def run() -> OptimizeResult:
                marks["start"] = time.perf_counter()
                result = optimize_once(
                    table,
                    TABLE,
                    config,
                    spark=lambda: self._session,
                    forced=OptimizingType.FULL,
                    on_plan=mark("planned"),
                    on_task_done=mark("rewritten"),
                )
                marks["end"] = time.perf_counter()
                return result

            optimized = timed(run)
        return {
            "seconds": optimized.seconds,
            "cpu_seconds": optimized.cpu_seconds,
            "tasks": len(optimized.value.plan.tasks),
            "check_seconds": optimized.value.check_seconds,
            "floe_bytes_read": optimized.value.bytes_read,
            "phases": [
                marks["planned"] - marks["start"],
                marks["rewritten"] - marks["planned"],
                marks["end"] - marks["rewritten"],
            ],
        }

    def iceberg(self, layout: Layout, name: str) -> dict[str, Any]:
        """Time Iceberg's rewrite_data_files procedure on the table in catalog ``name``."""
        register(self.reader, layout, name)
        options = ", ".join(f"'{key}', '{value}'" for key, value in ICEBERG_OPTIONS.items())
        call = (
            f"CALL {name}.system.rewrite_data_files(table => '{name}.{TABLE}', strategy => 'binpack', "
            f"options => map({options}))"
        )
        run = timed(lambda: self.reader.sql(call))
        return {
            "seconds": run.seconds,
            "cpu_seconds": run.cpu_seconds,
            "procedure_result": [list(row) for row in run.value],
        }

    def stop(self) -> None:
        """Stop the Spark session."""
        self._session.stop()


def _bound_bin(paths: list[str], output: str) -> tuple[int, int]:
    """Read whole files, concatenate, write one zstd file with ~64 MiB row groups; return rows and bytes."""
    data = pa.concat_tables([pq.read_table(path) for path in paths])
    row_bytes = max(1.0, data.nbytes / max(1, data.num_rows))
    pq.write_table(
        data, output, compression="zstd", row_group_size=max(1, int(BOUND_ROW_GROUP_BYTES / row_bytes))
    )
    return data.num_rows, os.path.getsize(output)


def step_bound(args: argparse.Namespace) -> dict[str, Any]:
    """Child step: time the bare pyarrow read-then-write of the bins in ``--bins``, ``--cores`` processes."""
    bins: list[list[str]] = json.loads(Path(args.bins).read_text())
    out_dir = Path(args.dir) / "bound-out"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir()
    jobs = [(paths, str(out_dir / f"bin-{n:05d}.parquet")) for n, paths in enumerate(bins)]

    def run() -> list[tuple[int, int]]:
        pool = multiprocessing.get_context("fork").Pool(args.cores)
        try:
            written = pool.starmap(_bound_bin, jobs, chunksize=1)
        finally:
            pool.close()
            pool.join()
        return written

    bound = timed(run)
    shutil.rmtree(out_dir)
    return {
        "seconds": bound.seconds,
        "cpu_seconds": bound.cpu_seconds,
        "output_files": len(bound.value),
        "output_bytes": sum(size for _, size in bound.value),
        "rows": sum(rows for rows, _ in bound.value),
    }


def bound_bins(layout: Layout, name: str) -> list[list[str]]:
    """The data files of each partition, in path order, packed into bins of at most 128 MiB (local paths)."""
    by_partition: dict[Any, list[Any]] = defaultdict(list)
    with layout.catalog(name) as catalog:
        for f in scan_table(catalog.load_table(TABLE)).files.data_files:
            by_partition[f.partition].append(f)
    bins: list[list[str]] = []
    for files in by_partition.values():
        current: list[str] = []
        used = 0
        for f in sorted(files, key=lambda f: f.path):
            if current and used + f.size_bytes > TARGET_FILE_BYTES:
                bins.append(current)
                current, used = [], 0
            current.append(urlparse(f.path).path if f.path.startswith("file:") else f.path)
            used += f.size_bytes
        if current:
            bins.append(current)
    return bins


def step_profile(args: argparse.Namespace) -> dict[str, Any]:
    """Child step: run floe's largest full-optimizing task of the table in this process under cProfile."""
    with Layout(Path(args.dir)).catalog(args.catalog) as catalog:
        table = catalog.load_table(TABLE)
        config = OptimizingConfig(target_size=TARGET_FILE_BYTES, max_task_size_bytes=TARGET_FILE_BYTES)
        scanned = scan_table(table)
        plan = plan_optimizing(
            scanned.files,
            config,
            now_s=time.time(),
            last_minor_s=None,
            last_full_s=None,
            forced=OptimizingType.FULL,
        )
        process = build_process(table, TABLE, scanned, plan, config)
        spec = max(process.specs, key=lambda s: sum(f.size_bytes for f in s.data_files))
        with profiled(Path(args.profile_out), PROFILE_LISTING):
            started = time.perf_counter()
            result = run_rewrite_task(spec)
            seconds = time.perf_counter() - started
        for written in result.files:
            table.io.delete(written.path)
    return {"seconds": seconds, "bytes_read": result.bytes_read}


# --- orchestration and report -------------------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    """One engine's fastest run on one variant, and the rates the report derives from it."""

    variant: str
    engine: str
    run: dict[str, Any]
    mib: float
    cores: int

    @property
    def wall_rate(self) -> float:
        """Input MiB per second per core."""
        return self.mib / float(self.run["seconds"]) / self.cores

    @property
    def cpu_rate(self) -> float:
        """Input MiB per CPU second."""
        return self.mib / float(self.run["cpu_seconds"])


def _report(
    base: dict[str, Any],
    stats: dict[str, dict[str, int]],
    before: dict[str, list[str]],
    runs: dict[str, dict[str, dict[str, Any]]],
    cores: int,
) -> str:
    """The markdown results section: the input tables, one row per run, and floe's ratios."""
    first = next(iter(stats.values()))
    measured = {
        variant: {
            engine: _Run(variant, engine, run, _input_mib(stats[variant], engine), cores)
            for engine, run in engines.items()
        }
        for variant, engines in runs.items()
    }

    def content(r: _Run) -> str:
        if r.engine == "bound":
            return "- (no deletes applied)"
        wrong = [h for h in r.run["hashes"] if h != before[r.variant]]
        return "equal" if not wrong else f"**DIFFERENT**: {wrong}"

    input_table = columns_table(
        [
            ("variant", lambda v: v),
            ("data files", lambda v: f"{stats[v]['data_files']:,}"),
            ("data MiB", lambda v: f"{stats[v]['data_bytes'] / MiB:,.0f}"),
            (
                "delete files pos / eq",
                lambda v: f"{stats[v]['pos_delete_files']:,} / {stats[v]['eq_delete_files']:,}",
            ),
            ("delete MiB", lambda v: f"{stats[v]['delete_bytes'] / MiB:,.1f}"),
            ("rows deleted", lambda v: f"{stats[v]['delete_records']:,}"),
            ("rows", lambda v: f"{int(before[v][0]):,}"),
        ],
        stats,
    )
    run_table = columns_table(
        [
            ("variant", lambda r: r.variant),
            ("engine", lambda r: r.engine),
            ("input MiB", lambda r: f"{r.mib:,.0f}"),
            ("wall s", lambda r: " / ".join(f"{wall:.1f}" for wall in r.run["walls"])),
            ("MiB/s/core", lambda r: f"**{r.wall_rate:.1f}**"),
            ("CPU s", lambda r: f"{r.run['cpu_seconds']:.1f}"),
            ("CPU use", lambda r: f"{r.run['cpu_seconds'] / r.run['seconds'] / cores:.0%}"),
            ("MiB/CPU-s", lambda r: f"{r.cpu_rate:.1f}"),
            ("output", _output),
            ("deletes left", _deletes_left),
            ("content after", content),
        ],
        [r for engines in measured.values() for r in engines.values()],
    )
    ratio_table = columns_table(
        [
            ("variant", lambda e: e["floe"].variant),
            (
                f"floe / Iceberg, wall (target >= {TARGET_VS_ICEBERG:g}x)",
                lambda e: _ratio(e, "iceberg", "wall"),
            ),
            ("floe / Iceberg, CPU", lambda e: _ratio(e, "iceberg", "cpu")),
            (f"floe / bound, wall (target >= {TARGET_VS_BOUND:.0%})", lambda e: _ratio(e, "bound", "wall")),
            ("floe / bound, CPU", lambda e: _ratio(e, "bound", "cpu")),
            (
                "floe plan / rewrite / commit s",
                lambda e: " / ".join(f"{p:.1f}" for p in e["floe"].run["phases"]),
            ),
            (
                f"result checks, share of task time (target < {TARGET_CHECK_SHARE:.0%})",
                lambda e: _check_share(e["floe"].run, cores),
            ),
            (
                f"floe / Iceberg output bytes (target <= {TARGET_OUTPUT_VS_ICEBERG:g}x)",
                _output_ratio,
            ),
            (
                f"floe / Iceberg full scan s (target <= {TARGET_SCAN_VS_ICEBERG:g}x)",
                _scan_ratio,
            ),
            ("floe bytes_read MiB", lambda e: f"{e['floe'].run['floe_bytes_read'] / MiB:,.0f}"),
            ("floe tasks", lambda e: str(e["floe"].run["tasks"])),
        ],
        [engines for engines in measured.values() if "floe" in engines],
    )
    return "\n".join(
        [
            "### Rewrite throughput",
            "",
            f"Command: `{command_line()}`  ",
            f"Input: {first['data_files']:,} data files, {first['data_bytes'] / MiB:,.0f} MiB, "
            f"{base['rows']:,} rows, {DAYS} day partitions (built in {base['build_seconds']:.0f} s). "
            f"Engines on `local[{cores}]` (bound: {cores} processes); per-core rates divide by {cores}. "
            f"Load average at the end: {load_average()}.",
            "",
            "Variants: " + "; ".join(f"`{v}` = {VARIANTS[v]}" for v in stats) + ".",
            "",
            input_table,
            "",
            run_table,
            "",
            ratio_table,
            "",
            "input = live data + delete file bytes of the starting snapshot (bound: data files only). "
            "wall s = each attempt's wall time; the fastest attempt is the one reported. "
            "MiB/s/core = input / wall s / cores. CPU s = CPU time of the whole process tree (driver, JVM, "
            f"Python workers) in the timed window; CPU use = CPU s / (wall s * {cores}); MiB/CPU-s = input / "
            "CPU s, which other work on the machine does not dilute. output bytes = the data files the "
            f"rewrite left; full scan s = the fastest of {SCAN_REPEAT} `sum(hash(*))` reads of the "
            "rewritten table by Iceberg Java (vectorized). content after = Iceberg Java's "
            "`count(*)`, `sum(xxhash64(*))`, `sum(hash(*))` after the rewrite against the same over the "
            "pristine table. Result checks = the time floe spent checking its tasks' results (row "
            "conservation, file names, sizes, footers, metrics) against the tasks' time: the rewrite phase "
            f"on {cores} cores.",
            "",
        ]
    )


def _input_mib(stats: dict[str, int], engine: str) -> float:
    """What the engine must read: data and delete file bytes (the bound reads data files only)."""
    return (stats["data_bytes"] + (0 if engine == "bound" else stats["delete_bytes"])) / MiB


def _output(r: _Run) -> str:
    """Files and MiB the run left: the bound's own output, or the table's data files after the rewrite."""
    if r.engine == "bound":
        return f"{r.run['output_files']} files, {r.run['output_bytes'] / MiB:,.0f} MiB"
    return f"{r.run['after']['data_files']} files, {r.run['after']['data_bytes'] / MiB:,.0f} MiB"


def _deletes_left(r: _Run) -> str:
    """Delete files left in the table after the rewrite (the bound commits nothing)."""
    if r.engine == "bound":
        return "-"
    return str(r.run["after"]["pos_delete_files"] + r.run["after"]["eq_delete_files"])


def _check_share(run: dict[str, Any], cores: int) -> str:
    """floe's result-check time against its tasks' time (the rewrite phase on every core)."""
    if "check_seconds" not in run:
        return "-"
    share = run["check_seconds"] / (run["phases"][1] * cores)
    mark = "met" if share < TARGET_CHECK_SHARE else "**missed**"
    return f"{share:.2%} ({run['check_seconds']:.2f} s, {mark})"


def _output_ratio(engines: dict[str, _Run]) -> str:
    """floe's output bytes over Iceberg's, marked against the target."""
    if "iceberg" not in engines:
        return "-"
    value = engines["floe"].run["after"]["data_bytes"] / engines["iceberg"].run["after"]["data_bytes"]
    verdict = "met" if value <= TARGET_OUTPUT_VS_ICEBERG else "missed"
    return f"**{value:.3f}x** ({verdict})"


def _scan_ratio(engines: dict[str, _Run]) -> str:
    """The full scan of floe's output over that of Iceberg's, with both times."""
    if "iceberg" not in engines:
        return "-"
    floe, iceberg = engines["floe"].run["scan_seconds"], engines["iceberg"].run["scan_seconds"]
    verdict = "met" if floe <= TARGET_SCAN_VS_ICEBERG * iceberg else "missed"
    return f"**{floe / iceberg:.2f}x** ({floe:.2f} / {iceberg:.2f} s, {verdict})"


def _ratio(engines: dict[str, _Run], other: str, rate: str) -> str:
    """floe's wall or CPU rate over ``other``'s, marked against the target."""
    if other not in engines:
        return "-"
    target = TARGET_VS_ICEBERG if other == "iceberg" else TARGET_VS_BOUND
    floe, them = engines["floe"], engines[other]
    value = floe.wall_rate / them.wall_rate if rate == "wall" else floe.cpu_rate / them.cpu_rate
    verdict = "met" if value >= target else "missed"
    shown = f"{value:.2f}x" if target >= 1 else f"{value:.0%}"
    return f"**{shown}** ({verdict})"


def warm_up(spark: SparkEngines, root: Path, seed: int, engines: list[str]) -> None:
    """Run floe and Iceberg once on a small table with equality deletes, so that the timed runs are warm.

    This loads Iceberg's classes and JIT-compiles its read, delete and write paths, and
    starts Spark's Python workers with floe imported, as in a long-running optimizer.
    """
    warm = Layout(root)
    write_base(warm, "warm_build", WARMUP_SCALE, seed)
    add_equality_deletes(warm, "warm_build")
    warm.save("eq", "warm_build")
    for engine in engines:
        name = f"warm_{engine}"
        warm.restore("eq", name)
        if engine == "floe":
            spark.floe(warm, name)
        elif engine == "iceberg":
            spark.iceberg(warm, name)
    shutil.rmtree(root)


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
    parser.add_argument(
        "--cores", type=int, default=2, help="Spark local cores and bound processes (default 2)"
    )
    parser.add_argument(
        "--variants",
        type=comma_separated(list(VARIANTS)),
        default=",".join(VARIANTS),
        help=f"comma-separated, from {', '.join(VARIANTS)}",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory afterwards")
    parser.add_argument("--catalog", help=argparse.SUPPRESS)
    parser.add_argument("--bins", help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    layout = Layout(args.dir.resolve())
    if args.step is not None:
        run_requested_step(args, {"bound": step_bound, "profile": step_profile})
        return 0

    script = Path(__file__).resolve()
    if layout.root.exists():
        shutil.rmtree(layout.root)
    (layout.root / "logs").mkdir(parents=True)

    def child(step: str, label: str, *extra: str) -> dict[str, Any]:
        argv = ["--step", step, "--dir", str(layout.root), "--cores", str(args.cores), *extra]
        return run_step(script, argv, layout.root, label)

    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:6.0f} s] {message}", flush=True)

    log(f"building the input table in {layout.live} (scale {args.scale:g})")
    base = write_base(layout, "none_build", args.scale, args.seed)
    layout.save("none", "none_build")
    log(f"built {base['rows']:,} rows; starting Spark and warming up")
    spark = SparkEngines(args.cores)
    warm_up(spark, layout.root / "warmup", args.seed, args.engines)
    built = build_variants(layout, spark.reader, args.variants, log)
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    for variant in args.variants:
        runs[variant] = {}
        for engine in args.engines:
            attempts = []
            for attempt in range(args.repeat):
                name = f"{variant}_{engine}_{attempt}"
                layout.restore(variant, name)
                if engine == "bound":
                    bins_file = layout.root / "logs" / f"bins-{variant}.json"
                    bins_file.write_text(json.dumps(bound_bins(layout, name)))
                    run = child("bound", f"bound-{name}", "--bins", str(bins_file))
                else:
                    run = spark.floe(layout, name) if engine == "floe" else spark.iceberg(layout, name)
                    run["after"] = table_stats(layout, name)
                    run["hash"] = content_hash(spark.reader, layout, name)
                    run["scan_seconds"] = full_scan_seconds(spark.reader, layout, name, repeat=SCAN_REPEAT)
                seconds, cpu = run["seconds"], run["cpu_seconds"]
                log(f"{variant} / {engine} #{attempt + 1}: {seconds:.1f} s, {cpu:.0f} CPU s")
                attempts.append(run)
            # Every attempt's content is checked, not only the fastest one's.
            best = fastest(attempts, lambda r: float(r["seconds"]))
            runs[variant][engine] = {**best, "hashes": [r["hash"] for r in attempts if "hash" in r]}
        if args.profile:
            name = f"{variant}_profile"
            layout.restore(variant, name)
            profile_path = layout.root / "logs" / f"profile-{variant}.txt"
            profiled_task = child(
                "profile", f"profile-{variant}", "--catalog", name, "--profile-out", str(profile_path)
            )
            log(
                f"cProfile of floe's largest {variant} task ({profiled_task['bytes_read'] / MiB:.0f} MiB in "
                f"{profiled_task['seconds']:.1f} s, one process, no Spark):\n{profile_path.read_text()}"
            )
    spark.stop()

    emit(_report(base, built.stats, built.content, runs, args.cores), args.markdown)
    if not args.keep:
        shutil.rmtree(layout.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
