"""The operator at scale on a real control plane: 1,000 and 10,000 tables from one manifest.

What a user runs, ``floe operator`` (kopf, the engine, the status flush), as its own process
against the test control plane (`harness.control_plane`); `catalog_scale.py` measures the
engine's loop alone, in-process. Per table count (``--tables``), in a namespace and with an
operator process of its own: a SQL catalog of that many one-file tables (`harness.small_tables`,
made once), one OptimizerGroup and one OptimizedTableSet selecting every table
(`harness.table_set`: floe's defaults, maintenance on, but a minor trigger of 2 files), and an
optimizer in this process running the tasks on Spark (`harness.first_tasks`). Measured:

- converging: from applying the manifests until every table has its OptimizedTable, a status,
  and is IDLE; API-server write requests per table meanwhile and the most in any 5 s window;
- idle, for ``--idle-seconds`` after ``--settle-seconds``: the operator's CPU (every thread) as
  a share of a core and per table per hour, the API server's and etcd's, status patches and
  writes a second, catalog calls per table per hour, maintenance runs, the operator's RSS;
- triggered: ``--triggers`` tables, one every ``--trigger-every`` s, each given one append: the
  time from that commit to the table's first task (p50 / p95), and the status changes the
  operator wrote for it until 15 s after its process committed;
- the operator's peak RSS over the whole run. The targets at 10,000 tables are `TARGETS`.
Run: ``.venv/bin/python bench/operator_scale.py [--tables 1000,10000]`` (about 11 minutes for
1,000 tables, 5 of them deleting the namespace at the end, and 20 for 10,000).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness.apiserver import WRITE_VERBS, ApiServer, WriteSampler, status_patches, writes
from harness.cli import benchmark_parser
from harness.control_plane import K8sCluster, control_plane, pid_of
from harness.cpu import process_cpu_seconds
from harness.first_tasks import bench_optimizer
from harness.operator_process import operator_process
from harness.percentiles import percentile
from harness.results import BenchResult, Figures, Target, new_result, report_result
from harness.small_tables import catalog_properties, make_catalog, table_name
from harness.table_set import GROUP, table_set_manifests
from harness.table_watch import TableWatch

BENCH = Path(__file__).resolve().parent
TARGETS = (
    ("operator idle CPU, % of a core", "idle_core_percent", "<= 5", 5.0, "{:.1f}"),
    ("operator idle CPU, ms / table / hour", "idle_ms_per_table_hour", "<= 18", 18.0, "{:.1f}"),
    ("status patches / s, idle", "idle_status_patches_per_s", "<= 20", 20.0, "{:.2f}"),
    ("trigger to first task p95, s", "trigger_to_task_p95_s", "<= 30", 30.0, "{:.1f}"),
    ("status changes per optimizing process, mean", "status_changes_per_process", "<= 2", 2.0, "{:.1f}"),
    ("operator peak RSS, MiB", "peak_rss_mib", "<= 2048", 2048.0, "{:.0f}"),
)
"""(what, figure, goal, limit, format): each figure must be at most its limit."""
FIGURES = (
    (
        "Converging, from applying the group and the set",
        (
            ("tables", "tables", "{:,}"),
            ("all have an OptimizedTable s", "created_s", "{:.0f}"),
            ("all have status s", "status_s", "{:.0f}"),
            ("all IDLE s", "idle_s", "{:.0f}"),
            ("writes per table", "converge_writes_per_table", "{:.1f}"),
            ("status patches per table", "converge_status_patches_per_table", "{:.1f}"),
            ("peak writes / s (5 s window)", "converge_peak_writes_per_s", "{:.0f}"),
            ("RSS MiB then", "rss_after_converging_mib", "{:.0f}"),
        ),
    ),
    (
        "Idle",
        (
            ("tables", "tables", "{:,}"),
            ("operator CPU % of a core", "idle_core_percent", "{:.1f}"),
            ("ms / table / hour", "idle_ms_per_table_hour", "{:.1f}"),
            ("API server CPU %", "idle_apiserver_core_percent", "{:.1f}"),
            ("etcd CPU %", "idle_etcd_core_percent", "{:.1f}"),
            ("writes / s", "idle_writes_per_s", "{:.2f}"),
            ("status patches / s", "idle_status_patches_per_s", "{:.2f}"),
            ("table loads / table / hour", "idle_loads_per_table_hour", "{:.2f}"),
            ("catalog probes / hour", "idle_probes_per_hour", "{:.0f}"),
            ("maintenance runs in the window", "idle_maintenance_runs", "{:.0f}"),
            ("RSS MiB", "idle_rss_mib", "{:.0f}"),
        ),
    ),
    (
        "Triggered",
        (
            ("tables", "tables", "{:,}"),
            ("triggered", "triggered", "{}"),
            ("trigger to first task p50 s", "trigger_to_task_p50_s", "{:.1f}"),
            ("p95 s", "trigger_to_task_p95_s", "{:.1f}"),
            ("max s", "trigger_to_task_max_s", "{:.1f}"),
            ("status changes per process, mean", "status_changes_per_process", "{:.1f}"),
            ("max", "status_changes_per_process_max", "{}"),
            ("operator peak RSS MiB", "peak_rss_mib", "{:.0f}"),
        ),
    ),
)
"""The tables of figures: (title, columns), each column (header, figure, format)."""
AFTER_COMMIT_S = 15.0
"""How long after a triggered table's process committed its status changes still count."""


