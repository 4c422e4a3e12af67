"""Idle cost per table: what the operator's engine loop spends on tables nothing writes to.

The operator's loop, in-process without Kubernetes: ``--tables`` tables (default 1,000 and
10,000) of one small file each in one SQL catalog (SQLite), applied to one ``OptimizingEngine``,
maintenance jobs off (each loads its table about once an hour, the refresh 360 times). Two
sides, each in a fresh child process (`harness.revisions`): ``before``, floe at ``--before``
(a git revision), and ``after``, this checkout. Each measures:

- refresh: the first refresh of every table (its wall time, the engine rounds it took and the
  longest of them), then ``--rounds`` refreshes of every table: CPU per table per hour at the
  operator's 10 s, the wall time of one, table loads and catalog probes per table per hour;
- loop: ``engine.tick()`` every second and the status flush every 5 s (into a stand-in for the
  API server that counts patches) for ``--loop-seconds`` after a warm-up: CPU as a share of one
  core and per table per hour (targets: <= 5 %, <= 18 ms), status patches per second;
- peak RSS of the process.

``--catalog rest`` puts the same tables in Iceberg's REST catalog server (1.11, JDBC on SQLite,
tables on moto's S3, on loopback, made afresh each run), which answers a repeated load with 304
Not Modified; ``--snapshots`` gives its tables a history; ``before`` then defaults to the last
revision that loaded every REST table at every refresh.

Not measured: kopf and the API server around the loop, maintenance.
Run: ``.venv/bin/python bench/catalog_scale.py [--tables 1000,10000] [--catalog rest]``.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

from harness.cli import benchmark_parser
from harness.report import times
from harness.results import BenchResult, Figures, Target, new_result, report_result
from harness.revisions import REPO, revision_source, run_against
from harness.table_catalogs import CATALOGS, tables_catalog

SIDES = ("before", "after")
BEFORE = "a4899e5"
"""The last revision that loaded every table at every refresh and computed every table's status
at every flush."""
REST_BEFORE = "4d9a947"
"""The last revision that loaded every table of a REST catalog in full at every refresh."""
REFRESH_INTERVAL_S = 10.0
"""The operator's default table refresh interval: an hour is 360 refreshes."""
TICK_S, FLUSH_S, WARMUP_S = 1.0, 5.0, 12.0
"""The operator's engine round and status flush intervals; the loop's warm-up (after the first
refresh of every table)."""
MAINTENANCE_OFF = {
    job: {"enabled": False} for job in ("snapshotRetention", "orphanFiles", "manifests", "danglingDeletes")
}


class _CountingKube:
    """Where the status flush writes: counts the patches an API server would get."""

    def __init__(self) -> None:
        self.patches = 0

    def patch_status(self, plural: str, name: str, namespace: str, status: dict[str, Any]) -> None:
        self.patches += 1


