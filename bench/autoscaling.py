"""Executors sized by demand vs a group sized for the peak, on a bursty pattern, in-process.

The pattern (`harness.bursts`): every ``--period`` seconds each of ``--tables`` tables gets a
burst of small files at once (its minor trigger), then nothing. Two groups run the same
rounds on their own catalogs, one after the other: ``static``, ``--max-executors`` executors
all the time, and ``autoscaled``, ``minExecutors: 0`` up to the same maximum.

What runs is floe's own code, composed in this process: task service, engine, the driver's
`ExecutorScaler` (the optimizer with ``executors * cores`` threads on a local SparkSession)
and the operator's rounds: every ``--decision-interval`` seconds an engine tick and, right
after it, the scaling decision (`GroupScaling.decide` on `OptimizingEngine.group_demand`). No
Kubernetes: an executor here is threads of the one local Spark, and it starts
``--executor-start-s`` after the decision (0: at once, as executor pods on kwok do; a real
node adds the pod's start, which ``bench/autoscaling_kind.py`` measures).

Measured per group: executor-seconds (executors held, integrated over the run, from the
first measured burst to the end of the last round) and trigger-to-commit latency (from a
table's last file of a burst to floe's snapshot of that table). Targets: >= 50 % fewer
executor-seconds, median latency <= 1.2x the static group's.

Run: ``nice -n 10 .venv/bin/python bench/autoscaling.py`` (about 10 minutes).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field

from harness.bursts import MODES, PLANNED, SCHEMA, check_jitter, group_spec, pattern_parser, run_rounds
from harness.results import report_result
from harness.scaling_result import ModeResult, scaling_result
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from floe.api.group import OptimizerGroup
from floe.api.models import OptimizedTable, resource_from_dict
from floe.controller.scaling import GroupScaling
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.registry import EngineEvent
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe_optimizer.driver import ExecutorScaler
from floe_optimizer.runner import start_spark

GROUP = "bursty"


@dataclass
class ExecutorClock:
    """Executor-seconds: the executors held, integrated over time."""

    executors: int = 0
    since: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, executors: int) -> None:
        with self.lock:
            now = time.monotonic()
            self.seconds += self.executors * (now - self.since)
            self.executors, self.since = executors, now

    def reset(self) -> None:
        with self.lock:
            self.seconds, self.since = 0.0, time.monotonic()

    def total(self) -> float:
        with self.lock:
            return self.seconds + self.executors * (time.monotonic() - self.since)


class Group:
    """One group's floe, composed as the operator and its driver compose it, without Kubernetes."""

    def __init__(self, mode: str, catalog: SqlCatalog, spark: SparkSession, args: argparse.Namespace) -> None:
        self.mode, self.args = mode, args
        group = resource_from_dict(
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizerGroup",
                "metadata": {"name": GROUP},
                "spec": group_spec(mode, args),
            }
        )
        assert isinstance(group, OptimizerGroup)
        self.group = group
        self.service = TaskService(clock=time.time)
        self.engine = OptimizingEngine(self.service, refresh_interval_s=args.refresh_interval)
        self.server = TaskServiceServer(self.service)
        self.catalog = catalog
        self.spark = spark
        self.scaling = GroupScaling()
        self.clock = ExecutorClock()
        self.scale_changes = 0
        self.most_executors = 0
        self.planned_s: dict[str, float] = {}
        """By process id, when the engine planned it (its OptimizingStarted event)."""
        self.engine.subscribe(self._note_planned)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.scaler: ExecutorScaler | None = None

    def start(self, tables: list[str]) -> None:
        self.server.start()
        self.engine.apply_group(self.group)
        self.scaler = ExecutorScaler(
            self.spark,
            self.server.url,
            GROUP,
            executor_cores=self.args.cores,
            executor_memory=self.group.spec.executor_memory,
            name=f"bench-{self.mode}",
            grace_s=60.0,
            poll_wait_s=1.0,
        )
        self._scale_to(self.group.spec.initial_executors)
        properties = {"type": "sql", **{k: str(v) for k, v in self.catalog.properties.items()}}
        for identifier in tables:
            table = resource_from_dict(
                {
                    "apiVersion": "floe.dev/v1alpha1",
                    "kind": "OptimizedTable",
                    "metadata": {"name": identifier.split(".")[1]},
                    "spec": {
                        "table": identifier,
                        "catalog": {"name": self.catalog.name, "properties": properties},
                        "group": GROUP,
                        "minor": {"triggerFileCount": self.args.burst_files},
                        "minPlanInterval": "0s",
                    },
                }
            )
            assert isinstance(table, OptimizedTable)
            self.engine.apply_table(table)
        self._threads = [threading.Thread(target=self._rounds, name="operator-rounds")]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        if self.scaler is not None:
            self.scaler.stop()
        self.server.stop()
        self.engine.close()

    def _note_planned(self, event: EngineEvent) -> None:
        if planned := PLANNED.search(f"{event.reason}: {event.message}"):
            self.planned_s.setdefault(planned.group(1), time.time())

    def _scale_to(self, executors: int) -> None:
        assert self.scaler is not None
        self.clock.set(executors)  # held from the decision on: a starting pod is paid for
        if self.args.executor_start_s > 0 and executors > (self.scaler.executors or 0):
            time.sleep(self.args.executor_start_s)
        self.scaler.scale(executors)
        self.most_executors = max(self.most_executors, executors)

    def _rounds(self) -> None:
        """The operator's rounds (`Controller._loop`): an engine tick, then the scaling decision
        (`Controller.autoscale_groups`), every `--decision-interval` seconds."""
        while not self._stop.is_set():
            try:
                self.engine.tick()
                self._decide()
            except Exception:
                logging.exception("%s: operator round failed", self.mode)
            self._stop.wait(self.args.decision_interval)

    def _decide(self) -> None:
        assert self.scaler is not None
        current = self.scaler.executors or 0
        demand = self.engine.group_demand(GROUP)
        decision = self.scaling.decide(GROUP, self.group.spec, demand, current, time.time())
        if decision.changed:
            self.scale_changes += 1
            logging.info("%s: %d → %d executors: %s", self.mode, current, decision.executors, decision.reason)
            self._scale_to(decision.executors)


