"""The operator at scale on a real control plane: 1,000 and 10,000 tables from one manifest.

Issue 21's targets at 10,000 tables: operator RSS <= 2 GiB, idle CPU <= 5 % of a core (<= 18 ms
per table per hour), <= 20 status writes a second, <= 2 status patches per optimizing process,
trigger-to-task p95 <= 30 s. `catalog_scale.py` measures the engine's loop alone, in-process;
this benchmark measures what a user runs: ``floe operator`` (kopf, the engine, the status
flush), as its own process, against the test control plane of `tests/k8s/conftest.py`
(etcd, kube-apiserver, controller-manager, scheduler, kwok), built by
``scripts/k8s-test-env/build.sh``.

Per table count (``--tables``), in a namespace of its own and with an operator process of its own:

- a SQL catalog (SQLite) of that many tables, one small file each (`harness.small_tables`, made
  once, shared with `catalog_scale.py`);
- one OptimizerGroup (its pods on the kwok node) and one OptimizedTableSet selecting every
  table, with the catalog's properties inline; every setting at floe's defaults but the minor
  trigger (2 files: one more small file triggers a table), maintenance on;
- an optimizer in this process: floe's `Optimizer` running the tasks as Spark jobs (local mode),
  registered with the operator's task service like a driver pod's.

Measured:

- converging: from applying the two manifests until every table has its OptimizedTable, until
  each has a status, until each is IDLE; API-server write requests per table meanwhile, and the
  most in any 5 s window (from ``apiserver_request_total``);
- idle, for ``--idle-seconds`` after converging and ``--settle-seconds``: the operator's CPU (its
  process, every thread) as a share of a core and per table per hour, the API server's and
  etcd's CPU beside it, status patches and all write requests a second, catalog calls per table
  per hour (``floe_catalog_calls_total``), maintenance runs (first runs spread over each job's
  interval, so the first hour has them), the operator's RSS;
- triggered: ``--triggers`` tables, one every ``--trigger-every`` s, each gets one append (the
  triggering commit); per table, the time from that commit to its first task starting on the
  optimizer (p50 / p95), and the status changes the operator wrote for it from the commit
  until its process committed and 15 s more (a watch on the OptimizedTables sees each);
- the operator's peak RSS over the whole run.

Run: ``.venv/bin/python bench/operator_scale.py [--tables 1000,10000]`` (about 11 minutes for
1,000 tables, 5 of them deleting the namespace at the end, and 20 for 10,000).
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(BENCH), str(REPO / "tests")]  # harness, and the test control plane

import yaml  # noqa: E402
from harness.cli import benchmark_parser  # noqa: E402
from harness.cpu import process_cpu_seconds  # noqa: E402
from harness.machine import load_average  # noqa: E402
from harness.report import command_line, emit, markdown_table  # noqa: E402
from harness.small_tables import catalog_properties, make_catalog, table_name  # noqa: E402
from k8s.conftest import BUILD_SCRIPT, FAKE_NODE_TAINT, K8sCluster, _free_ports, start_cluster  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

GROUP = "lake"
WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE"}
SAMPLE_S = 5.0
"""How often the API server's request counters are sampled: the window of the peak write rate."""
AFTER_COMMIT_S = 15.0
"""How long after a triggered table's process committed its status changes still count."""
KWOK_TEMPLATE = {
    "tolerations": [{"key": FAKE_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"type": "kwok"},
}


# -- what is measured from outside the operator ------------------------------------------------


def _rss_mib(pid: int, field_name: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of process `pid`, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1]) / 1024
    return 0.0


