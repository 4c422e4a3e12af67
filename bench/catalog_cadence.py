"""How often floe asks a catalog about its tables, and how soon it sees a writer's commit: fixed
refresh against adaptive refresh against change notices, on a catalog most tables of which are idle.

The operator's engine, in-process without Kubernetes, over ``--tables`` tables of one small file
each in one catalog (``--catalog``: Iceberg's REST catalog server by default, or SQL), floe's
defaults but for maintenance (off: each job loads its table on its own schedule, which this does
not measure) and the minor triggers (off: a table with two small files would otherwise be due at
once, one written past 12 files due too, and with no optimizer here stay pending, checked at every
minimum interval). Time is simulated: a clock that moves one second per engine round, so an hour
of a catalog's life takes minutes. ``--written`` of the tables (1 % by default, chosen at random
once) get an append every simulated minute, a real commit to the catalog, as streaming writers
commit; the writers have run for 4 minutes when floe starts (their commits before every table's
first check are not measured); the rest stay idle. With ``notices`` each commit is followed by a
change notice, as a writer's post-commit hook sends it. The writers stamp their commits with the
simulated time, and the REST catalog server runs on it too (Debian's libfaketime): it stamps the
metadata it writes, and refuses a commit stamped more than a minute past its own clock.

Each refresh mode runs in a fresh child process on a catalog made afresh:

- ``fixed``: every table every 10 s (``refresh.maxInterval`` = the minimum), as before adaptive refresh;
- ``adaptive``: floe's defaults (10 s after a change, doubling while unchanged up to 10 minutes);
- ``notices``: adaptive, and a change notice after each commit;
- ``throttled`` (REST): adaptive with floe's own request budget, the catalog behind a proxy that
  answers 429 above ``--throttle-rate`` requests a second, in real time for
  ``--throttled-minutes`` (the rate is in real seconds), then rounds without writes until every
  write is seen: nothing lost, nothing stuck, and how the budget shows it.

Measured from the first check of every table on, over ``--minutes`` simulated minutes: the
catalog requests per simulated second (loads, 304s and probes; mean, and over the last quarter
of the run, the steady state), the engine's CPU per table per simulated hour (the process's, the
writer's appends left out), and the simulated time from a commit to the check that sees it (p50,
p95): the part of trigger-to-task latency a refresh adds (a table seen with work is planned at
the next round its group has a thread). The request budget is raised out of the way: what each
mode asks for is measured, not what a budget lets through (but in the throttled run).

Run: ``.venv/bin/python bench/catalog_cadence.py [--tables 1000,10000] [--catalog rest] --record``.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import statistics
import sys
import time
from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

from harness.catalog_cadence_report import MODES, RUNS_FILE, WRITTEN_BEFORE, recorded_runs, result
from harness.cli import benchmark_parser, comma_separated
from harness.results import provenance, report_result
from harness.revisions import REPO, run_against
from harness.simulated_time import SimClock, round_of
from harness.small_tables import table_name
from harness.table_catalogs import CATALOGS, tables_catalog, throttled

REFRESH_S = 10.0
"""The operator's default refresh interval: the shortest check interval."""
MAX_INTERVAL_S = 600.0
"""floe's default refresh.maxInterval."""
MAINTENANCE_JOBS = ("snapshotRetention", "orphanFiles", "manifests", "danglingDeletes")
DRAIN_S = 300.0
"""How long a throttled run goes on after its last write for every write to be seen."""