def run_mode(mode: str, spark: SparkSession, args: argparse.Namespace) -> ModeResult:
    work = args.dir / mode
    shutil.rmtree(work, ignore_errors=True)
    (work / "warehouse").mkdir(parents=True)
    catalog = SqlCatalog(
        mode, uri=f"sqlite:///{work / 'catalog.db'}", warehouse=(work / "warehouse").resolve().as_uri()
    )
    catalog.create_namespace("db")
    identifiers = [f"db.t{i:02d}" for i in range(args.tables)]
    tables = [catalog.create_table(identifier, SCHEMA) for identifier in identifiers]
    group = Group(mode, catalog, spark, args)
    group.start(identifiers)
    try:
        time.sleep(args.settle_s)  # the static group's executors are up before the first burst
        bursts, wall = run_rounds(mode, tables, args, group.clock.reset)
        return ModeResult(
            mode,
            group.clock.total(),
            wall,
            bursts,
            group.scale_changes,
            group.most_executors,
            planned_s=dict(group.planned_s),
        )
    finally:
        group.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The pattern's flags (`harness.bursts`) and the in-process operator's."""
    parser = pattern_parser(__doc__ or "", "autoscaling", tables=6, rounds=4, jitter=1.0)
    for flag, seconds, what in (
        ("--decision-interval", 1.0, "the operator's engine round (tick interval)"),
        ("--refresh-interval", 1.0, "the engine's table refresh"),
        ("--executor-start-s", 0.0, "from a decision up to the executor's threads registering"),
        ("--settle-s", 10.0, "before the first burst"),
    ):
        parser.add_argument(flag, type=float, default=seconds, help=what)
    return check_jitter(parser, parser.parse_args(argv))


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for noisy in ("floe", "floe_optimizer", "py4j", "pyiceberg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    spark = start_spark("local[2]", threads=2)
    try:
        results = {mode: run_mode(mode, spark, args) for mode in MODES}
    finally:
        spark.stop()
    setting = (
        f"Scaling decided every {args.decision_interval:g} s; executor start "
        f"{args.executor_start_s:g} s. In-process (no Kubernetes): the driver's ExecutorScaler on "
        "one local Spark, the operator's decision code."
    )
    title = "Autoscaling in-process: executor-seconds and trigger-to-commit latency on a bursty pattern"
    report_result(scaling_result("autoscaling", title, results, args, setting), args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