def measure(cluster: K8sCluster, spark: Any, tables: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure for `tables` tables (see the module docstring)."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    namespace = f"scale-{tables}"
    work = args.dir / namespace
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # The catalog is made once and shared with catalog_scale.py (its files name their absolute
    # paths, so it is not copied): the triggered tables get one file more, compacted away again.
    kept = args.catalogs / f"tables-{tables}"
    make_catalog(kept, tables)
    properties = catalog_properties(kept)
    catalog = SqlCatalog("lake", **{k: v for k, v in properties.items() if k != "type"})

    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("create", "serviceaccount", "floe-driver", "-n", namespace)
    api = ApiServer(cluster)
    apiserver, etcd = pid_of(cluster, "kube-apiserver"), pid_of(cluster, "etcd")
    watch = TableWatch(namespace)
    watch.start()
    out: dict[str, Any] = {"tables": tables}
    with operator_process(cluster, namespace, work) as operator, WriteSampler(api) as sampler:
        optimizer, first_tasks = bench_optimizer(spark, operator.port, f"{namespace}/{GROUP}", operator.token)
        # -- converging
        before = api.requests()
        started = time.monotonic()
        manifests = {"apiVersion": "v1", "kind": "List", "items": table_set_manifests(namespace, properties)}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifests))
        optimizer.start()
        budget = 600 + tables / 10
        created = operator.until("every OptimizedTable", lambda: watch.known() >= tables, budget)
        with_status = operator.until(
            "every table's status", lambda: watch.count(lambda s: bool(s.get("state"))) >= tables, budget
        )
        idle = operator.until(
            "every table IDLE after its first refresh",
            lambda: (
                watch.count(lambda s: s.get("state") == "IDLE" and s.get("snapshotId") is not None) >= tables
            ),
            budget,
        )
        converged = api.requests()
        out |= {
            "created_s": created - started,
            "status_s": with_status - started,
            "idle_s": idle - started,
            "converge_writes_per_table": (writes(converged) - writes(before)) / tables,
            "converge_status_patches_per_table": (status_patches(converged) - status_patches(before))
            / tables,
            "converge_peak_writes_per_s": sampler.peak_per_s(started, idle),
            "rss_after_converging_mib": operator.rss_mib(),
        }
        print(f"{tables} tables converged: {out}", file=sys.stderr)

        # -- idle
        time.sleep(args.settle_seconds)
        operator.alive()
        requests, calls = api.requests(), operator.metrics()
        pid = operator.process.pid
        cpu = {p: process_cpu_seconds(p) for p in (pid, apiserver, etcd)}
        window = time.monotonic()
        time.sleep(args.idle_seconds)
        operator.alive()
        window = time.monotonic() - window
        used = {p: process_cpu_seconds(p) - cpu[p] for p in cpu}
        requests_after, calls_after = api.requests(), operator.metrics()

        def called(kind: str) -> float:
            return calls_after.get(kind, 0) - calls.get(kind, 0)

        idle_writes = Counter(
            {key: n - requests[key] for key, n in requests_after.items() if key[0] in WRITE_VERBS}
        )
        per_table_hour = 3600.0 / window / tables
        out |= {
            "idle_core_percent": used[pid] / window * 100,
            "idle_ms_per_table_hour": used[pid] * 1000 * per_table_hour,
            "idle_apiserver_core_percent": used[apiserver] / window * 100,
            "idle_etcd_core_percent": used[etcd] / window * 100,
            "idle_writes_per_s": (writes(requests_after) - writes(requests)) / window,
            "idle_status_patches_per_s": (status_patches(requests_after) - status_patches(requests)) / window,
            "idle_loads_per_table_hour": called("catalog_load") * per_table_hour,
            "idle_probes_per_hour": called("catalog_probe") * 3600.0 / window,
            "idle_maintenance_runs": called("maintenance_runs"),
            "idle_rss_mib": operator.rss_mib(),
            "idle_writes_by_request": {
                " ".join(part for part in key if part): n for key, n in idle_writes.most_common(5) if n
            },
        }
        print(f"{tables} tables idle: {out}", file=sys.stderr)

        # -- triggered
        step = max(1, tables // args.triggers)
        chosen = [index * step for index in range(args.triggers)]
        rows = pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array([str(i) for i in range(10)])})
        committed: dict[str, float] = {}
        patches_before = status_patches(api.requests())
        for index in chosen:
            catalog.load_table(table_name(index)).append(rows)
            committed[table_name(index)] = time.monotonic()  # also its OptimizedTable's name
            time.sleep(args.trigger_every)
        names = list(committed)

        def optimized(name: str) -> bool:
            status = watch.status.get(name, {})
            return status.get("state") == "IDLE" and "committed" in (status.get("lastResult") or "")

        operator.until("every triggered table optimized", lambda: all(optimized(n) for n in names), 600)
        time.sleep(AFTER_COMMIT_S)
        patches_after = status_patches(api.requests())
        optimizer.stop(grace_s=10)
        latencies = sorted(first_tasks.started[n] - committed[n] for n in names if n in first_tasks.started)
        per_process = [sum(1 for when, _ in watch.changes.get(n, []) if when >= committed[n]) for n in names]
        out |= {
            "triggered": len(names),
            "trigger_to_task_p50_s": statistics.median(latencies),
            "trigger_to_task_p95_s": percentile(latencies, 0.95),
            "trigger_to_task_max_s": latencies[-1],
            "status_changes_per_process": statistics.mean(per_process),
            "status_changes_per_process_max": max(per_process),
            "status_patches_triggered": patches_after - patches_before,
            "peak_rss_mib": operator.rss_mib("VmHWM"),
        }
        watch.stop()
        # While the operator still runs: it removes its finalizers from the tables, and the next
        # table count is not measured beside a namespace that cannot go away.
        cluster.kubectl("delete", "namespace", namespace, "--timeout=300s", check=False, timeout=360)
    print(f"{tables} tables: {out}", file=sys.stderr)
    return out