class ApiServer:
    """The API server's own request counters (``apiserver_request_total``), read as its admin."""

    def __init__(self, cluster: K8sCluster) -> None:
        config = yaml.safe_load(cluster.kubeconfig.read_text())
        self._token = config["users"][0]["user"]["token"]
        self._url = f"{cluster.server}/metrics"
        ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
        self._tls = ssl.create_default_context(cadata=ca)

    def requests(self) -> Counter[tuple[str, str, str]]:
        """Requests so far by (verb, resource, subresource)."""
        request = urllib.request.Request(self._url, headers={"Authorization": f"Bearer {self._token}"})
        with urllib.request.urlopen(request, context=self._tls, timeout=30) as response:
            text = response.read().decode()
        counts: Counter[tuple[str, str, str]] = Counter()
        for family in text_string_to_metric_families(text):
            if family.name != "apiserver_request":
                continue
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    labels = sample.labels
                    key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
                    counts[key] += int(sample.value)
        return counts


def writes(counts: Counter[tuple[str, str, str]]) -> int:
    """Write requests among `counts`."""
    return sum(n for (verb, _, _), n in counts.items() if verb in WRITE_VERBS)


def status_patches(counts: Counter[tuple[str, str, str]]) -> int:
    """Patches of OptimizedTables' status among `counts`."""
    return counts[("PATCH", "optimizedtables", "status")]


class WriteSampler:
    """Samples the API server's write requests every `SAMPLE_S` seconds, for the peak rate."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WriteSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), writes(self.api.requests())))
            self._stop.wait(SAMPLE_S)

    def peak_per_s(self, since: float, until: float) -> float:
        """The most write requests a second in one sampling window between `since` and `until`."""
        inside = [(t, n) for t, n in self.samples if since <= t <= until]
        return max(((b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(inside)), default=0.0)


@dataclass
class TableWatch:
    """A watch on the namespace's OptimizedTables: each one's status, and when and what changed."""

    namespace: str
    status: dict[str, dict[str, Any]] = field(default_factory=dict)
    changes: dict[str, list[tuple[float, frozenset[str]]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        from kubernetes import client, watch

        api = client.CustomObjectsApi()
        version = ""
        while not self._stop.is_set():
            try:
                stream = watch.Watch().stream(
                    api.list_namespaced_custom_object,
                    "floe.dev",
                    "v1alpha1",
                    self.namespace,
                    "optimizedtables",
                    resource_version=version,
                    timeout_seconds=300,
                )
                for event in stream:
                    item = event["object"]
                    version = item["metadata"]["resourceVersion"]
                    self._seen(event["type"], item["metadata"]["name"], item.get("status") or {})
                    if self._stop.is_set():
                        return
            except Exception as exc:  # the API server went away, or the version expired (410)
                if self._stop.is_set():
                    return
                print(f"watch of {self.namespace}: {exc}; watching again", file=sys.stderr)
                version = ""  # a fresh list: unchanged tables are not counted as changes
                time.sleep(1.0)

    def _seen(self, kind: str, name: str, status: dict[str, Any]) -> None:
        now = time.monotonic()
        with self._lock:
            if kind == "DELETED":
                self.status.pop(name, None)
                return
            old = self.status.get(name, {})
            changed = frozenset(k for k in set(old) | set(status) if old.get(k) != status.get(k))
            self.status[name] = status
            if changed:
                self.changes.setdefault(name, []).append((now, changed))

    def count(self, ready: Callable[[dict[str, Any]], bool]) -> int:
        """How many tables' status satisfies `ready`."""
        with self._lock:
            return sum(1 for status in self.status.values() if ready(status))

    def known(self) -> int:
        with self._lock:
            return len(self.status)


