"""Executors sized by demand vs a group sized for the peak, on a bursty pattern.

Rounds of bursts: every ``--period`` seconds each of ``--tables`` tables gets a burst of
small files at once (enough to trigger minor optimizing), then nothing. Two groups run the
same rounds on their own catalogs, one after the other: ``static``, ``--max-executors``
executors all the time, and ``autoscaled``, ``minExecutors: 0`` up to the same maximum.

What runs is floe's own code, composed in this process: task service, engine, the driver's
`ExecutorScaler` (the optimizer with ``executors * cores`` threads on a local SparkSession)
and the operator's rounds: every ``--decision-interval`` seconds an engine tick and, right
after it, the scaling decision (`GroupScaling.decide` on `OptimizingEngine.group_demand`). No
Kubernetes: an executor here is threads of the one local Spark, and it starts
``--executor-start-s`` after the decision (0: at once, as executor pods on kwok do; a real
node adds the pod's start).

Measured per group: executor-seconds (executors held, integrated over the run, from the
first burst to the end of the last round) and trigger-to-commit latency (from a table's last
file of a burst to floe's snapshot of that table). Targets (issue 14): >= 50 % fewer
executor-seconds, median latency <= 1.2x the static group's.

Run: ``nice -n 10 .venv/bin/python bench/autoscaling.py`` (about 10 minutes).
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from harness.cli import benchmark_parser
from harness.machine import load_average
from harness.report import emit, markdown_table
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType
from pyspark.sql import SparkSession

from floe.api.group import OptimizerGroup
from floe.api.models import OptimizedTable, resource_from_dict
from floe.controller.scaling import GroupScaling
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.registry import EngineEvent
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe.tables.writer import conform
from floe_optimizer.driver import ExecutorScaler
from floe_optimizer.runner import start_spark

GROUP = "bursty"
PROCESS_ID_KEY = "floe.process-id"
PLANNED = re.compile(r"OptimizingStarted: \w+ optimizing (\S+): \d+ tasks")
"""The operator's log line, or Event message, of a process it planned."""
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "payload", StringType()))
MODES = ("static", "autoscaled")


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


@dataclass(frozen=True)
class Burst:
    """One table's burst of a measured round: when its last file landed, and floe's commit of it."""

    table: str
    triggered_s: float
    committed_s: float
    process_id: str

    @property
    def latency_s(self) -> float:
        return self.committed_s - self.triggered_s


@dataclass
class ModeResult:
    mode: str
    executor_seconds: float
    wall_s: float
    bursts: list[Burst]
    scale_changes: int
    most_executors: int
    handed_out_s: dict[str, float] = field(default_factory=dict)
    """By process id, when the optimizer handed its first task to Spark (where known)."""
    began_s: dict[str, float] = field(default_factory=dict)
    """By process id, when its first task began on an executor (where known)."""
    pod_starts_s: list[float] = field(default_factory=list)
    """Of each executor pod created while measuring, from its creation to its container running
    (where known: executor pods)."""
    planned_s: dict[str, float] = field(default_factory=dict)
    """By process id, when the operator planned it: its table's refresh found the burst (where
    known)."""

    @property
    def latencies(self) -> list[float]:
        return [b.latency_s for b in self.bursts]


