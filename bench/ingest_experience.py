"""What users feel: a streaming-ingest run without and with ``floe run``, read side by side.

Catalogs A and B get the same rounds of streaming writes (`harness.streams`); B is kept
optimized by floe's engine, task service and one optimizer, composed in this process as
``floe run`` composes them. Every ``--sample-interval`` seconds both are pinned between
two rounds and measured: data and delete file counts, and the time Iceberg's Java reader
takes for a full and a filtered read, whose counts and hashes must be identical on both
sides. Output: a PNG per metric in ``bench/plots/``, the samples as JSON in the work
directory, and a markdown summary. Described in full in ``bench/README.md``.

Run: ``nice -n 10 .venv/bin/python bench/ingest_experience.py [--minutes 1]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shutil
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.cli import benchmark_parser
from harness.machine import load_average
from harness.report import emit, markdown_table, times
from harness.streams import SIDES, WORKLOADS, Catalogs, CommitRetries, Rounds
from matplotlib.figure import Figure
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from floe.api.group import OptimizerGroup
from floe.api.models import OptimizedTable, resource_from_dict
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.registry import EngineEvent
from floe.protocol.rewrite_task import RewriteTaskSpec
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe.tables.scan import scan_table
from floe_optimizer.app import Optimizer
from floe_optimizer.runner import SparkTaskRunner, TaskRunner
from floe_optimizer.spark_runner import TaskOutcome

SCRIPT = Path(__file__).resolve()
GROUP = "ingest"
METRICS = {
    "data_files": "data files",
    "delete_files": "delete files",
    "full_scan_s": "full read, s",
    "filtered_scan_s": "filtered read, s",
}

# -- floe, embedded as `floe run` embeds it ---------------------------------------------


class ScanGate:
    """Keeps floe's rewrite jobs and the timed queries apart on the shared Spark session.

    Rewrite tasks share the gate; a timed query holds it alone. A query waiting for the
    gate holds back new rewrite tasks, so it waits at most for those already running.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._tasks = 0
        self._queries_waiting = 0
        self._query_running = False

    @contextlib.contextmanager
    def task(self) -> Iterator[None]:
        """Hold the gate for one rewrite task."""
        with self._cond:
            self._cond.wait_for(lambda: not self._query_running and not self._queries_waiting)
            self._tasks += 1
        try:
            yield
        finally:
            with self._cond:
                self._tasks -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def query(self) -> Iterator[None]:
        """Hold the gate alone for one timed query."""
        with self._cond:
            self._queries_waiting += 1
            self._cond.wait_for(lambda: self._tasks == 0 and not self._query_running)
            self._queries_waiting -= 1
            self._query_running = True
        try:
            yield
        finally:
            with self._cond:
                self._query_running = False
                self._cond.notify_all()


class GatedRunner:
    """The optimizer's Spark runner, run through the `ScanGate`."""

    def __init__(self, runner: TaskRunner, gate: ScanGate) -> None:
        self.runner = runner
        self.gate = gate

    def run(self, spec: RewriteTaskSpec) -> TaskOutcome:
        """Run the task once no timed query runs or waits."""
        with self.gate.task():
            return self.runner.run(spec)

    def cancel(self) -> None:
        """Cancel the running tasks."""
        self.runner.cancel()


