"""Planning at scale: floe's ``scan_table`` + ``plan_optimizing`` against pyiceberg's ``plan_files``.

The table (`harness.synthetic`) is real Iceberg metadata for files that do not exist: by
default 100,000 data files and 20,000 position delete files over 1,000 day partitions.
Each measurement runs in a fresh child process, after the catalog is opened and the
table loaded (that time is reported apart): wall time with ``time.perf_counter`` and
peak RSS with ``resource.getrusage`` in one run, the peak of Python allocations with
``tracemalloc`` in another (tracing slows Python down, so its wall time is not used).
Measured engines:

- ``floe``: ``scan_table`` then ``plan_optimizing`` with the default (Amoro) thresholds,
  letting evaluation choose minor/major per partition, as the evaluator loop does;
- ``floe-full``: the same with ``forced=FULL``: every partition is packed into tasks;
- ``pyiceberg``: ``list(table.scan().plan_files())``, pyiceberg 0.12's own planning
  (data files matched with their position deletes).

Described in full in ``docs/benchmarks/index.md``.

Run: ``.venv/bin/python bench/planning_scale.py [--scale 0.01]``.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from harness import MiB
from harness.cli import benchmark_parser
from harness.figures import columns_figures
from harness.profiling import profiled
from harness.results import BenchResult, Figures, Target, new_result, report_result
from harness.steps import run_requested_step, run_step
from harness.synthetic import TABLE, Shape, build_table, catalog, reuse_or_build
from harness.timing import fastest
from pyiceberg.table import Table

from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingType
from floe.planning.planner import plan_optimizing
from floe.tables.history import optimizing_history
from floe.tables.scan import scan_table

ENGINES = ("floe", "floe-full", "pyiceberg")
TARGET_SECONDS = 10.0
TARGET_BYTES = 2 * 1024 * MiB
PROFILE_LISTING = (("cumulative", 35), ("tottime", 25))


def _peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def step_measure(args: argparse.Namespace) -> dict[str, Any]:
    """Child step: load the table, then time ``--engine``'s planning; with ``--trace`` tracemalloc's peak."""
    started = time.perf_counter()
    table = catalog(args.dir).load_table(TABLE)
    load_seconds = time.perf_counter() - started
    rss_before = _peak_rss_bytes()
    if args.trace:
        tracemalloc.start()
    with profiled(args.profile_out, PROFILE_LISTING):
        cpu_started = time.process_time()
        result = _plan(table, args.engine)
        cpu_seconds = time.process_time() - cpu_started
    traced_peak = tracemalloc.get_traced_memory()[1] if args.trace else None
    if args.trace:
        tracemalloc.stop()
    return {
        "engine": args.engine,
        "load_seconds": load_seconds,
        "rss_before_bytes": rss_before,
        "peak_rss_bytes": _peak_rss_bytes(),
        "tracemalloc_peak_bytes": traced_peak,
        "cpu_seconds": cpu_seconds,
        **result,
    }


def _plan(table: Table, engine: str) -> dict[str, Any]:
    """Plan with ``engine``: scan and plan seconds, the files seen and the tasks planned."""
    started = time.perf_counter()
    if engine == "pyiceberg":
        tasks = list(table.scan().plan_files())
        scanned_at = time.perf_counter()
        return {
            "scan_seconds": scanned_at - started,
            "plan_seconds": 0.0,
            "data_files": len(tasks),
            "delete_files": len({d.file_path for task in tasks for d in task.delete_files}),
            "tasks": len(tasks),
            "planned_files": len(tasks),
        }
    scanned = scan_table(table)
    scanned_at = time.perf_counter()
    history = optimizing_history(table.metadata)
    plan = plan_optimizing(
        scanned.files,
        OptimizingConfig(),
        now_s=time.time(),
        last_minor_s=history.last_minor_s,
        last_full_s=history.last_full_s,
        forced=OptimizingType.FULL if engine == "floe-full" else None,
    )
    planned_at = time.perf_counter()
    return {
        "scan_seconds": scanned_at - started,
        "plan_seconds": planned_at - scanned_at,
        "data_files": len(scanned.files.data_files),
        "delete_files": len(scanned.files.delete_files),
        "tasks": len(plan.tasks),
        "planned_files": sum(len(t.data_files) for t in plan.tasks),
    }


def _scan_plan_seconds(run: dict[str, Any]) -> float:
    return float(run["scan_seconds"] + run["plan_seconds"])


def _result(built: dict[str, Any], runs: dict[str, dict[str, Any]]) -> BenchResult:
    """The result: the table, one row per engine, and floe against its targets."""
    engines = columns_figures(
        "Planning, per engine",
        [
            ("engine", lambda r: r["engine"]),
            ("load s", lambda r: f"{r['load_seconds']:.2f}"),
            ("scan s", lambda r: f"{r['scan_seconds']:.2f}"),
            ("plan s", lambda r: f"{r['plan_seconds']:.2f}"),
            ("scan+plan s (each run)", lambda r: " / ".join(f"{wall:.2f}" for wall in r["walls"])),
            ("CPU s", lambda r: f"{r['cpu_seconds']:.2f}"),
            ("RSS before MiB", lambda r: f"{r['rss_before_bytes'] / MiB:.0f}"),
            ("peak RSS MiB", lambda r: f"{r['peak_rss_bytes'] / MiB:.0f}"),
            ("tracemalloc peak MiB", lambda r: f"{r['tracemalloc_peak_bytes'] / MiB:.0f}"),
            ("data / delete files", lambda r: f"{r['data_files']:,} / {r['delete_files']:,}"),
            ("tasks (data files in them)", lambda r: f"{r['tasks']:,} ({r['planned_files']:,})"),
        ],
        runs.values(),
    )
    table = Figures(
        "The table",
        ["data files", "position delete files", "partitions", "commits (one manifest each)", "built in s"],
        [
            [
                f"{built['data_files']:,}",
                f"{built['delete_files']:,}",
                f"{built['partitions']:,}",
                str(built["commits"]),
                f"{built['build_seconds']:.0f}",
            ]
        ],
    )
    targets = []
    floe = runs.get("floe")
    if floe is not None:
        total, cpu, rss = _scan_plan_seconds(floe), floe["cpu_seconds"], floe["peak_rss_bytes"]
        targets = [
            Target(
                "floe scan+plan, wall time",
                f"< {TARGET_SECONDS:.0f} s",
                f"{total:.2f} s",
                total < TARGET_SECONDS,
            ),
            Target(
                "floe scan+plan, CPU time", f"< {TARGET_SECONDS:.0f} s", f"{cpu:.2f} s", cpu < TARGET_SECONDS
            ),
            Target("floe peak RSS", "< 2 GiB", f"{rss / MiB:.0f} MiB", rss < TARGET_BYTES),
        ]
    return new_result(
        "planning_scale",
        "Planning at scale",
        "How long floe takes to scan a table's manifests and plan its optimizing, and how much memory, "
        "at 100,000 data and 20,000 position delete files over 1,000 partitions (the targets are for "
        "that size, `--scale 1`), against pyiceberg's own `plan_files`.",
        targets=targets,
        figures=[table, engines],
        notes=[
            "load = open the SQLite catalog and load the table metadata (not part of planning); scan = "
            "read the manifests into live files (pyiceberg: all of `plan_files`); plan = evaluate and "
            "bin-pack (floe: default thresholds; floe-full: forced full optimizing). CPU s = CPU time of "
            "the planning process in the fastest run: planning is single-threaded under the GIL, so this "
            "is what scan+plan takes on an idle core. RSS before = peak RSS after imports and table load. "
            "Wall time and RSS come from one child process per engine and run (the fastest run's are "
            "shown), tracemalloc's peak from another one.",
        ],
    )


def main() -> int:
    """Parse arguments and run the benchmark, or one of its child steps."""
    parser = benchmark_parser(
        __doc__,
        "planning",
        "work directory (table is reused if same shape)",
        scale="multiply file and partition counts (default 1)",
        seed="seed of the synthesized metadata",
        repeat="timed runs per engine; the fastest is kept",
        profile="also run each engine under cProfile, print the top",
        engines=ENGINES,
        steps=("build", "measure"),
    )
    parser.add_argument("--shape", nargs=4, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.dir = args.dir.resolve()
    if args.step is not None:
        run_requested_step(
            args, {"build": lambda a: build_table(a.dir, Shape(*a.shape)), "measure": step_measure}
        )
        return 0

    script = Path(__file__).resolve()
    built = reuse_or_build(args.dir, Shape.at_scale(args.scale, args.seed), script)
    print(
        f"table: {built['data_files']:,} data files, {built['delete_files']:,} delete files, "
        f"{built['partitions']:,} partitions (built in {built['build_seconds']:.0f} s)"
    )
    runs: dict[str, dict[str, Any]] = {}
    base = ["--step", "measure", "--dir", str(args.dir)]
    for engine in args.engines:
        attempts = [
            run_step(script, [*base, "--engine", engine], args.dir, f"measure-{engine}-{n}")
            for n in range(args.repeat)
        ]
        timed = fastest(attempts, _scan_plan_seconds)
        traced = run_step(script, [*base, "--engine", engine, "--trace"], args.dir, f"trace-{engine}")
        runs[engine] = {**timed, "tracemalloc_peak_bytes": traced["tracemalloc_peak_bytes"]}
        print(
            f"{engine}: scan {timed['scan_seconds']:.2f} s, plan {timed['plan_seconds']:.2f} s, "
            f"peak RSS {timed['peak_rss_bytes'] / MiB:.0f} MiB, "
            f"tracemalloc peak {traced['tracemalloc_peak_bytes'] / MiB:.0f} MiB"
        )
        if args.profile:
            profile_path = args.dir / "logs" / f"profile-{engine}.txt"
            run_step(
                script,
                [*base, "--engine", engine, "--profile-out", str(profile_path)],
                args.dir,
                f"profile-{engine}",
            )
            print(f"cProfile of {engine} in {profile_path}:\n{profile_path.read_text()}")
    report_result(_result(built, runs), args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