def group_spec(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """The OptimizerGroup spec of `mode`: `--max-executors` executors all the time (static), or
    from zero up to them (autoscaled)."""
    spec: dict[str, Any] = {"executorCores": args.cores, "executorMemory": "1Gi"}
    if mode == "static":
        spec["executors"] = args.max_executors
    else:
        spec["autoscaling"] = {
            "minExecutors": 0,
            "maxExecutors": args.max_executors,
            "scaleDownDelay": f"{args.scale_down_delay:g}s",
        }
    return spec


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


def _burst(table: Table, files: int, rows: int, round_index: int) -> None:
    for index in range(files):
        first = (round_index * files + index) * rows
        batch = pa.table(
            {
                "id": pa.array(range(first, first + rows), pa.int64()),
                "payload": pa.array([f"row-{i}" for i in range(first, first + rows)], pa.string()),
            }
        )
        table.append(conform(table, batch))


def _floe_commit_after(table: Table, after_ms: int) -> tuple[float, str] | None:
    """floe's first snapshot of `table` after `after_ms`: its time and process id."""
    table.refresh()
    for snapshot in table.snapshots():
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if PROCESS_ID_KEY in summary and snapshot.timestamp_ms > after_ms:
            return snapshot.timestamp_ms / 1000, summary[PROCESS_ID_KEY]
    return None


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


def run_rounds(
    mode: str, tables: list[Table], args: argparse.Namespace, start_measuring: Callable[[], None]
) -> tuple[list[Burst], float]:
    """Every round's bursts, each waited for until floe committed every table; the bursts of
    the measured rounds and their wall time. `start_measuring` is called as the first measured
    round starts: Spark's Python workers and the JVM are warm from there on, for both groups
    alike.

    Each table's burst lands at a random offset of its own (seeded: the same for both groups) in
    the round's first `--jitter` seconds. With a period that is a multiple of the table refresh,
    bursts would otherwise all land at one phase of the refresh, and each group's latencies would
    carry the one wait for the refresh that its start happened to give it; one offset for all the
    tables of a round would still give each group only one phase a round (tables that committed
    together are refreshed together)."""
    bursts: list[Burst] = []
    offsets = random.Random(args.seed)
    started = time.monotonic()
    for round_index in range(args.warmup_rounds + args.rounds):
        round_start = time.monotonic()
        measured = round_index >= args.warmup_rounds
        if round_index == args.warmup_rounds:
            start_measuring()
            started = round_start
        landing = sorted((offsets.uniform(0.0, args.jitter), index) for index in range(len(tables)))
        triggered: dict[str, float] = {}
        for offset, index in landing:
            time.sleep(max(0.0, round_start + offset - time.monotonic()))
            _burst(tables[index], args.burst_files, args.rows, round_index)
            triggered[tables[index].name()[-1]] = time.time()
        pending = dict(zip([t.name()[-1] for t in tables], tables, strict=True))
        deadline = time.monotonic() + args.round_timeout
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}, round {round_index}: not committed in time: {sorted(pending)}")
            for name, table in list(pending.items()):
                committed = _floe_commit_after(table, int(triggered[name] * 1000))
                if committed is not None:
                    if measured:
                        bursts.append(Burst(name, triggered[name], *committed))
                    del pending[name]
            time.sleep(0.5)
        took = time.monotonic() - round_start
        logging.info("%s: round %d committed in %.1f s", mode, round_index, took)
        time.sleep(max(0.0, round_start + args.period - time.monotonic()))
    return bursts, time.monotonic() - started


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def report(results: dict[str, ModeResult], args: argparse.Namespace, command: str, setting: str) -> str:
    """The section of `bench/RESULTS.md`: the pattern (from `args`), where it ran (`setting`),
    each group's figures and the targets."""
    static, auto = results["static"], results["autoscaled"]
    rows = [
        [
            r.mode,
            f"{r.executor_seconds:.0f}",
            f"{r.wall_s:.0f}",
            r.most_executors,
            r.scale_changes,
            f"{statistics.median(r.latencies):.1f}",
            f"{_p95(r.latencies):.1f}",
        ]
        for r in (static, auto)
    ]
    saved = 1 - auto.executor_seconds / static.executor_seconds
    latency_ratio = statistics.median(auto.latencies) / statistics.median(static.latencies)
    p95_ratio = _p95(auto.latencies) / _p95(static.latencies)
    pooled = refresh_pooled_medians(results)
    verdict = [
        [
            f"{saved:.0%} ({'met' if saved >= 0.5 else 'missed'})",
            f"{latency_ratio:.2f}x ({'met' if latency_ratio <= 1.2 else 'missed'})",
            f"{pooled['autoscaled'] / pooled['static']:.2f}x" if pooled else "-",
            f"{p95_ratio:.2f}x",
        ]
    ]
    load = load_average()
    return "\n".join(
        [
            "## Autoscaling: executor-seconds and trigger-to-commit latency on a bursty pattern",
            "",
            f"Command: `{command}`. Load average at the end: {load}.",
            "",
            f"{args.tables} tables, each getting {args.burst_files} files of {args.rows:,} rows at "
            f"once every {args.period:g} s (each at a random offset in the round's first {args.jitter:g} s), "
            f"{args.rounds} rounds after {args.warmup_rounds} not counted; executors of {args.cores} "
            f"cores, at most {args.max_executors}; scale-down delay {args.scale_down_delay:g} s. {setting}",
            "",
            markdown_table(
                [
                    "group",
                    "executor-s",
                    "wall s",
                    "most executors",
                    "scale changes",
                    "median latency s",
                    "p95 latency s",
                ],
                rows,
            ),
            "",
            markdown_table(
                [
                    "autoscaled: executor-seconds saved (target >= 50 %)",
                    "median latency vs static (target <= 1.2x)",
                    "the same, refresh waits pooled",
                    "p95 latency vs static",
                ],
                verdict,
            ),
            "",
            *(
                [
                    "Refresh waits pooled: each group's median of every trigger → planned wait of both "
                    "groups' bursts plus each of its own planned → commit times (medians "
                    f"{pooled['static']:.1f} s static, {pooled['autoscaled']:.1f} s autoscaled). The "
                    "table refresh is the same code for both groups and where a burst falls in its "
                    "period is chance, which a few rounds sample only a few times.",
                    "",
                ]
                if pooled
                else []
            ),
            *_breakdown(results),
        ]
    )


