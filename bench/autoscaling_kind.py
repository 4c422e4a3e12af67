"""The bursty pattern of `bench/autoscaling.py` (`harness.bursts`) on kind: real pods, as users run floe.

Two OptimizerGroups run the same rounds, one after the other, each with its own tables:
``static``, ``--max-executors`` executor pods all the time, and ``autoscaled``,
``minExecutors: 0`` up to the same maximum. floe is installed by its chart; the tables live in
the REST catalog on S3 (moto) of the e2e tests; executors are Spark executor pods the group's
driver asks for.

Measured per group: executor-seconds (executor pods that exist, sampled every second from the
first measured burst to the end of the last round: a pod starting is paid for) and
trigger-to-commit latency (from a table's last file of a burst to floe's snapshot of it), split
where the operator planned the process (its log), where the group's driver handed the process's
first task to Spark and where that task began on an executor (from the driver's log); and how
long executor pods took to start (their timestamps). Targets: >= 50 % fewer executor-seconds,
median latency <= 1.2x the static group's.

The cluster, images, chart and catalog are those of ``tests/e2e`` (its fixtures, made or found
cached), so this runs under pytest: ``.venv/bin/python bench/autoscaling_kind.py`` (about
27 minutes with the defaults; ``--keep-cluster`` keeps the cluster for another run).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT / "tests"), str(BENCH)]  # tests/e2e's fixtures, and bench's own modules

import e2e.conftest as e2e  # noqa: E402
from harness import bursts  # noqa: E402
from harness.results import report_result  # noqa: E402
from harness.scaling_result import ModeResult, scaling_result  # noqa: E402

# The e2e tests' cluster, images, chart and catalog, as fixtures of this module: they win over
# pytest-kind's of the same name, as tests/e2e's conftest's do there.
e2e_tools, kind_cluster, data_stack = e2e.e2e_tools, e2e.kind_cluster, e2e.data_stack
kubectl, helm = e2e.kubectl, e2e.helm

ARGS_ENV = "FLOE_BENCH_AUTOSCALING_KIND"
NAMESPACE = "bench"
CATALOG = "bench_rest"
SECRET = "bench-catalog"
HANDOUT = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \[[^\]]*\] floe_optimizer\.app: "
    r"thread \d+: running task (\S+)-t\d{4} of ",
    re.MULTILINE,
)
ENDED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \[[^\]]*\] floe_optimizer\.app: "
    r"thread \d+: task (\S+)-t\d{4} ended in ([\d.]+) s \(began on an executor after ([\d.]+) s\)",
    re.MULTILINE,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The pattern (`harness.bursts`) and the groups; the defaults fit one 2-core kind node."""
    parser = bursts.pattern_parser(__doc__ or "", "autoscaling-kind", tables=3, rounds=5, jitter=10.0)
    parser.add_argument(
        "--startup-cpu-limit",
        default="2",
        help="both groups' executorStartupCpuLimit ('' for none: executor pods start at their cores)",
    )
    parser.add_argument("--keep-cluster", action="store_true", help="keep the kind cluster afterwards")
    return bursts.check_jitter(parser, parser.parse_args(argv))


def main() -> int:
    """Run the benchmark under pytest with the e2e fixtures; the result goes to stdout (and, with
    ``--record``, to its record)."""
    args = parse_args()
    os.environ[ARGS_ENV] = json.dumps(vars(args), default=str)
    options = ["--keep-cluster"] if args.keep_cluster else []
    return pytest.main(
        [
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(ROOT),
            "-o",
            f"python_files={Path(__file__).name}",
            *options,
            __file__,
        ]
    )


@pytest.fixture(scope="module")
def release(helm: Any, kubectl: Any, e2e_tools: Any) -> Iterator[None]:
    """floe installed by its chart, serving namespace ``bench``."""
    e2e.install_floe(helm, kubectl, e2e_tools, NAMESPACE)
    yield
    helm("uninstall", e2e.RELEASE, "-n", e2e.RELEASE_NAMESPACE, "--wait")


class PodClock:
    """Executor-seconds of a group: its executor pods that exist, sampled every second; and how
    long each pod created while measuring took from its creation to its container running."""

    def __init__(self, kubectl: Any, group: str) -> None:
        self._kubectl = kubectl
        self._selector = f"floe.dev/group={group},floe.dev/role=executor"
        self._lock = threading.Lock()
        self._seconds = 0.0
        self._measuring_since = time.time()
        self.most = 0
        self.starts: dict[str, float] = {}
        """By pod name: from its creation to its container running, in seconds."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="pod-clock", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def reset(self) -> None:
        with self._lock:
            self._seconds, self.most, self._measuring_since = 0.0, 0, time.time()
            self.starts.clear()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self._seconds

    def _sample(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(1.0):
            pods = self._kubectl.json("get", "pods", "-n", NAMESPACE, "-l", self._selector)["items"]
            held = sum(1 for p in pods if not p["metadata"].get("deletionTimestamp"))
            now = time.monotonic()
            with self._lock:
                self._seconds += held * (now - last)
                self.most = max(self.most, held)
                for pod in pods:
                    self._note_start(pod)
            last = now

    def _note_start(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        if name in self.starts:
            return
        created = _timestamp(pod["metadata"]["creationTimestamp"])
        running = [
            status["state"]["running"]["startedAt"]
            for status in pod.get("status", {}).get("containerStatuses") or []
            if "running" in status.get("state", {})
        ]
        if running and created >= self._measuring_since:
            self.starts[name] = _timestamp(running[0]) - created


def _timestamp(text: str) -> float:
    """Seconds since the epoch of a Kubernetes timestamp: an object's (whole seconds) or a log
    line's from ``kubectl logs --timestamps`` (nanoseconds, read to the microsecond)."""
    return datetime.fromisoformat(text).timestamp()