def measure(
    tables: int,
    properties: dict[str, str],
    mode: str,
    minutes: float,
    written: float,
    seed: int,
    writer_properties: dict[str, str] | None = None,
    clock_file: str | None = None,
) -> dict[str, Any]:
    """One mode over a catalog of `tables` tables (this checkout's floe, in this child process);
    the writer commits through `writer_properties` (by default floe's `properties`). A throttled
    run keeps floe's request budget, runs in real time (the catalog's rate is in real seconds),
    and goes on after its last write until every write is seen, for up to `DRAIN_S`."""
    import pyarrow as pa
    import pyiceberg.table.snapshots
    from pyiceberg.catalog import load_catalog

    from floe.api.group import OptimizerGroup
    from floe.api.models import OptimizedTable
    from floe.optimizing.engine import OptimizingEngine
    from floe.service.task_service import TaskService

    clock = SimClock(time.time(), clock_file)
    engine = OptimizingEngine(TaskService(clock=clock), refresh_interval_s=REFRESH_S, clock=clock)
    engine.apply_group(
        OptimizerGroup.model_validate(
            {"apiVersion": "floe.dev/v1alpha1", "kind": "OptimizerGroup", "metadata": {"name": "default"}}
        )
    )
    throttled = mode == "throttled"
    budgeted = {**properties, "floe.requests-per-second": "100000", "floe.max-concurrent-requests": "64"}
    if throttled:
        budgeted = properties
    spec: dict[str, Any] = {
        "catalog": {"name": "lake", "properties": budgeted},
        "maintenance": {job: {"enabled": False} for job in MAINTENANCE_JOBS},
        # No minor trigger: with no optimizer here, a written table past 12 files would stay
        # pending, and a pending table is checked at every minimum interval.
        "minor": {"triggerInterval": "-1", "triggerFileCount": 1_000_000},
        "refresh": {"maxInterval": f"{REFRESH_S if mode == 'fixed' else MAX_INTERVAL_S:g}s"},
    }
    runtimes = []
    for index in range(tables):
        manifest = {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": f"t{index:05d}"},
            "spec": {**spec, "table": table_name(index)},
        }
        runtimes.append(engine.apply_table(OptimizedTable.model_validate(manifest)))
    writer = load_catalog("lake", **(writer_properties or properties))
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array([str(i) for i in range(100)])})
    hot = random.Random(seed).sample(range(tables), max(1, round(tables * written)))

    def calls() -> int:
        return engine.table_loads + engine.not_modified_loads + engine.catalog_probes

    waiting: dict[int, tuple[float, int]] = {}
    """Per written table: when it was written and the snapshot the write made."""
    writer_cpu = 0.0

    stamp_s = clock.now
    """The simulated time of the writers' commit being made."""

    def write(counted: bool) -> None:
        """At every simulated minute, an append to each written table (a change notice after each
        with `notices`), stamped with that minute however far a slow engine round moved the clock
        past it (writers keep their own pace); `counted`: its commit's delay until floe sees it is
        measured."""
        nonlocal writer_cpu, stamp_s
        cpu = time.process_time()
        while stamp_s <= clock.now:
            for index in hot:
                table = writer.load_table(table_name(index))
                table.append(rows)
                snapshot = table.current_snapshot()
                assert snapshot is not None
                if counted:
                    waiting[index] = (stamp_s, snapshot.snapshot_id)
                if mode == "notices":
                    engine.table_changed(table_name(index))
            stamp_s += 60.0
        writer_cpu += time.process_time() - cpu

    # The writers' commits are stamped with the simulated time, as a real writer's are with its
    # clock: floe reads a writer's pace from them.
    stamping = patch.object(pyiceberg.table.snapshots, "time", SimpleNamespace(time=lambda: stamp_s))
    stamping.start()
    try:
        # The writers already run when floe starts, as streaming writers do, and have for a few
        # minutes: their commits before every table's first check are not measured.
        for _ in range(WRITTEN_BEFORE):
            write(counted=False)
            clock.advance(60.0)
        while any(r.snapshot_id is None for r in runtimes):
            write(counted=False)
            round_of(engine, clock, throttled)
        started_s, calls_at_start, cpu_at_start = clock.now, calls(), time.process_time()
        writer_cpu = 0.0
        steady_from_s = started_s + minutes * 60 * 0.75
        calls_at_steady: int | None = None
        seen: list[float] = []
        pressure: dict[str, str] = {}
        """How the group's condition described the catalog's pressure, the first time it did."""
        while clock.now < started_s + minutes * 60:
            write(counted=True)
            if calls_at_steady is None and clock.now >= steady_from_s:
                calls_at_steady = calls()
            round_of(engine, clock, throttled)
            seen += _seen(waiting, runtimes, clock.now)
            pressure = pressure or engine.catalog_pressure("default")
        elapsed_s, run_calls = clock.now - started_s, calls() - calls_at_start
        steady_calls = calls() - (calls_at_steady or calls())
        engine_cpu = time.process_time() - cpu_at_start - writer_cpu
        drain_from_s = clock.now
        while throttled and waiting and clock.now < drain_from_s + DRAIN_S:
            round_of(engine, clock, throttled)
            seen += _seen(waiting, runtimes, clock.now)
        errors = [r.last_error for r in runtimes if r.last_error]
        assert not errors, errors[:3]
        intervals = sorted(r.refresh.interval_s or 0.0 for r in runtimes)
        budget = next(iter(engine.catalog_budgets().values()), None)
    finally:
        stamping.stop()
        engine.close()
    quantiles = statistics.quantiles(seen, n=20) if len(seen) >= 2 else [math.nan] * 19
    return {
        "catalog_requests_per_s": run_calls / elapsed_s,
        "steady_requests_per_s": steady_calls / (started_s + elapsed_s - steady_from_s),
        "cpu_ms_per_table_hour": engine_cpu / tables / (elapsed_s / 3600) * 1000,
        "seen_p50_s": statistics.median(seen) if seen else math.nan,
        "seen_p95_s": quantiles[18],
        "writes": len(seen) + len(waiting),
        "unseen_writes": len(waiting),
        "median_interval_s": intervals[len(intervals) // 2],
        "throttled_answers": budget.throttled if budget else 0,
        "refreshes_held_back": budget.refreshes_held_back if budget else 0,
        "drain_s": clock.now - drain_from_s,
        "pressure": "; ".join(f"{name}: {words}" for name, words in pressure.items()),
    }


def _seen(waiting: dict[int, tuple[float, int]], runtimes: list[Any], now: float) -> list[float]:
    """The commit-to-check times of the writes of `waiting` the engine has seen by `now`,
    taken off it."""
    seen = []
    for index, (written_s, snapshot_id) in list(waiting.items()):
        if runtimes[index].snapshot_id == snapshot_id:
            seen.append(now - written_s)
            del waiting[index]
    return seen


def main() -> int:
    parser = benchmark_parser(__doc__ or "", "catalog-cadence")
    add = parser.add_argument
    add("--tables", default="1000,10000", help="comma-separated table counts")
    add("--catalog", choices=sorted(CATALOGS), default="rest", help="the tables' catalog")
    add("--modes", type=comma_separated(list(MODES)), default=",".join(MODES))
    add("--minutes", type=float, default=60.0, help="simulated minutes measured")
    add(
        "--fixed-minutes",
        type=float,
        default=10.0,
        help="simulated minutes measured of fixed refresh, which is the same from its first minute on",
    )
    add("--written", type=float, default=0.01, help="share of the tables written every simulated minute")
    add("--throttle-rate", type=float, default=5.0, help="requests / s the throttled catalog answers")
    add("--throttled-minutes", type=float, default=10.0, help="real minutes of the throttled run")
    add("--seed", type=int, default=7)
    args = parser.parse_args()
    if min(args.minutes, args.fixed_minutes, args.throttled_minutes) < 4 or not 0 < args.written <= 1:
        parser.error(
            "--minutes, --fixed-minutes and --throttled-minutes must be at least 4, --written within (0, 1]"
        )
    if "throttled" in args.modes and (args.catalog != "rest" or args.throttle_rate <= 0):
        parser.error("the throttled run needs --catalog rest and a positive --throttle-rate")
    runs: list[dict[str, Any]] = []
    made = provenance()
    for tables in (int(t) for t in args.tables.split(",")):
        for mode in args.modes:
            # A catalog made afresh per run: the appends of one run would be the next's history.
            directory = args.dir / f"{args.catalog}-{tables}-{mode}"
            shutil.rmtree(directory, ignore_errors=True)
            minutes = {"fixed": args.fixed_minutes, "throttled": args.throttled_minutes}.get(
                mode, args.minutes
            )
            rate = args.throttle_rate if mode == "throttled" else None
            clock_file = directory.parent / f"{directory.name}.clock" if args.catalog == "rest" else None
            with (
                tables_catalog(args.catalog, directory, tables, 1, clock_file) as properties,
                throttled(properties, rate) as seen,
            ):
                clocked = str(clock_file) if clock_file else None
                figures = (
                    tables,
                    seen.properties,
                    mode,
                    minutes,
                    args.written,
                    args.seed,
                    properties,
                    clocked,
                )
                measured = run_against(REPO, "catalog_cadence", "measure", *figures)
                measured["catalog_429s"] = seen.answered_429()
            run = {
                "catalog": args.catalog,
                "tables": tables,
                "refresh": mode,
                "minutes": minutes,
                "written": args.written,
                "throttle_rate": args.throttle_rate,
                **measured,
                "trigger_to_task_p95_s": measured["seen_p95_s"],
                **made,
            }
            runs.append(run)
            print(json.dumps(run), file=sys.stderr)
    if args.record:
        runs = recorded_runs(runs)
        RUNS_FILE.write_text(json.dumps(runs, indent=2) + "\n")
    report_result(result(runs), args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