class FirstTasks:
    """The optimizer's task runner, wrapped: when each table's first task started running."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.started: dict[str, float] = {}

    def run(self, spec: Any) -> Any:
        # The table's directory in the warehouse: .../db.db/t00042/data is db.t00042.
        *_, namespace, table, _ = spec.output_dir.rstrip("/").split("/")
        self.started.setdefault(f"{namespace.removesuffix('.db')}.{table}", time.monotonic())
        return self.runner.run(spec)

    def cancel(self) -> None:
        self.runner.cancel()


# -- one table count --------------------------------------------------------------------------------


def _manifests(namespace: str, properties: dict[str, str]) -> list[dict[str, Any]]:
    group = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizerGroup",
        "metadata": {"name": GROUP, "namespace": namespace},
        "spec": {
            "executors": 1,
            "executorCores": 2,
            "executorMemory": "2Gi",
            "executorTemplate": KWOK_TEMPLATE,
        },
    }
    table_set = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTableSet",
        "metadata": {"name": "lake", "namespace": namespace},
        "spec": {
            "catalog": {"name": "lake", "properties": properties},
            "include": ["db.*"],
            "group": GROUP,
            "template": {"minor": {"triggerFileCount": 2}},
        },
    }
    return [group, table_set]


@contextmanager
def operator_process(
    cluster: K8sCluster, namespace: str, work: Path
) -> Iterator[tuple[subprocess.Popen[bytes], int, str]]:
    """``floe operator`` for `namespace`, standalone, as its own process: (process, port, token)."""
    (port,) = _free_ports(1)
    token = "bench-" + namespace
    token_file = work / "registration-token"
    token_file.write_text(token)
    log = (work / "operator.log").open("wb")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "floe"),
            "operator",
            "--standalone",
            "--namespace",
            namespace,
            "--service-port",
            str(port),
            "--registration-token-file",
            str(token_file),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the operator did not start; see {work / 'operator.log'}") from None
                time.sleep(0.5)
        yield process, port, token
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def operator_metrics(port: int) -> dict[str, float]:
    """The operator's counters this benchmark reads: catalog calls by kind, maintenance runs."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "floe_catalog_calls_total":
                out[f"catalog_{sample.labels['kind']}"] += sample.value
            elif sample.name == "floe_maintenance_runs_total":
                out["maintenance_runs"] += sample.value
    return dict(out)