class EmbeddedFloe:
    """Task service, engine and one optimizer in this process, as `floe.local.run.run_engine` starts them."""

    def __init__(
        self,
        catalog: SqlCatalog,
        properties: dict[str, str],
        spark: SparkSession,
        gate: ScanGate,
        args: argparse.Namespace,
    ) -> None:
        self.events: list[EngineEvent] = []
        self.service = TaskService(clock=time.time)
        self.engine = OptimizingEngine(self.service, refresh_interval_s=args.refresh_interval)
        self.engine.subscribe(self.events.append)
        self.server = TaskServiceServer(self.service)
        group = resource_from_dict(
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizerGroup",
                "metadata": {"name": GROUP},
                "spec": {"executors": 1, "executorCores": args.optimizer_threads, "executorMemory": "2Gi"},
            }
        )
        assert isinstance(group, OptimizerGroup)
        self.group = group
        self.tables: list[OptimizedTable] = []
        for workload in WORKLOADS:
            table = resource_from_dict(
                {
                    "apiVersion": "floe.dev/v1alpha1",
                    "kind": "OptimizedTable",
                    "metadata": {"name": workload.name},
                    "spec": {
                        "table": workload.identifier,
                        "catalog": {"name": catalog.name, "properties": properties},
                        "group": GROUP,
                        "minPlanInterval": f"{args.min_plan_interval:g}s",
                    },
                }
            )
            assert isinstance(table, OptimizedTable)
            self.tables.append(table)
        self.spark = spark
        self.gate = gate
        self.optimizer: Optimizer | None = None
        self._stop = threading.Event()
        self._loop = threading.Thread(target=self.engine.run, args=(self._stop, 0.5), name="floe-engine")

    def start(self) -> None:
        """Serve, start the optimizer, wait for it to register, apply the tables, start ticking."""
        self.server.start()
        self.engine.apply_group(self.group)
        self.optimizer = Optimizer(
            self.server.url,
            group=GROUP,
            threads=self.group.spec.max_threads,
            runner=GatedRunner(SparkTaskRunner(self.spark), self.gate),
            memory_bytes=self.group.spec.executor_memory,
            name=f"embedded-{GROUP}",
        )
        self.optimizer.start()
        deadline = time.monotonic() + 30
        while self.optimizer.optimizer_id is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the embedded optimizer did not register within 30 s")
            time.sleep(0.05)
        for table in self.tables:
            self.engine.apply_table(table)
        self._loop.start()

    def stop(self) -> None:
        """Stop ticking, stop the optimizer (running tasks finish), the server and the engine."""
        self._stop.set()
        self._loop.join()
        if self.optimizer is not None:
            self.optimizer.stop(grace_s=60)
        self.server.stop()
        self.engine.close()

    def event_counts(self) -> dict[str, Counter[str]]:
        """Per table name: how many events of each reason (``Committed``, ``OptimizingFailed``, ...)."""
        counts: dict[str, Counter[str]] = {}
        for event in list(self.events):
            counts.setdefault(event.table_id.split("/", 1)[1], Counter())[event.reason] += 1
        return counts


# -- sampling -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One table of one catalog at one pinned snapshot."""

    minute: float
    rounds: int
    table: str
    side: str
    snapshot_id: int
    data_files: int
    delete_files: int
    full_scan_s: float
    filtered_scan_s: float
    rows: int
    hash_sum: int
    filtered_rows: int
    filtered_hash_sum: int


def timed_read(reader: ReferenceReader, gate: ScanGate, query: str) -> tuple[float, int, int]:
    """Seconds, count and hash sum of ``query`` (``SELECT count(*), sum(hash(*)) ...``)."""
    with gate.query():
        started = time.perf_counter()
        [(count, hash_sum)] = reader.sql(query)
        elapsed = time.perf_counter() - started
    return elapsed, int(count), int(hash_sum or 0)


def measure(
    reader: ReferenceReader,
    gate: ScanGate,
    pinned: dict[tuple[str, str], Table],
    minute: float,
    rounds: int,
    index: int,
) -> list[Sample]:
    """File counts and read times of every pinned table; A and B alternate which is read first."""
    samples = []
    order = list(SIDES) if index % 2 == 0 else list(reversed(SIDES))
    for workload in WORKLOADS:
        for side in order:
            table = pinned[(workload.name, side)]
            snapshot = table.metadata.current_snapshot()
            assert snapshot is not None, "every table has had a round of writes"
            files = scan_table(table, snapshot.snapshot_id).files
            source = qualified_name(table.catalog.name, workload.identifier)
            name = f"{source} VERSION AS OF {snapshot.snapshot_id}"
            full = timed_read(reader, gate, f"SELECT count(*), sum(hash(*)) FROM {name}")
            filtered = timed_read(
                reader, gate, f"SELECT count(*), sum(hash(*)) FROM {name} WHERE {workload.where}"
            )
            samples.append(
                Sample(
                    minute=minute,
                    rounds=rounds,
                    table=workload.name,
                    side=side,
                    snapshot_id=snapshot.snapshot_id,
                    data_files=len(files.data_files),
                    delete_files=len(files.delete_files),
                    full_scan_s=full[0],
                    filtered_scan_s=filtered[0],
                    rows=full[1],
                    hash_sum=full[2],
                    filtered_rows=filtered[1],
                    filtered_hash_sum=filtered[2],
                )
            )
    return samples