def refresh_pooled_medians(results: dict[str, ModeResult]) -> dict[str, float] | None:
    """Each group's median latency had its bursts waited for the table refresh as both groups'
    bursts did: the median of every sum of a wait from trigger to planning (of either group's
    bursts) and one of the group's own times from planning to commit. None unless every group has
    bursts whose planning time is known."""
    waits = [
        r.planned_s[b.process_id] - b.triggered_s
        for r in results.values()
        for b in r.bursts
        if b.process_id in r.planned_s
    ]
    medians: dict[str, float] = {}
    for mode, result in results.items():
        after = [
            b.committed_s - result.planned_s[b.process_id]
            for b in result.bursts
            if b.process_id in result.planned_s
        ]
        if not after or not waits:
            return None
        medians[mode] = statistics.median(wait + rest for wait in waits for rest in after)
    return medians


def _breakdown(results: dict[str, ModeResult]) -> list[str]:
    """Where each group's latency goes, for the bursts whose marks are known: to the planning
    (the table refresh finding the burst; where every group's planning times are known), to the
    handout of the first task (planning, a thread polling the task: for a waking group, the
    scale-up and its optimizer's registration), from it to the task's start on an executor (an
    executor to run it on: one waking, with its Python worker), and from there to the commit (the
    task and the commit)."""
    with_planning = all(r.planned_s for r in results.values())
    rows = []
    for result in results.values():
        marks = [result.planned_s] if with_planning else []
        marks += [result.handed_out_s, result.began_s]
        known = [b for b in result.bursts if all(b.process_id in mark for mark in marks)]
        if not known:
            continue
        times = [[b.triggered_s, *(mark[b.process_id] for mark in marks), b.committed_s] for b in known]
        stages = [[t[i + 1] - t[i] for t in times] for i in range(len(marks) + 1)]
        rows.append(
            [
                result.mode,
                f"{len(known)} of {len(result.bursts)}",
                *(f"{statistics.median(stage):.1f} / {_p95(stage):.1f}" for stage in stages),
            ]
        )
    if not rows:
        return []
    to_handout = (
        ["trigger → planned, median / p95 s", "planned → first task handed to Spark, median / p95 s"]
        if with_planning
        else ["trigger → first task handed to Spark, median / p95 s"]
    )
    lines = [
        markdown_table(
            [
                "group",
                "bursts",
                *to_handout,
                "handed out → began on an executor, median / p95 s",
                "began → commit, median / p95 s",
            ],
            rows,
        ),
        "",
    ]
    for result in results.values():
        if result.pod_starts_s:
            starts = result.pod_starts_s
            lines += [
                f"{result.mode}: {len(starts)} executor pods created while measuring, from creation to "
                f"their container running median {statistics.median(starts):.1f} s, p95 "
                f"{_p95(starts):.1f} s (Kubernetes' timestamps, whole seconds).",
                "",
            ]
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = benchmark_parser(__doc__ or "", "autoscaling", seed="the bursts' offsets in their rounds")
    parser.add_argument("--tables", type=int, default=6)
    parser.add_argument(
        "--burst-files", type=int, default=4, help="files per table per burst (its minor trigger)"
    )
    parser.add_argument("--rows", type=int, default=20_000, help="rows per file")
    parser.add_argument("--rounds", type=int, default=4, help="measured rounds")
    parser.add_argument(
        "--warmup-rounds", type=int, default=1, help="rounds before the measured ones (not counted)"
    )
    parser.add_argument("--period", type=float, default=120.0, help="seconds from one burst to the next")
    for flag, default, what in (
        ("--max-executors", 2, "executors of the static group, and the autoscaled group's maximum"),
        ("--cores", 1, "cores (task threads) per executor"),
    ):
        parser.add_argument(flag, type=int, default=default, help=what)
    for flag, seconds, what in (
        ("--scale-down-delay", 30.0, "the autoscaled group's scaleDownDelay"),
        ("--decision-interval", 1.0, "the operator's engine round (tick interval)"),
        ("--refresh-interval", 1.0, "the engine's table refresh"),
        (
            "--jitter",
            1.0,
            "each table's burst lands at a random offset of its own up to this: the refresh interval",
        ),
        ("--executor-start-s", 0.0, "from a decision up to the executor's threads registering"),
        ("--settle-s", 10.0, "before the first burst"),
        ("--round-timeout", 600.0, "a round's bursts must all be committed within this"),
    ):
        parser.add_argument(flag, type=float, default=seconds, help=what)
    return check_jitter(parser, parser.parse_args(argv))


def check_jitter(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """`args`, once its ``--jitter`` is known to fit in a round: from 0 up to ``--period``."""
    if not 0 <= args.jitter <= args.period:
        parser.error(f"--jitter must be from 0 up to --period ({args.period:g} s), not {args.jitter:g}")
    return args


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
    emit(report(results, args, "python " + " ".join(sys.argv), setting), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