def measure(cluster: K8sCluster, spark: Any, tables: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure for `tables` tables (see the module docstring)."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from floe_optimizer.app import Optimizer
    from floe_optimizer.runner import SparkTaskRunner

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
    apiserver = next(p for p in cluster._processes if p.name == "kube-apiserver").popen.pid
    etcd = next(p for p in cluster._processes if p.name == "etcd").popen.pid
    watch = TableWatch(namespace)
    watch.start()
    out: dict[str, Any] = {"tables": tables}
    with operator_process(cluster, namespace, work) as (operator, port, token), WriteSampler(api) as sampler:

        def alive() -> None:
            cluster.check_running()
            if operator.poll() is not None:
                raise RuntimeError(
                    f"the operator exited with {operator.returncode}; see {work / 'operator.log'}"
                )

        def until(what: str, condition: Callable[[], bool], timeout_s: float) -> float:
            """`K8sCluster.wait_for`, the operator's process checked too: when `condition` came true."""
            cluster.wait_for(what, lambda: alive() or condition(), timeout=timeout_s, interval=1.0)
            return time.monotonic()

        first_tasks = FirstTasks(SparkTaskRunner(spark))
        optimizer = Optimizer(
            f"http://127.0.0.1:{port}",
            group=f"{namespace}/{GROUP}",
            threads=2,
            runner=first_tasks,
            name="bench",
            registration_token=token,
        )
        # -- converging
        before = api.requests()
        started = time.monotonic()
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {"apiVersion": "v1", "kind": "List", "items": _manifests(namespace, properties)}
            ),
        )
        optimizer.start()
        budget = 600 + tables / 10
        created = until("every OptimizedTable", lambda: watch.known() >= tables, budget)
        with_status = until(
            "every table's status", lambda: watch.count(lambda s: bool(s.get("state"))) >= tables, budget
        )
        idle = until(
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
            "rss_after_converging_mib": _rss_mib(operator.pid, "VmRSS"),
        }
        print(f"{tables} tables converged: {out}", file=sys.stderr)

        # -- idle
        time.sleep(args.settle_seconds)
        alive()
        requests, calls = api.requests(), operator_metrics(port)
        cpu = {pid: process_cpu_seconds(pid) for pid in (operator.pid, apiserver, etcd)}
        window = time.monotonic()
        time.sleep(args.idle_seconds)
        alive()
        window = time.monotonic() - window
        used = {pid: process_cpu_seconds(pid) - cpu[pid] for pid in cpu}
        requests_after, calls_after = api.requests(), operator_metrics(port)
        idle_writes = Counter(
            {key: n - requests[key] for key, n in requests_after.items() if key[0] in WRITE_VERBS}
        )
        per_table_hour = 3600.0 / window / tables
        out |= {
            "idle_core_percent": used[operator.pid] / window * 100,
            "idle_ms_per_table_hour": used[operator.pid] * 1000 * per_table_hour,
            "idle_apiserver_core_percent": used[apiserver] / window * 100,
            "idle_etcd_core_percent": used[etcd] / window * 100,
            "idle_writes_per_s": (writes(requests_after) - writes(requests)) / window,
            "idle_status_patches_per_s": (status_patches(requests_after) - status_patches(requests)) / window,
            "idle_loads_per_table_hour": (calls_after.get("catalog_load", 0) - calls.get("catalog_load", 0))
            * per_table_hour,
            "idle_probes_per_hour": (calls_after.get("catalog_probe", 0) - calls.get("catalog_probe", 0))
            * 3600.0
            / window,
            "idle_maintenance_runs": calls_after.get("maintenance_runs", 0)
            - calls.get("maintenance_runs", 0),
            "idle_rss_mib": _rss_mib(operator.pid, "VmRSS"),
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

        until("every triggered table optimized", lambda: all(optimized(n) for n in names), 600)
        time.sleep(AFTER_COMMIT_S)
        patches_after = status_patches(api.requests())
        optimizer.stop(grace_s=10)
        latencies = sorted(first_tasks.started[n] - committed[n] for n in names if n in first_tasks.started)
        per_process = [sum(1 for when, _ in watch.changes.get(n, []) if when >= committed[n]) for n in names]
        out |= {
            "triggered": len(names),
            "trigger_to_task_p50_s": statistics.median(latencies),
            "trigger_to_task_p95_s": latencies[max(0, round(0.95 * len(latencies)) - 1)],
            "trigger_to_task_max_s": latencies[-1],
            "status_changes_per_process": statistics.mean(per_process),
            "status_changes_per_process_max": max(per_process),
            "status_patches_triggered": patches_after - patches_before,
            "peak_rss_mib": _rss_mib(operator.pid, "VmHWM"),
        }
        watch.stop()
        # While the operator still runs: it removes its finalizers from the tables, and the next
        # table count is not measured beside a namespace that cannot go away.
        cluster.kubectl("delete", "namespace", namespace, "--timeout=300s", check=False, timeout=360)
    print(f"{tables} tables: {out}", file=sys.stderr)
    return out


# -- the report -------------------------------------------------------------------------------------


def report(results: list[dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    """The results section."""
    converging = markdown_table(
        [
            "tables",
            "all have an OptimizedTable s",
            "all have status s",
            "all IDLE s",
            "writes per table",
            "status patches per table",
            "peak writes / s (5 s window)",
            "RSS MiB then",
        ],
        [
            [
                f"{r['tables']:,}",
                f"{r['created_s']:.0f}",
                f"{r['status_s']:.0f}",
                f"{r['idle_s']:.0f}",
                f"{r['converge_writes_per_table']:.1f}",
                f"{r['converge_status_patches_per_table']:.1f}",
                f"{r['converge_peak_writes_per_s']:.0f}",
                f"{r['rss_after_converging_mib']:.0f}",
            ]
            for r in results
        ],
    )
    idle = markdown_table(
        [
            "tables",
            "operator CPU % of a core (target <= 5)",
            "ms / table / hour (target <= 18)",
            "API server CPU %",
            "etcd CPU %",
            "writes / s",
            "status patches / s (target <= 20)",
            "table loads / table / hour",
            "catalog probes / hour",
            "maintenance runs in the window",
            "RSS MiB",
        ],
        [
            [
                f"{r['tables']:,}",
                f"{r['idle_core_percent']:.1f}",
                f"{r['idle_ms_per_table_hour']:.1f}",
                f"{r['idle_apiserver_core_percent']:.1f}",
                f"{r['idle_etcd_core_percent']:.1f}",
                f"{r['idle_writes_per_s']:.2f}",
                f"{r['idle_status_patches_per_s']:.2f}",
                f"{r['idle_loads_per_table_hour']:.2f}",
                f"{r['idle_probes_per_hour']:.0f}",
                f"{r['idle_maintenance_runs']:.0f}",
                f"{r['idle_rss_mib']:.0f}",
            ]
            for r in results
        ],
    )
    triggered = markdown_table(
        [
            "tables",
            "triggered",
            "trigger to first task p50 s",
            "p95 s (target <= 30)",
            "max s",
            "status changes per process, mean (target <= 2)",
            "max",
            "operator peak RSS MiB (target <= 2048)",
        ],
        [
            [
                f"{r['tables']:,}",
                r["triggered"],
                f"{r['trigger_to_task_p50_s']:.1f}",
                f"{r['trigger_to_task_p95_s']:.1f}",
                f"{r['trigger_to_task_max_s']:.1f}",
                f"{r['status_changes_per_process']:.1f}",
                r["status_changes_per_process_max"],
                f"{r['peak_rss_mib']:.0f}",
            ]
            for r in results
        ],
    )
    return (
        "## 8. The operator at scale: 1,000 and 10,000 tables on a real control plane\n\n"
        f"Command: `{command}`. Load average at the end: {load_average()}.\n\n"
        "`floe operator` as its own process against the test control plane (kube-apiserver, etcd, "
        "kwok), one OptimizedTableSet selecting every table of one SQL catalog (SQLite, one small "
        "file per table), floe's defaults (maintenance on) but a minor trigger of 2 files; an "
        f"optimizer with 2 threads running its tasks on Spark in the benchmark's process. Idle: "
        f"{args.idle_seconds:.0f} s, {args.settle_seconds:.0f} s after every table was IDLE. "
        f"Triggered: {args.triggers} tables, one commit every {args.trigger_every:g} s.\n\n"
        f"Converging, from applying the group and the set:\n\n{converging}\n\n"
        f"Idle:\n\n{idle}\n\n"
        f"Triggered (a status change is one status patch the operator sent for the table, from its "
        f"commit until {AFTER_COMMIT_S:.0f} s after its process committed):\n\n{triggered}\n"
    )


def main() -> int:
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
    check = subprocess.run([str(BUILD_SCRIPT), "--check"], capture_output=True, text=True, check=False)
    if check.returncode != 0:
        print(f"the test control plane is not built: run {BUILD_SCRIPT}", file=sys.stderr)
        return 1
    bin_dir = Path(check.stdout.strip().splitlines()[-1])
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("kubectl is not on PATH", file=sys.stderr)
        return 1
    from kubernetes import config as kube_config

    from floe_optimizer.runner import start_spark

    cluster_dir = args.dir / "cluster"
    shutil.rmtree(cluster_dir, ignore_errors=True)
    cluster_dir.mkdir(parents=True)
    # A SIGTERM ends the run as an interrupt would: the control plane is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cluster = start_cluster(bin_dir, cluster_dir, kubectl)
    spark = start_spark("local[2]", 2)
    try:
        cluster.kubectl("apply", "-f", str(REPO / "crds"))
        kube_config.load_kube_config(str(cluster.kubeconfig))
        results = [measure(cluster, spark, int(t), args) for t in args.tables.split(",")]
    finally:
        spark.stop()
        cluster.stop()
    emit(report(results, args, command_line()), args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
