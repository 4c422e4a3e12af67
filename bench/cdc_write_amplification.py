"""CDC write amplification against read amplification: Amoro's policy and floe's, as a frontier.

Three workloads write the same seeded rounds into one table per policy (`harness.cdc_workloads`):
``uniform`` (upserts over all keys), ``skewed`` (new orders, and upserts 90 % on the newest 10 %
of keys) and ``appends`` (appends, with a few deletes once an hour). floe optimizes each table
after every round with its own triggers, as ``floe run`` does, under Amoro's policy or floe's at
each ``favor`` setting; an "hour" is ``--rounds-per-hour`` rounds, and Amoro's minor interval is
one. After every round each table records the bytes its optimizing wrote and its CPU time, its
live delete files, the bytes its snapshots within ``--retention-hours`` hold, and a full read and
a key-range read by Iceberg's Java reader, each against the same read of the same rows compacted
(`harness.frontier_reads`). Every table must read the same rows after every round.

Run: ``nice -n 10 .venv/bin/python bench/cdc_write_amplification.py --record`` (about 45 minutes a
workload; on a quiet machine, as the reads are timed). The workloads may be run one at a time into
one ``--dir`` (``--workloads uniform``, ...) and reported together with ``--report-only --record``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from harness import MiB
from harness.cdc_frontier_report import POLICIES, frontier_result, policy_figures
from harness.cdc_workloads import WORKLOADS, Workload
from harness.cli import benchmark_parser, comma_separated
from harness.conditions import load_conditions, save_conditions, under
from harness.cpu import TreeCpuSampler
from harness.frontier_reads import LiveFiles
from harness.plots import add_plots_argument
from harness.results import RESULTS_DIR, report_result
from harness.steps import run_requested_step, run_step
from harness.warehouse import opened, sql_catalog_properties
from pyiceberg.catalog.sql import SqlCatalog

SCRIPT = Path(__file__).resolve()
STEP_FLAGS = ["seed", "base_rows", "base_files", "rows_per_round", "rounds", "rounds_per_hour", "target_mib"]
STEP_FLAGS += ["round_period_s", "duplicate_ratio", "retention_hours", "reads"]
"""The flags a workload's own process gets, besides ``--workload`` and ``--policies``."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's flags, each checked."""
    parser = benchmark_parser(__doc__ or "", "cdc", seed="row and key generator seed", steps=["workload"])
    add = parser.add_argument
    add("--workloads", type=comma_separated(WORKLOADS), default=",".join(WORKLOADS))
    add("--policies", type=comma_separated(list(POLICIES)), default=",".join(POLICIES))
    # 24 M rows: the compacted copy's full read takes 3-3.5 s here, so a round's read ratios are
    # not the noise of short reads (1.7 s at 12 M rows, 0.5-0.9 s at 2.4 M); a round's writes grow
    # with the base, so that a round changes the same share of it.
    add("--base-rows", type=int, default=24_000_000, help="rows before the first round")
    add("--base-files", type=int, default=40, help="appends of the base rows, each one file")
    add("--rows-per-round", type=int, default=96_000, help="rows each round writes")
    add("--rounds", type=int, default=24)
    add("--rounds-per-hour", type=int, default=4, help="rounds in an hour: Amoro's minor interval")
    add("--target-mib", type=float, default=16.0, help="target file size, MiB")
    add(
        "--round-period-s",
        type=float,
        default=90.0,
        help="wall time from one round's writes to the next's (at least a round's work: 85-95 s at "
        "the default base; a round that starts late is reported)",
    )
    add("--duplicate-ratio", type=float, default=0.1, help="Amoro's major.trigger.duplicate-ratio")
    add("--retention-hours", type=float, default=2.0, help="how long snapshots are kept (bytes held)")
    add("--reads", type=int, default=2, help="reads of each table per round; the fastest counts")
    add("--workload", choices=WORKLOADS, help=argparse.SUPPRESS)
    add(
        "--report-only",
        action="store_true",
        help="report the --workloads whose results --dir holds (each may come from another run "
        "with the same flags), with the last run's settings",
    )
    add_plots_argument(parser)
    args = parser.parse_args(argv)
    for name in ("base_rows", "base_files", "rows_per_round", "rounds", "rounds_per_hour", "reads"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, not {getattr(args, name)}")
    if args.round_period_s <= 0 or args.target_mib <= 0 or args.retention_hours <= 0:
        parser.error("--round-period-s, --target-mib and --retention-hours must be positive")
    if args.rows_per_round * 10 > args.base_rows:
        parser.error(f"--base-rows must be at least 10x --rows-per-round ({args.rows_per_round * 10})")
    if args.report_only:
        missing = [w for w in args.workloads if not (args.dir / "logs" / f"{w}.json").is_file()]
        if missing:
            parser.error(f"--report-only: no results of {', '.join(missing)} in {args.dir / 'logs'}")
    return args


def main() -> None:
    args = parse_args()
    if args.step:
        run_requested_step(args, {"workload": run_workload})
        return
    logs = args.dir / "logs"
    if not args.report_only:
        args.dir.mkdir(parents=True, exist_ok=True)
        flags = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in STEP_FLAGS]
        flags += [f"--policies={','.join(args.policies)}", f"--dir={args.dir}"]
        for workload in args.workloads:
            run_step(SCRIPT, ["--step", "workload", f"--workload={workload}", *flags], args.dir, workload)
        settings = {k: getattr(args, k) for k in [*STEP_FLAGS, "workloads", "policies"]}
        save_conditions(logs / "run.json", settings)
    conditions, settings = load_conditions(logs / "run.json")
    # The workloads asked for: a large base's workloads may each be run on its own, in turn.
    settings.pop("workloads", None)
    vars(args).update(settings)
    runs = {w: json.loads((logs / f"{w}.json").read_text()) for w in args.workloads}
    figures = {
        w: {p: policy_figures(run["rounds"][p], run["hour_rounds"]) for p in run["rounds"]}
        for w, run in runs.items()
    }
    if args.record:
        path = RESULTS_DIR / "cdc.json"
        path.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    result = frontier_result(args, runs, figures, SCRIPT.stem)
    report_result(under(result, conditions), args.record)


# -- one workload, every policy in lockstep, in a child process -----------------------------


def run_workload(args: argparse.Namespace) -> dict[str, Any]:
    """Build a table per policy, then write and optimize round after round, measuring after each."""
    from harness.cdc_orders import create_table
    from harness.frontier_reads import FrontierReads, held_bytes, live_set

    from floe.local.optimize import optimize_once
    from floe.local.reference_jars import reference_jars
    from floe.local.reference_reader import ReferenceReader, qualified_name
    from floe_optimizer.spark_session import get_spark

    target = int(args.target_mib * MiB)
    workload = Workload(args.workload, args.rows_per_round, args.rounds_per_hour)
    args.dir.mkdir(parents=True, exist_ok=True)
    scratch = args.dir / args.workload
    # Each run builds its tables anew: a catalog left by an earlier run would hold them already.
    shutil.rmtree(scratch, ignore_errors=True)
    properties = sql_catalog_properties(scratch / "catalog.db", scratch / "warehouse")
    scratch.mkdir(parents=True, exist_ok=True)
    spark = get_spark(
        master="local[2]", app_name=f"floe-bench-cdc-{args.workload}", extra_jars=reference_jars()
    )
    reader = ReferenceReader(spark)
    configs = {p: POLICIES[p].config(target, args) for p in args.policies}
    names = {p: f"db.orders_{p.replace('-', '_')}" for p in args.policies}
    rounds: dict[str, list[dict[str, Any]]] = {p: [] for p in args.policies}
    history: dict[str, list[LiveFiles]] = {p: [] for p in args.policies}
    hour_rounds = args.rounds_per_hour
    retention_rounds = max(1, round(args.retention_hours * hour_rounds))
    with opened(SqlCatalog("cdc", **properties)) as catalog:
        reader.register_sql_catalog("cdc", scratch / "catalog.db", properties["warehouse"])
        tables, orders = {}, None
        for policy in args.policies:
            tables[policy], orders = create_table(
                catalog, reader, args.seed, args.base_rows, args.base_files, scratch, names[policy]
            )
            # The rounds start from the table as floe keeps it: what it writes first is not counted.
            while optimize_once(tables[policy], names[policy], configs[policy], spark=lambda: spark).commit:
                pass
            tables[policy].refresh()
        assert orders is not None
        reads = FrontierReads(
            reader,
            {p: qualified_name("cdc", names[p]) for p in args.policies},
            qualified_name("cdc", "db.orders_compacted"),
            target,
            args.reads,
        )
        first_round = time.monotonic()
        for number in range(1, args.rounds + 1):
            # Rounds keep a fixed pace, so Amoro's minor interval (in wall time) spans whole rounds.
            late_s = time.monotonic() - (first_round + (number - 1) * args.round_period_s)
            if late_s < 0:
                time.sleep(-late_s)
            rows, deleted = workload.round(orders, number)
            for policy in args.policies:
                table = tables[policy]
                ingested = workload.write(table, rows, deleted)
                history[policy].append(live_set(table))
                with TreeCpuSampler() as cpu:
                    result = optimize_once(table, names[policy], configs[policy], spark=lambda: spark)
                table.refresh()
                commit = result.commit
                # A process that rewrites and converts commits a replace and then a delete snapshot.
                snapshots = (commit.snapshot_ids or (commit.snapshot_id,)) if commit else ()
                added = [_added_bytes(table, snapshot) for snapshot in snapshots]
                history[policy].append(live_set(table))
                rounds[policy].append(
                    {
                        "round": number,
                        "ingested_bytes": ingested,
                        "written_bytes": sum(data + deletes for data, deletes in added),
                        "written_delete_bytes": sum(deletes for _, deletes in added),
                        "optimizing": result.plan.optimizing_type.label
                        if result.commit and result.plan.optimizing_type
                        else "-",
                        "optimize_cpu_s": cpu.seconds,
                        "bytes_held": held_bytes(history[policy][-2 * retention_rounds :]),
                        "late_s": max(late_s, 0.0),
                        **history[policy][-1].counts(),
                    }
                )
            measured = reads.measure(number)
            for policy in args.policies:
                rounds[policy][-1].update(measured[policy])
                print(args.workload, policy, rounds[policy][-1], flush=True)
    # Only the figures are kept: a workload's tables take about 18 GB at the default base.
    shutil.rmtree(scratch, ignore_errors=True)
    return {"workload": args.workload, "hour_rounds": hour_rounds, "rounds": rounds}


def _added_bytes(table: Any, snapshot_id: int) -> tuple[int, int]:
    """Bytes of the data files and of the delete files snapshot ``snapshot_id`` of ``table`` added,
    read from its manifests as floe's commit validation reads them."""
    from pyiceberg.manifest import DataFileContent

    from floe.tables.manifest_io import added_entries

    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    entries = added_entries(snapshot, table.io, table.metadata.format_version) if snapshot else []
    data = sum(e.data_file.file_size_in_bytes for e in entries if e.data_file.content == DataFileContent.DATA)
    deletes = sum(e.data_file.file_size_in_bytes for e in entries) - data
    return data, deletes


if __name__ == "__main__":
    main()