def measure(tables: int, properties: dict[str, str], rounds: int, loop_seconds: float) -> dict[str, Any]:
    """Both measurements, with the floe this process imports (the child's source)."""
    from floe.api.models import OptimizedTable
    from floe.controller.status import TableStatusFlusher
    from floe.service.task_service import TaskService

    try:
        from floe.api.group import OptimizerGroup
        from floe.kit.redaction import Redactor
        from floe.optimizing.engine import OptimizingEngine
    except ImportError:  # floe before these modules moved: the default --before revisions
        from floe.service.engine import OptimizingEngine
        from floe.tables.credentials import Redactor

        from floe.api.models import OptimizerGroup

    def make_engine(refresh_interval_s: float) -> OptimizingEngine:
        engine = OptimizingEngine(
            TaskService(clock=time.time), refresh_interval_s=refresh_interval_s, namespaced_groups=True
        )
        group = {"apiVersion": "floe.dev/v1alpha1", "kind": "OptimizerGroup"}
        engine.apply_group(
            OptimizerGroup.model_validate({**group, "metadata": {"name": "default", "namespace": "ns"}})
        )
        for index in range(tables):
            manifest = {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizedTable",
                "metadata": {"name": f"t{index:05d}", "namespace": "ns"},
                "spec": {
                    "table": f"db.t{index:05d}",
                    "catalog": {"name": "lake", "properties": properties},
                    "maintenance": MAINTENANCE_OFF,
                },
            }
            engine.apply_table(OptimizedTable.model_validate(manifest))
        return engine

    import floe

    out: dict[str, Any] = {"floe": str(Path(floe.__file__).parent.parent)}
    engine = make_engine(0.0)
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        longest, first_rounds = 0.0, 0
        while first_rounds == 0 or any(r.snapshot_id is None for r in engine.runtimes.values()):
            started = time.perf_counter()
            engine.tick()
            longest, first_rounds = max(longest, time.perf_counter() - started), first_rounds + 1
        out |= {
            "first_wall_s": time.perf_counter() - wall,
            "first_cpu_s": time.process_time() - cpu,
            "first_rounds": first_rounds,
            "first_longest_round_s": longest,
        }
        loads, probes = getattr(engine, "table_loads", None), getattr(engine, "catalog_probes", 0)
        not_modified = getattr(engine, "not_modified_loads", 0)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(rounds):
            engine.tick()
        idle_cpu, idle_wall = time.process_time() - cpu, time.perf_counter() - wall
        errors = [r.last_error for r in engine.runtimes.values() if r.last_error]
        assert not errors, errors[:3]
    finally:
        engine.close()
    per_hour = 3600.0 / REFRESH_INTERVAL_S / (rounds * tables)
    out |= {
        "cpu_ms_per_refresh": idle_cpu / (rounds * tables) * 1000,
        "cpu_ms_per_table_hour": idle_cpu * per_hour * 1000,
        "idle_refresh_wall_s": idle_wall / rounds,
        # Before the probe the engine counted no loads: each refresh was one.
        "loads_per_table_hour": (engine.table_loads - loads) * per_hour if loads is not None else 360.0,
        "not_modified_per_table_hour": (getattr(engine, "not_modified_loads", 0) - not_modified) * per_hour,
        "probes_per_hour": (getattr(engine, "catalog_probes", 0) - probes)
        * 3600.0
        / REFRESH_INTERVAL_S
        / rounds,
    }

    engine = make_engine(REFRESH_INTERVAL_S)
    kube = _CountingKube()
    flusher = TableStatusFlusher(kube, engine, Redactor(), time.time)  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        while any(r.snapshot_id is None for r in engine.runtimes.values()):  # the first refresh
            engine.tick()
            time.sleep(TICK_S)
        flusher.flush()  # every table's first status
        while time.monotonic() - started < WARMUP_S:  # and a few rounds more
            engine.tick()
            flusher.flush()
            time.sleep(TICK_S)
        kube.patches = 0
        cpu, started = time.process_time(), time.monotonic()
        last_flush = started
        while time.monotonic() - started < loop_seconds:
            engine.tick()
            if time.monotonic() - last_flush >= FLUSH_S:
                last_flush = time.monotonic()
                flusher.flush()
            time.sleep(TICK_S)
        loop_cpu, loop_wall = time.process_time() - cpu, time.monotonic() - started
    finally:
        engine.close()
    out |= {
        "loop_core_percent": loop_cpu / loop_wall * 100,
        "loop_ms_per_table_hour": loop_cpu / loop_wall * 3600 / tables * 1000,
        "loop_patches_per_s": kube.patches / loop_wall,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    return out


COLUMNS = (
    ("first refresh s", "first_wall_s", ".1f"),
    ("its rounds", "first_rounds", "d"),
    ("longest round s", "first_longest_round_s", ".1f"),
    ("refresh CPU ms / table / hour", "cpu_ms_per_table_hour", ".1f"),
    ("one refresh s", "idle_refresh_wall_s", ".2f"),
    ("loads / table / hour", "loads_per_table_hour", ".0f"),
    ("304s / table / hour", "not_modified_per_table_hour", ".0f"),
    ("catalog probes / hour", "probes_per_hour", ".0f"),
    ("loop CPU % of a core", "loop_core_percent", ".1f"),
    ("loop CPU ms / table / hour", "loop_ms_per_table_hour", ".1f"),
    ("status patches / s", "loop_patches_per_s", ".1f"),
    ("peak RSS MiB", "peak_rss_mib", ".0f"),
)
"""Each side's figures: the column's header, the key of `measure`'s result, its format."""
RATIOS = (
    ("refresh CPU, before / after", "cpu_ms_per_table_hour"),
    ("one refresh, before / after", "idle_refresh_wall_s"),
    ("loop CPU, before / after", "loop_core_percent"),
)
TARGETS = (("% of a core", "loop_core_percent", 5), ("ms / table / hour", "loop_ms_per_table_hour", 18))
"""The loop's targets: what, the key of `measure`'s result, at most this."""


def result(results: dict[int, dict[str, dict[str, Any]]], args: argparse.Namespace) -> BenchResult:
    """Both sides' figures at each table count, this checkout's loop against the targets."""
    rows = [
        [f"{tables:,}", side, *(format(r[key], spec) for _, key, spec in COLUMNS)]
        for tables, by_side in results.items()
        for side, r in by_side.items()
    ]
    both = {tables: s for tables, s in results.items() if set(SIDES) <= set(s)}
    ratios = [
        [f"{tables:,}", *(times(s["before"][key], s["after"][key]) for _, key in RATIOS)]
        for tables, s in both.items()
    ]
    targets = [
        Target(
            f"loop CPU at {tables:,} tables, {what}",
            f"<= {goal}",
            f"{s['after'][key]:.1f}",
            s["after"][key] <= goal,
        )
        for tables, s in results.items()
        if "after" in s
        for what, key, goal in TARGETS
    ]
    conditions = (
        f"{CATALOGS[args.catalog]}, {args.snapshots} snapshot(s) of one small file per table, maintenance "
        f"off; in-process, no Kubernetes. before: floe at `{args.before}`; after: this checkout. Refresh: "
        f"{args.rounds} refreshes of every table after the first, per hour at the operator's "
        f"{REFRESH_INTERVAL_S:.0f} s. Loop: the engine round every {TICK_S:.0f} s and the status flush "
        f"every {FLUSH_S:.0f} s for {args.loop_seconds:.0f} s after {WARMUP_S:.0f} s of warm-up, after every "
        "table's first refresh and first status: with nothing written, the status patches stay at 0."
    )
    return new_result(
        "catalog_scale",
        "Idle cost per table: the engine loop over tables nothing writes to",
        "What the operator's engine loop spends on tables nothing writes to: the refresh of every table, "
        "and the loop as `floe operator` runs it (an engine round every second, the status flush every "
        "5 s), floe before a change against this checkout.",
        targets=targets,
        figures=[
            Figures("Refresh and loop, each side", ["tables", "floe", *(h for h, _, _ in COLUMNS)], rows),
            *([Figures("Before / after", ["tables", *(h for h, _ in RATIOS)], ratios)] if ratios else []),
        ],
        notes=[conditions, "Not measured: kopf and the API server around the loop, maintenance."],
    )


def main() -> int:
    parser = benchmark_parser(__doc__ or "", "catalog-scale")
    parser.add_argument("--tables", default="1000,10000", help="comma-separated table counts")
    parser.add_argument("--catalog", choices=sorted(CATALOGS), default="sql", help="the tables' catalog")
    parser.add_argument("--snapshots", type=int, default=1, help="snapshots per table (REST only)")
    parser.add_argument("--rounds", type=int, default=5, help="refreshes of every table measured")
    parser.add_argument("--loop-seconds", type=float, default=60.0, help="how long the loop is measured")
    parser.add_argument(
        "--before", help=f"git revision of floe before the change ({BEFORE}; REST: {REST_BEFORE})"
    )
    parser.add_argument("--sides", default=",".join(SIDES), help="comma-separated, from before, after")
    args = parser.parse_args()
    if args.catalog == "sql" and args.snapshots != 1:
        parser.error(
            "--snapshots is for --catalog rest: the SQL catalog is made once, one snapshot per table"
        )
    args.before = args.before or (REST_BEFORE if args.catalog == "rest" else BEFORE)
    results: dict[int, dict[str, dict[str, Any]]] = {}
    for tables in (int(t) for t in args.tables.split(",")):
        suffix = "" if args.catalog == "sql" else f"-{args.catalog}"
        with tables_catalog(
            args.catalog, args.dir / f"tables-{tables}{suffix}", tables, args.snapshots
        ) as properties:
            for side in args.sides.split(","):
                source = revision_source(args.before, args.dir) if side == "before" else REPO
                measured = run_against(
                    source, "catalog_scale", "measure", tables, properties, args.rounds, args.loop_seconds
                )
                results.setdefault(tables, {})[side] = measured
                print(f"{tables} tables, {side}: {measured}", file=sys.stderr)
    report_result(result(results, args), args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
