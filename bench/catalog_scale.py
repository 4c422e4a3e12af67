"""Idle cost per table: what the operator's engine loop spends on tables nothing writes to.

Issue 21 measured the operator's idle CPU growing with its tables (about 2 ms per table per
10 s refresh, on one GIL-bound core) and its engine loop stalling on the first refresh of many
tables. This benchmark measures the operator's loop in-process, without Kubernetes:
``--tables`` tables (default 1,000 and 10,000) in one SQL catalog (SQLite), one small file
each, applied to one ``OptimizingEngine``, maintenance jobs off (each loads its table about
once an hour; the refresh, every 10 s, is 360 times that).

Two sides, each in a fresh child process: ``before``, floe at ``--before`` (a git revision,
extracted once), and ``after``, this checkout. Each measures:

- refresh: the first refresh (every table loaded, scanned and evaluated: its wall time, the
  engine rounds it took and the longest of them, during which nothing else is done), then
  ``--rounds`` refreshes of every table (refresh interval 0): CPU per table per refresh and
  per table per hour at the operator's 10 s, the wall time of one (the engine loop does
  nothing else meanwhile), table loads and catalog probes per table per hour;
- loop: the operator's loop as ``floe operator`` runs it, for ``--loop-seconds`` after the
  first refresh and a warm-up: ``engine.tick()`` every second (tables refreshed every 10 s)
  and the status flush every 5 s into a stand-in for the API server that counts patches: CPU
  as a share of one core and per table per hour (issue 21's targets at 10,000 tables: <= 5 %
  of a core, <= 18 ms per table per hour), status patches per second;
- peak RSS of the process.

``--catalog rest`` puts the same tables in Iceberg's REST catalog server (1.11, JDBC on SQLite,
tables on moto's S3; both on loopback, made afresh each run), which answers a load with an ETag
and a repeated load with 304 Not Modified; ``--snapshots`` gives its tables a history (the load
a 304 saves grows with it); ``before`` then defaults to the last revision that loaded every REST
table at every refresh.

Not measured: kopf and the API server around the loop, maintenance.
Run: ``.venv/bin/python bench/catalog_scale.py [--tables 1000,10000] [--catalog rest]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.small_tables import catalog_properties, fill_catalog, make_catalog

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

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
    from floe.api.group import OptimizerGroup
    from floe.api.models import OptimizedTable
    from floe.controller.status import TableStatusFlusher
    from floe.kit.redaction import Redactor
    from floe.optimizing.engine import OptimizingEngine
    from floe.service.task_service import TaskService

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


def _revision_source(revision: str, work_dir: Path) -> Path:
    """floe's operator package at `revision`, extracted once from git."""
    commit = subprocess.check_output(["git", "-C", str(REPO), "rev-parse", revision], text=True).strip()
    target = work_dir / f"src-{commit[:12]}"
    if not (target / "operator").is_dir():
        work_dir.mkdir(parents=True, exist_ok=True)
        archive = work_dir / f"{commit[:12]}.tar"
        subprocess.run(
            ["git", "-C", str(REPO), "archive", "-o", str(archive), commit, "operator"], check=True
        )
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        archive.unlink()
    return target


