"""Idle cost per table: what the engine spends refreshing tables that nothing writes to.

Issue 21 measured the operator's idle CPU growing with its tables (about 2 ms per table per
10 s refresh, on one GIL-bound core) and its engine loop stalling on the first refresh of many
tables. This benchmark measures the part of that the engine owns, in-process: ``--tables``
tables (default 1,000 and 10,000) in one SQL catalog (SQLite), one small file each, applied to
one ``OptimizingEngine`` that refreshes every table at every tick (refresh interval 0), with
the maintenance jobs off (each loads its table about once an hour; the refresh, every 10 s,
is 360 times that).

Two engines, side by side in one run, each in a fresh child process:

- ``load``: every due table is loaded through the catalog at each refresh (floe before the
  metadata probe; here the same engine with the probe turned off);
- ``probe``: floe now: one query for the metadata locations of all the catalog's tables, and
  only the tables whose metadata moved are loaded (`floe.tables.metadata_probe`).

Measured per engine: the first refresh (every table loaded, scanned and evaluated: wall and
CPU), then ``--rounds`` idle refreshes: CPU per table per refresh, and per table per hour at
the operator's 10 s refresh; the wall time of one idle refresh (the engine loop does nothing
else meanwhile); table loads and catalog probes per table per hour; peak RSS. The catalogs are
made once and kept under ``--dir``.

Run: ``.venv/bin/python bench/catalog_scale.py [--tables 1000,10000]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "operator")]

from harness.cli import benchmark_parser  # noqa: E402
from harness.machine import load_average  # noqa: E402
from harness.report import command_line, emit, markdown_table, times  # noqa: E402

ENGINES = ("load", "probe")
REFRESH_INTERVAL_S = 10.0
"""The operator's default table refresh interval: an hour is 360 refreshes."""
MAINTENANCE_OFF = {
    job: {"enabled": False} for job in ("snapshotRetention", "orphanFiles", "manifests", "danglingDeletes")
}


def _catalog_properties(directory: Path) -> dict[str, str]:
    return {
        "type": "sql",
        "uri": f"sqlite:///{directory}/catalog.db",
        "warehouse": (directory / "wh").as_uri(),
    }