# -- the run --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> tuple[list[Sample], dict[str, Any]]:
    """Write, optimize B, and sample both until the end; returns the samples and run facts."""
    work: Path = args.dir.resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    logging.basicConfig(
        filename=work / "run.log",
        level=logging.INFO,
        format="%(asctime)s %(threadName)s %(name)s %(message)s",
    )
    retries = CommitRetries()
    logging.getLogger("pyiceberg.table").addHandler(retries)
    reader = ReferenceReader.start(master=f"local[{args.cores}]")
    catalogs = Catalogs(work, reader)
    gate = ScanGate()
    floe = EmbeddedFloe(catalogs.catalogs["B"], catalogs.properties["B"], reader.spark, gate, args)

    # One round and one (unrecorded) sample first, so that the JVM is warm for both sides.
    catalogs.write_round()
    measure(reader, gate, catalogs.pin(), 0.0, 1, 0)
    floe.start()
    started = time.monotonic()
    end_s = args.minutes * 60
    rounds = Rounds(catalogs, args.write_interval, end_s, started)
    rounds.start()
    samples: list[Sample] = []
    index = 0
    while True:
        writing = rounds.alive()
        with rounds.lock:
            pinned = catalogs.pin()
            done = rounds.done
        minute = (time.monotonic() - started) / 60
        batch = measure(reader, gate, pinned, minute, done, index)
        samples.extend(batch)
        report_sample(batch)
        if not writing:
            break
        index += 1
        time.sleep(max(0.0, started + index * args.sample_interval - time.monotonic()))
    rounds.join()
    floe.stop()
    facts = {
        "rounds": rounds.done,
        "late_rounds": rounds.late,
        "append_retries": retries.count,
        "events": {table: dict(counts) for table, counts in floe.event_counts().items()},
    }
    (work / "samples.json").write_text(
        json.dumps({"samples": [asdict(s) for s in samples], "facts": facts}, indent=1)
    )
    return samples, facts


def report_sample(batch: list[Sample]) -> None:
    """One progress line per table: A → B figures."""
    by_key = {(s.table, s.side): s for s in batch}
    for workload in WORKLOADS:
        a, b = by_key[(workload.name, "A")], by_key[(workload.name, "B")]
        same = "same rows" if mismatch(a, b) is None else "ROWS DIFFER"
        print(
            f"{a.minute:5.1f} min  round {a.rounds:3d}  {workload.name:9s}  "
            f"files {a.data_files}+{a.delete_files} / {b.data_files}+{b.delete_files}  "
            f"full {a.full_scan_s:.2f}s / {b.full_scan_s:.2f}s  "
            f"filtered {a.filtered_scan_s:.2f}s / {b.filtered_scan_s:.2f}s  {same}",
            flush=True,
        )


def mismatch(a: Sample, b: Sample) -> str | None:
    """What differs between A's and B's reads of the same rows, or None."""
    read_a = (a.rows, a.hash_sum, a.filtered_rows, a.filtered_hash_sum)
    read_b = (b.rows, b.hash_sum, b.filtered_rows, b.filtered_hash_sum)
    if read_a == read_b:
        return None
    return f"{a.table} at round {a.rounds}: A read (rows, hash, filtered rows, hash) {read_a}, B {read_b}"


# -- output ---------------------------------------------------------------------------------


def series(samples: list[Sample], table: str, side: str, metric: str) -> tuple[list[float], list[float]]:
    """Minutes and values of one metric of one table on one side."""
    chosen = [s for s in samples if s.table == table and s.side == side]
    return [s.minute for s in chosen], [float(getattr(s, metric)) for s in chosen]


def plot(samples: list[Sample], out: Path) -> list[Path]:
    """One PNG per metric, a panel per table, a line per side; returns the files written.

    Tables whose figure is 0 throughout on both sides (delete files of append-only tables)
    get no panel; the title names them.
    """
    out.mkdir(parents=True, exist_ok=True)
    written = []
    styles = {"A": {"color": "tab:red", "linestyle": "--"}, "B": {"color": "tab:blue", "linestyle": "-"}}
    for metric, label in METRICS.items():
        shown = [w for w in WORKLOADS if any(getattr(s, metric) for s in samples if s.table == w.name)]
        shown = shown or list(WORKLOADS)
        # The object-oriented API needs no pyplot and no display: savefig renders with Agg.
        figure = Figure(figsize=(max(5 * len(shown), 6.5), 4.2))
        axes = figure.subplots(1, len(shown), squeeze=False)
        for axis, workload in zip(axes[0], shown, strict=True):
            for side, name in SIDES.items():
                minutes, values = series(samples, workload.name, side, metric)
                axis.plot(minutes, values, marker="o", markersize=3, label=name, **styles[side])
            axis.set_title(workload.name)
            axis.set_xlabel("minutes of streaming ingest")
            axis.set_ylabel(label)
            axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
            axis.legend()
        title = f"{label}: without floe vs with floe run"
        hidden = [w.name for w in WORKLOADS if w not in shown]
        if hidden:
            title += f"\n({', '.join(hidden)}: 0 throughout, not shown)"
        figure.suptitle(title)
        figure.tight_layout()
        path = out / f"ingest_{metric}.png"
        figure.savefig(path, dpi=100)
        written.append(path)
    return written