def report(results: dict[int, dict[str, dict[str, Any]]], args: argparse.Namespace, command: str) -> str:
    """The results section."""
    from harness.machine import load_average
    from harness.report import markdown_table, times

    rows = [
        [
            f"{tables:,}",
            side,
            f"{r['first_wall_s']:.1f}",
            f"{r.get('first_rounds', 1)}",
            f"{r.get('first_longest_round_s', r['first_wall_s']):.1f}",
            f"{r['cpu_ms_per_table_hour']:.1f}",
            f"{r['idle_refresh_wall_s']:.2f}",
            f"{r['loads_per_table_hour']:.0f}",
            f"{r.get('not_modified_per_table_hour', 0):.0f}",
            f"{r['probes_per_hour']:.0f}",
            f"{r['loop_core_percent']:.1f}",
            f"{r['loop_ms_per_table_hour']:.1f}",
            f"{r['loop_patches_per_s']:.1f}",
            f"{r['peak_rss_mib']:.0f}",
        ]
        for tables, by_side in results.items()
        for side, r in by_side.items()
    ]
    headers = [
        "tables",
        "floe",
        "first refresh s",
        "its rounds",
        "longest round s",
        "refresh CPU ms / table / hour",
        "one refresh s",
        "loads / table / hour",
        "304s / table / hour",
        "catalog probes / hour",
        "loop CPU % of a core (target <= 5)",
        "loop CPU ms / table / hour (target <= 18)",
        "status patches / s",
        "peak RSS MiB",
    ]
    ratios = markdown_table(
        ["tables", "refresh CPU, before / after", "one refresh, before / after", "loop CPU, before / after"],
        [
            [
                f"{tables:,}",
                times(s["before"]["cpu_ms_per_table_hour"], s["after"]["cpu_ms_per_table_hour"]),
                times(s["before"]["idle_refresh_wall_s"], s["after"]["idle_refresh_wall_s"]),
                times(s["before"]["loop_core_percent"], s["after"]["loop_core_percent"]),
            ]
            for tables, s in results.items()
            if set(SIDES) <= set(s)
        ],
    )
    return (
        "## 7. Idle cost per table: the engine loop over tables nothing writes to\n\n"
        f"Command: `{command}`. Load average at the end: {load_average()}.\n\n"
        f"{CATALOGS[args.catalog]}, {args.snapshots} snapshot(s) of one small file per table, "
        "maintenance off; in-process, no "
        f"Kubernetes. before: floe at `{args.before}`; after: this checkout. Refresh: {args.rounds} "
        f"refreshes of every table after the first, per hour at the operator's "
        f"{REFRESH_INTERVAL_S:.0f} s. Loop: the engine round every {TICK_S:.0f} s and the status flush "
        f"every {FLUSH_S:.0f} s for {args.loop_seconds:.0f} s after {WARMUP_S:.0f} s of warm-up.\n\n"
        f"{markdown_table(headers, rows)}\n\n{ratios}\n"
    )


CATALOGS = {
    "sql": "One SQL catalog (SQLite)",
    "rest": "One REST catalog (Iceberg 1.11's server, JDBC on SQLite, tables on moto's S3, on loopback)",
}


@contextmanager
def tables_catalog(kind: str, directory: Path, tables: int, snapshots: int) -> Iterator[dict[str, str]]:
    """The pyiceberg properties of a catalog of `tables` small tables, for the time it is used:
    the SQL catalog (one snapshot per table) is made once and kept; the REST one (its S3 is in
    memory) is made each run, with `snapshots` snapshots per table."""
    if kind == "sql":
        make_catalog(directory, tables)
        yield catalog_properties(directory)
        return
    sys.path.insert(0, str(REPO / "tests"))
    from rest_s3 import rest_s3_stack

    directory.mkdir(parents=True, exist_ok=True)
    with rest_s3_stack("127.0.0.1", directory) as stack:
        fill_catalog(stack.client("lake"), tables, snapshots)
        yield stack.properties


def main() -> int:
    sys.path.insert(0, str(BENCH))
    from harness.cli import benchmark_parser
    from harness.report import command_line, emit

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
                source = _revision_source(args.before, args.dir) if side == "before" else REPO
                child = [
                    str(source / "operator"),
                    tables,
                    json.dumps(properties),
                    args.rounds,
                    args.loop_seconds,
                ]
                code = (
                    "import json, sys; sys.path.insert(0, sys.argv[1]); "
                    f"sys.path.insert(1, {str(BENCH)!r}); import catalog_scale as c; "
                    "print(json.dumps(c.measure(int(sys.argv[2]), json.loads(sys.argv[3]), "
                    "int(sys.argv[4]), float(sys.argv[5]))))"
                )
                out = subprocess.run(
                    [sys.executable, "-c", code, *map(str, child)], check=True, capture_output=True, text=True
                ).stdout
                results.setdefault(tables, {})[side] = json.loads(out.strip().splitlines()[-1])
                print(f"{tables} tables, {side}: {results[tables][side]}", file=sys.stderr)
    emit(report(results, args, command_line()), args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
