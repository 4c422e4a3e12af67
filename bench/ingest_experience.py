"""What users feel: a streaming-ingest run without and with ``floe run``, read side by side.

Catalogs A and B get the same rounds of streaming writes (`harness.streams`); floe keeps B
optimized, composed in this process as ``floe run`` composes it (`harness.embedded_floe`).
Every ``--sample-interval`` seconds both are pinned between two rounds and measured: data and
delete file counts, and the time Iceberg's Java reader takes for a full and a filtered read
(apart from floe's rewrites: `harness.scan_gate`), whose counts and hashes must be identical.
Output: the results, a PNG per metric, and the samples as JSON in the work directory.

Run: ``nice -n 10 .venv/bin/python bench/ingest_experience.py [--minutes 1]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.cli import benchmark_parser
from harness.embedded_floe import EmbeddedFloe
from harness.plots import FLOE_STYLE, REFERENCE_STYLE, Line, Panel, add_plots_argument, save_plot, shown_path
from harness.report import times
from harness.results import BenchResult, Figures, Target, new_result, report_result
from harness.scan_gate import GatedRunner, ScanGate
from harness.streams import SIDES, WORKLOADS, Catalogs, CommitRetries, Rounds
from pyiceberg.table import Table

from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.tables.scan import scan_table
from floe_optimizer.runner import SparkTaskRunner

METRICS = {
    "data_files": "data files",
    "delete_files": "delete files",
    "full_scan_s": "full read, s",
    "filtered_scan_s": "filtered read, s",
}
STYLES = {"A": REFERENCE_STYLE, "B": FLOE_STYLE}


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
            query = f"SELECT count(*), sum(hash(*)) FROM {source} VERSION AS OF {snapshot.snapshot_id}"
            full = gate.timed_read(reader, query)
            filtered = gate.timed_read(reader, f"{query} WHERE {workload.where}")
            pin = (minute, rounds, workload.name, side, snapshot.snapshot_id)
            counts = (len(files.data_files), len(files.delete_files))
            samples.append(Sample(*pin, *counts, full[0], filtered[0], *full[1:], *filtered[1:]))
    return samples


def run(args: argparse.Namespace) -> tuple[list[Sample], dict[str, Any]]:
    """Write, optimize B, and sample both until the end; returns the samples and run facts."""
    work: Path = args.dir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log_format = "%(asctime)s %(threadName)s %(name)s %(message)s"
    logging.basicConfig(filename=work / "run.log", level=logging.INFO, format=log_format)
    retries = CommitRetries()
    logging.getLogger("pyiceberg.table").addHandler(retries)
    reader = ReferenceReader.start(master=f"local[{args.cores}]")
    catalogs = Catalogs(work, reader)
    gate = ScanGate()
    floe = EmbeddedFloe(
        catalogs.catalogs["B"],
        catalogs.properties["B"],
        {workload.name: workload.identifier for workload in WORKLOADS},
        GatedRunner(SparkTaskRunner(reader.spark), gate),
        refresh_interval_s=args.refresh_interval,
        optimizer_threads=args.optimizer_threads,
        min_plan_interval_s=args.min_plan_interval,
    )

    # One round and one (unrecorded) sample first, so that the JVM is warm for both sides.
    catalogs.write_round()
    measure(reader, gate, catalogs.pin(), 0.0, 1, 0)
    floe.start()
    started = time.monotonic()
    rounds = Rounds(catalogs, args.write_interval, args.minutes * 60, started)
    rounds.start()
    samples: list[Sample] = []
    index = 0
    while True:
        writing = rounds.alive()
        with rounds.lock:
            pinned = catalogs.pin()
            done = rounds.done
        batch = measure(reader, gate, pinned, (time.monotonic() - started) / 60, done, index)
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
    samples_json = json.dumps({"samples": [asdict(s) for s in samples], "facts": facts}, indent=1)
    (work / "samples.json").write_text(samples_json)
    return samples, facts


def report_sample(batch: list[Sample]) -> None:
    """One progress line per table: A → B figures."""
    by_key = {(s.table, s.side): s for s in batch}
    for workload in WORKLOADS:
        a, b = by_key[(workload.name, "A")], by_key[(workload.name, "B")]
        same = "same rows" if mismatch(a, b) is None else "ROWS DIFFER"
        files = f"files {a.data_files}+{a.delete_files} / {b.data_files}+{b.delete_files}"
        reads = f"full {a.full_scan_s:.2f}s / {b.full_scan_s:.2f}s  "
        reads += f"filtered {a.filtered_scan_s:.2f}s / {b.filtered_scan_s:.2f}s"
        print(
            f"{a.minute:5.1f} min  round {a.rounds:3d}  {workload.name:9s}  {files}  {reads}  {same}",
            flush=True,
        )


def mismatch(a: Sample, b: Sample) -> str | None:
    """What differs between A's and B's reads of the same rows, or None."""
    read_a = (a.rows, a.hash_sum, a.filtered_rows, a.filtered_hash_sum)
    read_b = (b.rows, b.hash_sum, b.filtered_rows, b.filtered_hash_sum)
    if read_a == read_b:
        return None
    return f"{a.table} at round {a.rounds}: A read (rows, hash, filtered rows, hash) {read_a}, B {read_b}"


def pair_mismatches(samples: list[Sample]) -> dict[tuple[float, int], list[str]]:
    """Per sample (its minute and round) where A and B read differently, the `mismatch` of each table."""
    by_key = {(s.table, s.rounds, s.minute, s.side): s for s in samples}
    found: dict[tuple[float, int], list[str]] = {}
    for a in (s for s in samples if s.side == "A"):
        if (differs := mismatch(a, by_key[(a.table, a.rounds, a.minute, "B")])) is not None:
            found.setdefault((a.minute, a.rounds), []).append(differs)
    return found


def series(samples: list[Sample], table: str, side: str, metric: str) -> tuple[list[float], list[float]]:
    """Minutes and values of one metric of one table on one side."""
    chosen = [s for s in samples if s.table == table and s.side == side]
    return [s.minute for s in chosen], [float(getattr(s, metric)) for s in chosen]


def plot(samples: list[Sample], out: Path) -> list[Path]:
    """One PNG per metric, a panel per table, a line per side; returns the files written.

    Tables whose figure is 0 throughout on both sides (delete files of append-only tables)
    get no panel; the title names them.
    """
    written = []
    for metric, label in METRICS.items():
        shown = [w for w in WORKLOADS if any(getattr(s, metric) for s in samples if s.table == w.name)]
        shown = shown or list(WORKLOADS)
        panels = []
        for w in shown:
            lines = [Line(name, *series(samples, w.name, s, metric), STYLES[s]) for s, name in SIDES.items()]
            panels.append(Panel(lines, w.name))
        title = f"{label}: without floe vs with floe run"
        hidden = [w.name for w in WORKLOADS if w not in shown]
        if hidden:
            title += f"\n({', '.join(hidden)}: 0 throughout, not shown)"
        path = out / f"ingest_{metric}.png"
        written.append(save_plot(path, title, "minutes of streaming ingest", label, panels))
    return written


def result(
    samples: list[Sample], facts: dict[str, Any], args: argparse.Namespace, plots: list[Path]
) -> BenchResult:
    """Final and mean figures of A and B and their ratios, floe's work in B, and the content check."""
    rows = []
    for workload in WORKLOADS:
        for metric, label in METRICS.items():
            _, a = series(samples, workload.name, "A", metric)
            _, b = series(samples, workload.name, "B", metric)
            fmt = "{:.0f}" if "files" in metric else "{:.2f}"
            row = [workload.name, label]
            for x, y in ((a[-1], b[-1]), (statistics.fmean(a), statistics.fmean(b))):  # final, mean
                row += [fmt.format(x), fmt.format(y), times(x, y)]
            rows.append(row)
    events = facts["events"]
    floe_rows = [
        [w.name, *(str(events.get(w.name, {}).get(e, 0)) for e in FLOE_EVENTS.values())] for w in WORKLOADS
    ]
    samples_per_side = len(samples) // (len(WORKLOADS) * len(SIDES))
    differing = pair_mismatches(samples)
    mismatches = [m for found in differing.values() for m in found]
    notes = [
        f"{args.minutes:g} min of writes after a first warm-up round, a round every "
        f"{args.write_interval:g} s ({facts['rounds']} rounds, {facts['late_rounds']} started late), "
        f"sampled every {args.sample_interval:g} s ({samples_per_side} samples); Spark local[{args.cores}], "
        f"{args.optimizer_threads} optimizer threads, refresh every {args.refresh_interval:g} s, "
        f"minPlanInterval {args.min_plan_interval:g} s. A = without floe, B = with floe run; A/B > 1 means "
        "B has fewer files or reads faster.",
        "Writers' appends that lost a race with one of floe's commits and were retried by pyiceberg "
        f"(all in B: nothing else commits to A): {facts['append_retries']}.",
        *(["Mismatches: " + "; ".join(mismatches[:3])] if mismatches else []),
        "Plots: " + ", ".join(f"`{shown_path(p)}`" for p in plots) + ".",
    ]
    return new_result(
        Path(__file__).stem,
        "What users feel: streaming ingest without and with `floe run`",
        "How many files a reader meets and how long Iceberg's Java reader takes for a full and a "
        "filtered read of streaming-ingest tables, left alone (A) and kept optimized by `floe run` (B).",
        targets=[
            Target(
                "A and B read the same rows (count and sum(hash(*)), full and filtered, every table)",
                "at every sample",
                f"at {samples_per_side - len(differing)} of {samples_per_side} samples",
                not mismatches,
            )
        ],
        figures=[
            Figures("A without floe, B with floe run", COMPARED, rows),
            Figures("floe in B", ["table", *FLOE_EVENTS], floe_rows),
        ],
        notes=notes,
    )


COMPARED = ["table", "metric", "final A", "final B", "final A/B", "mean A", "mean B", "mean A/B"]
FLOE_EVENTS = {"optimizing commits": "Committed", "failed processes": "OptimizingFailed"}
FLOE_EVENTS["failed plannings"] = "PlanningFailed"
"""The engine events counted per table in B, by the column that counts them."""


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
    add_plots_argument(parser)
    return parser.parse_args(argv)


def main() -> int:
    """Run, plot, report; exit code 1 if A and B ever read differently."""
    args = parse_args()
    samples, facts = run(args)
    report_result(result(samples, facts, args, plot(samples, args.plots)), args.record)
    return 1 if pair_mismatches(samples) else 0


if __name__ == "__main__":
    sys.exit(main())