def summary(samples: list[Sample], facts: dict[str, Any], args: argparse.Namespace, plots: list[Path]) -> str:
    """The markdown results section: final and mean figures of A and B and their ratios."""
    rows = []
    for workload in WORKLOADS:
        for metric, label in METRICS.items():
            _, a = series(samples, workload.name, "A", metric)
            _, b = series(samples, workload.name, "B", metric)
            fmt = "{:.0f}" if "files" in metric else "{:.2f}"
            rows.append(
                [
                    workload.name,
                    label,
                    fmt.format(a[-1]),
                    fmt.format(b[-1]),
                    times(a[-1], b[-1]),
                    fmt.format(statistics.fmean(a)),
                    fmt.format(statistics.fmean(b)),
                    times(statistics.fmean(a), statistics.fmean(b)),
                ]
            )
    headers = ["table", "metric", "final A", "final B", "final A/B", "mean A", "mean B", "mean A/B"]
    events = facts["events"]
    floe_lines = [
        f"- {w.name}: {events.get(w.name, {}).get('Committed', 0)} optimizing commits, "
        f"{events.get(w.name, {}).get('OptimizingFailed', 0)} failed processes, "
        f"{events.get(w.name, {}).get('PlanningFailed', 0)} failed plannings"
        for w in WORKLOADS
    ]
    samples_per_side = len(samples) // (len(WORKLOADS) * len(SIDES))
    mismatches = [m for m in pair_mismatches(samples) if m]
    check = (
        f"identical at all {samples_per_side} samples of every table"
        if not mismatches
        else f"{len(mismatches)} MISMATCHES: " + "; ".join(mismatches[:3])
    )
    return "\n".join(
        [
            "## What users feel: streaming ingest without and with `floe run`",
            "",
            f"{args.minutes:g} min of writes after a first warm-up round, a round every "
            f"{args.write_interval:g} s ({facts['rounds']} rounds, {facts['late_rounds']} started late), "
            "sampled every "
            f"{args.sample_interval:g} s ({samples_per_side} samples); Spark local[{args.cores}], "
            f"{args.optimizer_threads} optimizer threads, refresh every {args.refresh_interval:g} s, "
            f"minPlanInterval {args.min_plan_interval:g} s; load average at the end {load_average()}.",
            "A = without floe, B = with floe run; A/B > 1 means B has fewer files or reads faster.",
            "",
            markdown_table(headers, rows),
            "",
            f"Content check (count and sum(hash(*)), full and filtered, A vs B): {check}.",
            "Writers' appends that lost a race with one of floe's commits and were retried by pyiceberg "
            f"(all in B: nothing else commits to A): {facts['append_retries']}.",
            "",
            "floe in B:",
            *floe_lines,
            "",
            "Plots: " + ", ".join(f"`{display_path(p)}`" for p in plots),
            "",
        ]
    )


def display_path(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    resolved = path.resolve()
    root = SCRIPT.parent.parent
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(resolved)


def pair_mismatches(samples: list[Sample]) -> list[str | None]:
    """`mismatch` of every A/B pair of samples (same table, same pin)."""
    by_key = {(s.table, s.rounds, s.minute, s.side): s for s in samples}
    return [mismatch(s, by_key[(s.table, s.rounds, s.minute, "B")]) for s in samples if s.side == "A"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = benchmark_parser(__doc__, "ingest")
    parser.add_argument("--minutes", type=float, default=8.0, help="how long the writers write")
    parser.add_argument("--write-interval", type=float, default=5.0, help="seconds between rounds of writes")
    parser.add_argument("--sample-interval", type=float, default=20.0, help="seconds between samples")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--optimizer-threads", type=int, default=2, help="task threads of floe's optimizer")
    parser.add_argument("--refresh-interval", type=float, default=5.0, help="floe's table refresh, seconds")
    parser.add_argument("--min-plan-interval", type=float, default=10.0, help="floe's minPlanInterval, s")
    parser.add_argument("--plots", type=Path, default=SCRIPT.parent / "plots", help="where the PNGs go")
    return parser.parse_args(argv)


def main() -> int:
    """Run, plot, summarize; exit code 1 if A and B ever read differently."""
    args = parse_args()
    samples, facts = run(args)
    plots = plot(samples, args.plots)
    text = summary(samples, facts, args, plots)
    emit(text, args.markdown)
    return 1 if any(pair_mismatches(samples)) else 0


if __name__ == "__main__":
    sys.exit(main())