def make_catalog(directory: Path, tables: int) -> dict[str, str]:
    """The catalog of `tables` tables with one small file each, made once (kept under `directory`)."""
    properties = _catalog_properties(directory)
    done = directory / "done"
    if done.exists():
        return properties
    from pyiceberg.catalog.sql import SqlCatalog

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "catalog.db").unlink(missing_ok=True)
    catalog = SqlCatalog("lake", **{k: v for k, v in properties.items() if k != "type"})
    catalog.create_namespace("db")
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array([str(i) for i in range(100)])})
    started = time.perf_counter()
    for index in range(tables):
        catalog.create_table(f"db.t{index:05d}", rows.schema).append(rows)
    print(f"made {tables} tables in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    done.write_text(str(tables))
    return properties


def measure(engine_name: str, tables: int, properties: dict[str, str], rounds: int) -> dict[str, Any]:
    """One engine over the catalog's tables, in this (fresh) process."""
    from floe.api.models import OptimizedTable, OptimizerGroup
    from floe.service import engine as engine_module
    from floe.service.engine import OptimizingEngine
    from floe.service.task_service import TaskService

    if engine_name == "load":
        engine_module.metadata_locations = lambda catalog: None  # type: ignore[assignment]
    engine = OptimizingEngine(TaskService(clock=time.time), refresh_interval_s=0.0)
    group = {"apiVersion": "floe.dev/v1alpha1", "kind": "OptimizerGroup", "metadata": {"name": "default"}}
    engine.apply_group(OptimizerGroup.model_validate(group))
    for index in range(tables):
        manifest = {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": f"t{index:05d}"},
            "spec": {
                "table": f"db.t{index:05d}",
                "catalog": {"name": "lake", "properties": properties},
                "maintenance": MAINTENANCE_OFF,
            },
        }
        engine.apply_table(OptimizedTable.model_validate(manifest))
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        engine.tick()
        first = {"first_wall_s": time.perf_counter() - wall, "first_cpu_s": time.process_time() - cpu}
        loads, probes = engine.table_loads, engine.catalog_probes
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(rounds):
            engine.tick()
        idle_cpu, idle_wall = time.process_time() - cpu, time.perf_counter() - wall
        refreshes = rounds * tables
        per_hour = 3600.0 / REFRESH_INTERVAL_S / refreshes
        errors = [r.last_error for r in engine.runtimes.values() if r.last_error]
        assert not errors, errors[:3]
        return {
            **first,
            "cpu_ms_per_refresh": idle_cpu / refreshes * 1000,
            "cpu_ms_per_table_hour": idle_cpu * per_hour * 1000,
            "idle_refresh_wall_s": idle_wall / rounds,
            "loads_per_table_hour": (engine.table_loads - loads) * per_hour,
            "probes_per_hour": (engine.catalog_probes - probes) * 3600.0 / REFRESH_INTERVAL_S / rounds,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    finally:
        engine.close()


def report(results: dict[int, dict[str, dict[str, Any]]], rounds: int) -> str:
    """The results section."""
    rows = []
    for tables, by_engine in results.items():
        for name, r in by_engine.items():
            rows.append(
                [
                    f"{tables:,}",
                    name,
                    f"{r['first_wall_s']:.1f}",
                    f"{r['cpu_ms_per_refresh']:.3f}",
                    f"{r['cpu_ms_per_table_hour']:.1f}",
                    f"{r['idle_refresh_wall_s']:.2f}",
                    f"{r['loads_per_table_hour']:.0f}",
                    f"{r['probes_per_hour']:.0f}",
                    f"{r['peak_rss_mib']:.0f}",
                ]
            )
    table = markdown_table(
        [
            "tables",
            "engine",
            "first refresh s",
            "idle CPU ms / table / refresh",
            "idle CPU ms / table / hour (target <= 18)",
            "idle refresh wall s",
            "loads / table / hour",
            "catalog probes / hour",
            "peak RSS MiB",
        ],
        rows,
    )
    ratios = markdown_table(
        ["tables", "idle CPU per table, load / probe", "idle refresh wall, load / probe"],
        [
            [
                f"{tables:,}",
                times(e["load"]["cpu_ms_per_refresh"], e["probe"]["cpu_ms_per_refresh"]),
                times(e["load"]["idle_refresh_wall_s"], e["probe"]["idle_refresh_wall_s"]),
            ]
            for tables, e in results.items()
            if {"load", "probe"} <= set(e)
        ],
    )
    return (
        "## Idle cost per table: refreshes of tables nothing writes to\n\n"
        f"Command: `{command_line()}`. Load average at the end: {load_average()}.\n\n"
        f"One SQL catalog (SQLite), one small file per table; one in-process engine refreshing every "
        f"table at each tick, maintenance off; {rounds} idle refreshes after the first. Per hour: at the "
        f"operator's {REFRESH_INTERVAL_S:.0f} s refresh.\n\n{table}\n\n{ratios}\n"
    )


def main() -> int:
    parser = benchmark_parser(__doc__ or "", "catalog-scale")
    parser.add_argument("--tables", default="1000,10000", help="comma-separated table counts")
    parser.add_argument("--rounds", type=int, default=5, help="idle refreshes measured")
    parser.add_argument(
        "--engines", default=",".join(ENGINES), help=f"comma-separated, from {', '.join(ENGINES)}"
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("ENGINE", "TABLES", "CATALOG_DIR"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        name, tables, directory = args.child[0], int(args.child[1]), Path(args.child[2])
        print(json.dumps(measure(name, tables, _catalog_properties(directory), args.rounds)))
        return 0
    results: dict[int, dict[str, dict[str, Any]]] = {}
    for tables in (int(t) for t in args.tables.split(",")):
        directory = args.dir / f"tables-{tables}"
        make_catalog(directory, tables)
        for name in args.engines.split(","):
            command = [
                sys.executable,
                __file__,
                "--rounds",
                str(args.rounds),
                "--child",
                name,
                str(tables),
                str(directory),
            ]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            results.setdefault(tables, {})[name] = json.loads(out.strip().splitlines()[-1])
            print(f"{tables} tables, {name}: {results[tables][name]}", file=sys.stderr)
    emit(report(results, args.rounds), args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
