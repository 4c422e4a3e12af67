"""What users feel: a streaming-ingest run without and with ``floe run``, read side by side.

Two identical SQLite-backed catalogs get the same writes: A is left alone, B is kept
optimized by floe's engine, composed as ``floe run`` composes it (`OptimizingEngine`,
`TaskServiceServer` on loopback and one in-process `floe_optimizer.app.Optimizer` on
local Spark, all in this process), with a short refresh interval and minPlanInterval and
Amoro's default thresholds otherwise. Every ``--write-interval`` seconds one round of
writes lands in both catalogs, from writers with the same seeds:

- ``clicks``: `ClickStream` appends, partitioned by day (3 small files per round);
- ``pageviews``: `ClickStream` appends, unpartitioned (1 small file per round);
- ``orders``: `OrderCdcStream` upserts, partitioned by region: new orders plus updates
  of old ones as equality deletes (up to 3 data and 3 delete files per round).

Every ``--sample-interval`` seconds the current snapshot of each table in A and B is
pinned between two rounds, so both hold exactly the same rows, and then measured:
data and delete file counts, and the time Iceberg's Java reader (Spark, through the
project's reference reader) takes for a full read, ``SELECT count(*), sum(hash(*))``, and
for a selective filtered read of the same shape. Counts and hashes of A and B must be
identical at every sample. The timed queries never overlap floe's rewrite jobs on the
shared Spark session (a gate holds new rewrite jobs back while a query runs and waits
for running ones to finish first), so the times measure the tables' layout rather than
the two competing for the 2 cores; the writers and floe's planning and commits go on
meanwhile, as they would for a user. A and B are read in alternating order.

Writers' commits on B that lose the race against one of floe's commits are retried, as
a streaming writer's would be: the appends by pyiceberg's own commit retries (counted
from its log), the upserts by `commit_row_delta`'s.

Output: a PNG per metric in ``bench/plots/`` (one panel per table, "without floe" and
"with floe run" lines), the samples as JSON in the work directory, and a markdown
summary of final and mean figures and their ratios.

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
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import load_average, markdown_table
from matplotlib.figure import Figure
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from floe.api.models import OptimizedTable, OptimizerGroup, resource_from_dict
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.local.workload import CLICKS_SPEC, ClickStream, OrderCdcStream
from floe.optimizer.spark_runner import TaskOutcome
from floe.optimizer.task_spec import RewriteTaskSpec
from floe.service.engine import EngineEvent, OptimizingEngine
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe.tables.scan import scan_table
from floe_optimizer.app import Optimizer
from floe_optimizer.runner import SparkTaskRunner, TaskRunner

SCRIPT = Path(__file__).resolve()
NAMESPACE = "bench"
GROUP = "ingest"
SIDES = {"A": "without floe", "B": "with floe run"}
METRICS = {
    "data_files": "data files",
    "delete_files": "delete files",
    "full_scan_s": "full read, s",
    "filtered_scan_s": "filtered read, s",
}

log = logging.getLogger("ingest_experience")


# -- writers --------------------------------------------------------------------------------


def clicks_writer(
    rows: int, seed: int, spec: PartitionSpec
) -> Callable[[SqlCatalog, str], Callable[[], None]]:
    """A `ClickStream` appending ``rows`` per round."""

    def create(catalog: SqlCatalog, identifier: str) -> Callable[[], None]:
        stream = ClickStream(catalog, identifier, seed=seed, partition_spec=spec)
        return lambda: stream.append_batch(rows)

    return create


def orders_writer(inserts: int, updates: int) -> Callable[[SqlCatalog, str], Callable[[], None]]:
    """An `OrderCdcStream` upserting ``inserts`` new and ``updates`` old orders per round."""

    def create(catalog: SqlCatalog, identifier: str) -> Callable[[], None]:
        stream = OrderCdcStream(catalog, identifier, seed=2)
        return lambda: stream.upsert_batch(inserts=inserts, updates=updates)

    return create


class CommitRetries(logging.Handler):
    """Counts the commits pyiceberg retried because another commit (floe's) got in first."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Count pyiceberg's "retrying" warnings."""
        if record.getMessage().startswith("Commit failed due to a concurrent update"):
            self.count += 1


@dataclass(frozen=True)
class Workload:
    """One table of the run: how to create its writer and how to read it selectively."""

    name: str
    where: str
    create: Callable[[SqlCatalog, str], Callable[[], None]]

    @property
    def identifier(self) -> str:
        """``namespace.table``."""
        return f"{NAMESPACE}.{self.name}"


WORKLOADS = (
    Workload(
        "clicks",
        "ts >= TIMESTAMP_NTZ '2024-03-02 10:00:00' AND ts < TIMESTAMP_NTZ '2024-03-02 11:00:00'",
        clicks_writer(2000, seed=1, spec=CLICKS_SPEC),
    ),
    Workload("pageviews", "user_id BETWEEN 4200 AND 4299", clicks_writer(500, seed=4, spec=PartitionSpec())),
    Workload("orders", "region = 'apac' AND order_id < 2000", orders_writer(inserts=400, updates=200)),
)


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
            threads=self.group.spec.threads,
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


class Catalogs:
    """Catalogs A and B, their writers, and the Spark names the reference reader knows them by."""

    def __init__(self, work: Path, reader: ReferenceReader) -> None:
        self.catalogs: dict[str, SqlCatalog] = {}
        self.properties: dict[str, dict[str, str]] = {}
        self.writers: dict[str, list[Callable[[], None]]] = {}
        for side in SIDES:
            directory = work / side
            (directory / "warehouse").mkdir(parents=True)
            properties = {
                "type": "sql",
                "uri": f"sqlite:///{directory / 'catalog.db'}",
                "warehouse": (directory / "warehouse").as_uri(),
            }
            name = f"ingest_{side.lower()}"
            catalog = SqlCatalog(name, **properties)
            catalog.create_namespace(NAMESPACE)
            reader.register_sql_catalog(name, directory / "catalog.db", properties["warehouse"])
            self.catalogs[side] = catalog
            self.properties[side] = properties
            self.writers[side] = [w.create(catalog, w.identifier) for w in WORKLOADS]

    def write_round(self) -> None:
        """One batch into every table, A's then B's (same seeds, so the same rows)."""
        for side in SIDES:
            for write in self.writers[side]:
                write()

    def pin(self) -> dict[tuple[str, str], Table]:
        """Every table as of now, by (table name, side); call between rounds."""
        return {
            (w.name, side): self.catalogs[side].load_table(w.identifier) for w in WORKLOADS for side in SIDES
        }


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


class Rounds:
    """The writer thread: a round of writes into A and B every interval until the end."""

    def __init__(self, catalogs: Catalogs, interval_s: float, end_s: float, started: float) -> None:
        self.catalogs = catalogs
        self.interval_s = interval_s
        self.end_s = end_s
        self.started = started
        self.lock = threading.Lock()
        self.done = 0
        self.late = 0
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-writers", daemon=True)

    def start(self) -> None:
        """Start writing in the background."""
        self._thread.start()

    def join(self) -> None:
        """Wait for the last round; re-raise what stopped the writers, if anything did."""
        self._thread.join()
        if self.failure is not None:
            raise RuntimeError("a writer failed") from self.failure

    def alive(self) -> bool:
        """Whether rounds are still being written."""
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while True:
                due = self.started + self.done * self.interval_s
                if due - self.started >= self.end_s:
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                else:
                    self.late += 1
                with self.lock:
                    self.catalogs.write_round()
                    self.done += 1
        except BaseException as exc:
            self.failure = exc
            log.exception("writer round %d failed", self.done)


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


def ratio(a: float, b: float) -> str:
    """``a / b`` as ``12.3x`` (``-`` when b is 0)."""
    return f"{a / b:.1f}x" if b else "-"


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
                    ratio(a[-1], b[-1]),
                    fmt.format(statistics.fmean(a)),
                    fmt.format(statistics.fmean(b)),
                    ratio(statistics.fmean(a), statistics.fmean(b)),
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
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=8.0, help="how long the writers write")
    parser.add_argument("--write-interval", type=float, default=5.0, help="seconds between rounds of writes")
    parser.add_argument("--sample-interval", type=float, default=20.0, help="seconds between samples")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--optimizer-threads", type=int, default=2, help="task threads of floe's optimizer")
    parser.add_argument("--refresh-interval", type=float, default=5.0, help="floe's table refresh, seconds")
    parser.add_argument("--min-plan-interval", type=float, default=10.0, help="floe's minPlanInterval, s")
    parser.add_argument("--dir", type=Path, default=SCRIPT.parent / ".work" / "ingest", help="work directory")
    parser.add_argument("--plots", type=Path, default=SCRIPT.parent / "plots", help="where the PNGs go")
    parser.add_argument("--markdown", type=Path, help="also write the results section here")
    return parser.parse_args(argv)


def main() -> int:
    """Run, plot, summarize; exit code 1 if A and B ever read differently."""
    args = parse_args()
    samples, facts = run(args)
    plots = plot(samples, args.plots)
    text = summary(samples, facts, args, plots)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text)
    return 1 if any(pair_mismatches(samples)) else 0


if __name__ == "__main__":
    sys.exit(main())
