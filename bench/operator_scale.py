"""The operator at scale on a real control plane: 1,000 and 10,000 tables, as users apply them.

What a user runs, ``floe operator`` (kopf, the engine, the status flush), as its own process
against the test control plane (`harness.control_plane`); `catalog_scale.py` measures the
engine's loop alone, in-process. Per table count (``--tables``), in a namespace and with an
operator process of its own: a SQL catalog of that many one-file tables (`harness.small_tables`,
made once), one OptimizerGroup and, per shape (``--shapes``), one OptimizedTableSet selecting
every table (``set``) or one OptimizedTable per table (``tables``) (`harness.table_set`: floe's
defaults, maintenance on, but a minor trigger of 2 files), and an
optimizer in this process running the tasks on Spark (`harness.first_tasks`). Measured:

- converging: from applying the manifests until every table has its OptimizedTable, a status,
  and is IDLE; API-server write requests per table meanwhile and the most in any 5 s window;
- idle, for ``--idle-seconds`` after ``--settle-seconds``: the operator's CPU (every thread) as
  a share of a core and per table per hour (and in its busiest minute: with
  ``--settle-seconds 0 --idle-seconds 3600``, the first hour from convergence on), the API
  server's and etcd's, status patches and
  writes a second, catalog calls per table per hour, maintenance runs, the operator's RSS;
- triggered: ``--triggers`` tables, one every ``--trigger-every`` s, each given one append: the
  time from that commit to the table's first task (p50 / p95), and the status changes the
  operator wrote for it until 15 s after its process committed;
- the operator's peak RSS over the whole run. The targets are `harness.operator_scale_report.TARGETS`,
  each against the worst run recorded: ``--record`` also writes every run's figures to
  ``bench/results/operator_scale_runs.json``, where a run replaces only the one of its table count
  and shape, so each can be measured by its own command.
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
from harness.cpu import minute_cpu_shares, process_cpu_seconds
from harness.first_tasks import bench_optimizer
from harness.operator_process import operator_process
from harness.operator_scale_report import AFTER_COMMIT_S, RUNS_FILE, recorded_runs, result
from harness.percentiles import percentile
from harness.results import provenance, report_result
from harness.small_tables import catalog_properties, make_catalog, table_name
from harness.table_set import GROUP, SHAPES, group_manifest, table_manifests, table_set_manifests
from harness.table_watch import TableWatch

BENCH = Path(__file__).resolve().parent


def measure(
    cluster: K8sCluster, spark: Any, tables: int, shape: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Every figure for `tables` tables applied in `shape` (see the module docstring)."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    namespace = f"scale-{shape}-{tables}"
    work = args.dir / namespace
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # The catalog is made once and shared with catalog_scale.py (its files name their absolute
    # paths, so it is not copied): the triggered tables get one file more, compacted away again.
    kept = args.catalogs / f"tables-{tables}"
    make_catalog(kept, tables)
    properties = catalog_properties(kept)
    catalog = SqlCatalog("lake", **{k: v for k, v in properties.items() if k != "type"})
    identifiers = [table_name(index) for index in range(tables)]

    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("create", "serviceaccount", "floe-driver", "-n", namespace)
    api = ApiServer(cluster)
    apiserver, etcd = pid_of(cluster, "kube-apiserver"), pid_of(cluster, "etcd")
    watch = TableWatch(namespace)
    watch.start()
    out: dict[str, Any] = {
        "tables": tables,
        "shape": shape,
        "settle_seconds": args.settle_seconds,
        "idle_seconds": args.idle_seconds,
        "triggers": args.triggers,
        "trigger_every": args.trigger_every,
    }
    with operator_process(cluster, namespace, work) as operator, WriteSampler(api) as sampler:
        optimizer, first_tasks = bench_optimizer(spark, operator.port, f"{namespace}/{GROUP}", operator.token)
        # -- converging
        before = api.requests()
        started = time.monotonic()
        if shape == "set":
            items = table_set_manifests(namespace, properties)
        else:
            items = [group_manifest(namespace), *table_manifests(namespace, properties, identifiers)]
        # kubectl creates a List's objects one by one, as it applies a directory of manifests.
        manifests = {"apiVersion": "v1", "kind": "List", "items": items}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifests), timeout=600 + tables / 10)
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
        minutes = minute_cpu_shares(pid, args.idle_seconds)
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
            "idle_busiest_minute_core_percent": max(minutes, default=0.0),
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


def main() -> int:
    """Parse arguments, start the control plane and Spark, and measure each table count."""
    parser = benchmark_parser(__doc__ or "", "operator-scale")
    parser.add_argument("--tables", default="1000,10000", help="comma-separated table counts")
    parser.add_argument(
        "--shapes",
        default="set",
        help=f"comma-separated shapes the tables are applied in: {', '.join(SHAPES)}",
    )
    parser.add_argument("--idle-seconds", type=float, default=120.0, help="how long idle is measured")
    parser.add_argument("--settle-seconds", type=float, default=30.0, help="wait after converging")
    parser.add_argument("--triggers", type=int, default=30, help="tables given a triggering commit")
    parser.add_argument("--trigger-every", type=float, default=2.0, help="seconds between two of them")
    parser.add_argument(
        "--catalogs", type=Path, default=BENCH / ".work" / "catalog-scale", help="where the catalogs are kept"
    )
    args = parser.parse_args()
    shapes = args.shapes.split(",")
    if unknown := sorted(set(shapes) - set(SHAPES)):
        parser.error(f"--shapes: unknown {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    from floe_optimizer.runner import start_spark

    made = provenance()
    with control_plane(args.dir) as cluster:
        spark = start_spark("local[2]", 2)
        try:
            runs = [
                measure(cluster, spark, int(t), shape, args) | made
                for t in args.tables.split(",")
                for shape in shapes
            ]
        finally:
            spark.stop()
    if args.record:
        runs = recorded_runs(runs)
        RUNS_FILE.write_text(json.dumps(runs, indent=2) + "\n")
    report_result(result(runs), args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