def result(results: list[dict[str, Any]], args: argparse.Namespace) -> BenchResult:
    """The result: converging, idle and triggered, one row per table count, and the targets at each."""
    figures = [
        Figures(
            title,
            [header for header, _, _ in columns],
            [[form.format(r[key]) for _, key, form in columns] for r in results],
        )
        for title, columns in FIGURES
    ]
    targets = []
    for r in results:
        at = f"{r['tables']:,} tables"
        for what, key, goal, limit, form in TARGETS:
            targets.append(Target(f"{what}, {at}", goal, form.format(r[key]), r[key] <= limit))
    return new_result(
        "operator_scale",
        "The operator at scale",
        "What `floe operator` costs with thousands of tables from one OptimizedTableSet, run as its own "
        "process against a real control plane (kube-apiserver, etcd, kwok): converging, idle CPU and "
        "memory, API writes, and how soon a triggered table gets its first task.",
        targets=targets,
        figures=figures,
        notes=[
            "One OptimizedTableSet selects every table of one SQL catalog (SQLite, one small file per "
            "table), floe's defaults (maintenance on) but a minor trigger of 2 files; an optimizer with "
            "2 threads runs the tasks on Spark in the benchmark's process. Idle: "
            f"{args.idle_seconds:.0f} s, {args.settle_seconds:.0f} s after every table was IDLE. "
            f"Triggered: {args.triggers} tables, one commit every {args.trigger_every:g} s; a status "
            "change is one status patch the operator sent for the table, from its commit until "
            f"{AFTER_COMMIT_S:.0f} s after its process committed.",
        ],
    )


def main() -> int:
    """Parse arguments, start the control plane and Spark, and measure each table count."""
    parser = benchmark_parser(__doc__ or "", "operator-scale")
    parser.add_argument("--tables", default="1000,10000", help="comma-separated table counts")
    parser.add_argument("--idle-seconds", type=float, default=120.0, help="how long idle is measured")
    parser.add_argument("--settle-seconds", type=float, default=30.0, help="wait after converging")
    parser.add_argument("--triggers", type=int, default=30, help="tables given a triggering commit")
    parser.add_argument("--trigger-every", type=float, default=2.0, help="seconds between two of them")
    parser.add_argument(
        "--catalogs", type=Path, default=BENCH / ".work" / "catalog-scale", help="where the catalogs are kept"
    )
    args = parser.parse_args()
    from floe_optimizer.runner import start_spark

    with control_plane(args.dir) as cluster:
        spark = start_spark("local[2]", 2)
        try:
            results = [measure(cluster, spark, int(t), args) for t in args.tables.split(",")]
        finally:
            spark.stop()
    report_result(result(results, args), args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