def _manifests(mode: str, args: argparse.Namespace, identifiers: list[str]) -> list[dict[str, Any]]:
    # Small CPU requests: both groups' pods fit one 2-core node beside the control plane.
    spec = {**bursts.group_spec(mode, args), "executorCpuRequest": "200m"}
    if args.startup_cpu_limit:
        spec["executorStartupCpuLimit"] = args.startup_cpu_limit
    group = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizerGroup",
        "metadata": {"name": mode, "namespace": NAMESPACE},
        "spec": spec,
    }
    tables = [
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": identifier.replace(".", "-"), "namespace": NAMESPACE},
            "spec": {
                "table": identifier,
                "group": mode,
                "catalog": {"name": CATALOG, "secretRef": SECRET},
                "minor": {"triggerFileCount": args.burst_files},
                "minPlanInterval": "0s",
            },
        }
        for identifier in identifiers
    ]
    return [group, *tables]


def _ready(kubectl: Any, mode: str, args: argparse.Namespace) -> bool:
    status = kubectl.json("get", "og", mode, "-n", NAMESPACE).get("status") or {}
    selector = f"floe.dev/group={mode},floe.dev/role=driver"
    drivers = kubectl.json("get", "pods", "-n", NAMESPACE, "-l", selector)
    running = any(p.get("status", {}).get("phase") == "Running" for p in drivers["items"])
    if mode == "static":
        return running and status.get("threads") == args.max_executors * args.cores
    return running and status.get("desiredExecutors") == 0 and status.get("readyExecutors", 0) == 0


def first_tasks(kubectl: Any, mode: str) -> tuple[dict[str, float], dict[str, float]]:
    """By process id, when the group's driver handed the process's first task to Spark, and when
    its first task began on an executor (from the driver's log, UTC)."""
    selector = f"floe.dev/group={mode},floe.dev/role=driver"
    handed: dict[str, float] = {}
    began: dict[str, float] = {}
    for pod in kubectl.json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]:
        log = kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"])
        for stamp, process in HANDOUT.findall(log):
            at = _log_time(stamp)
            handed[process] = min(at, handed.get(process, at))
        for stamp, process, took, waited in ENDED.findall(log):
            # The task ended `took` seconds after its handout, and began `waited` after it.
            at = _log_time(stamp) - float(took) + float(waited)
            began[process] = min(at, began.get(process, at))
    return handed, began


def planned_times(kubectl: Any) -> dict[str, float]:
    """By process id, when the operator planned it: its log line, as Kubernetes timestamped it."""
    log = kubectl(
        "logs", "-n", e2e.RELEASE_NAMESPACE, "-l", "app.kubernetes.io/name=floe", "--timestamps", "--tail=-1"
    )
    planned: dict[str, float] = {}
    for line in log.splitlines():
        stamp, _, text = line.partition(" ")
        if found := bursts.PLANNED.search(text):
            planned.setdefault(found.group(1), _timestamp(stamp))
    return planned


def _log_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC).timestamp()


def run_mode(mode: str, args: argparse.Namespace, kubectl: Any, catalog: Any) -> ModeResult:
    """One group's rounds on its own tables; its `ModeResult`."""
    catalog.create_namespace(mode)
    identifiers = [f"{mode}.t{i:02d}" for i in range(args.tables)]
    tables = [catalog.create_table(i, bursts.SCHEMA, properties={"format-version": "2"}) for i in identifiers]
    manifests = _manifests(mode, args, identifiers)
    kubectl.apply(manifests)
    e2e.wait_for(f"the {mode} group ready", lambda: _ready(kubectl, mode, args), timeout_s=600)
    clock = PodClock(kubectl, mode)
    clock.start()
    try:
        measured, wall = bursts.run_rounds(mode, tables, args, clock.reset)
    finally:
        executor_seconds = clock.stop()
    handouts, began = first_tasks(kubectl, mode)
    planned = planned_times(kubectl)
    events = kubectl.events(NAMESPACE, "OptimizerGroup", mode)
    changes = sum(int(e.get("count") or 1) for e in events if e["reason"] in ("ScaledUp", "ScaledDown"))
    for manifest in reversed(manifests):
        name = manifest["metadata"]["name"]
        kubectl("delete", manifest["kind"].lower(), name, "-n", NAMESPACE, "--wait=true", "--timeout=180s")
    starts = list(clock.starts.values())
    return ModeResult(
        mode, executor_seconds, wall, measured, changes, clock.most, handouts, began, starts, planned
    )


def test_bursty_pattern_on_kind(release: None, kubectl: Any, data_stack: Any) -> None:
    """Both groups' rounds, then the result (the benchmark has no pass or fail of its own)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", force=True)
    args = argparse.Namespace(**json.loads(os.environ[ARGS_ENV]))
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": NAMESPACE},
            "stringData": data_stack.properties,
        }
    )
    catalog = data_stack.client(CATALOG)
    results = {mode: run_mode(mode, args, kubectl, catalog) for mode in bursts.MODES}
    setting = (
        "On kind: one node (2 cores), floe installed by its chart, the operator refreshing tables "
        "every 10 s and deciding every 1 s, executor pods of 200m CPU request and 1 GiB"
        + (f", starting with a CPU limit of {args.startup_cpu_limit}" if args.startup_cpu_limit else "")
        + ", tables in the REST catalog on S3 (moto) written from the host."
    )
    title = "Autoscaling on kind: executor-seconds and trigger-to-commit latency on a bursty pattern"
    report_result(scaling_result("autoscaling_kind", title, results, args, setting), args.record)


if __name__ == "__main__":
    raise SystemExit(main())
