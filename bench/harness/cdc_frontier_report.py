"""The CDC frontier's policies, each policy's figures over a run, and the benchmark's report."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import MiB
from harness.percentiles import percentile
from harness.plots import FrontierPoint, save_frontier, shown_path
from harness.results import BenchResult, Figures, Target, new_result

GiB = 1024 * MiB


@dataclass(frozen=True)
class PolicySetting:
    """One point the benchmark measures: a policy and, for floe's, its ``favor`` setting."""

    policy: str
    favor: str

    def config(self, target: int, args: argparse.Namespace) -> Any:
        """The table's optimizing config under this setting, Amoro's minor interval an hour of rounds
        (half a round short, so that a round's jitter cannot move it by one)."""
        from floe.planning.config import OptimizingConfig

        return OptimizingConfig(
            target_size=target,
            max_task_size_bytes=target,
            minor_trigger_interval_s=(args.rounds_per_hour - 0.5) * args.round_period_s,
            major_duplicate_ratio=args.duplicate_ratio,
            policy=self.policy,
            favor=self.favor,
        )


POLICIES = {
    "amoro": PolicySetting("amoro", "balanced"),
    "floe-reads": PolicySetting("floe", "reads"),
    "floe-default": PolicySetting("floe", "balanced"),
    "floe-writes": PolicySetting("floe", "writes"),
}
"""The settings measured, by the name the results use; floe-default is floe's default favor."""


def policy_figures(rounds: Sequence[Mapping[str, Any]], hour_rounds: int) -> dict[str, Any]:
    """One policy's figures over one workload's rounds."""
    ingested = sum(r["ingested_bytes"] for r in rounds)
    written = sum(r["written_bytes"] for r in rounds)
    written_deletes = sum(r["written_delete_bytes"] for r in rounds)
    half = rounds[len(rounds) // 2 :]
    reads = [r["read_amplification"] for r in rounds]
    ranges = [r["range_read_amplification"] for r in rounds]
    by_type: Counter[str] = Counter()
    for r in rounds:
        by_type[r["optimizing"]] += r["written_bytes"]
    return {
        "write_amplification": written / ingested,
        "write_amplification_second_half": sum(r["written_bytes"] for r in half)
        / sum(r["ingested_bytes"] for r in half),
        "read_amplification_mean": sum(reads) / len(reads),
        "read_amplification_p95": percentile(reads, 0.95),
        "range_read_amplification_mean": sum(ranges) / len(ranges),
        "range_read_amplification_p95": percentile(ranges, 0.95),
        "delete_files_mean": sum(r["delete_files"] for r in rounds) / len(rounds),
        "delete_files_max": max(r["delete_files"] for r in rounds),
        "cpu_s_per_gib": sum(r["optimize_cpu_s"] for r in rounds) / (ingested / GiB),
        "bytes_held": rounds[-1]["bytes_held"],
        "bytes_held_max": max(r["bytes_held"] for r in rounds),
        "data_files_end": rounds[-1]["data_files"],
        "ingested_bytes": ingested,
        "written_bytes": written,
        "written_delete_bytes": written_deletes,
        "written_bytes_by_type": {kind: size for kind, size in sorted(by_type.items()) if size},
        "compacted_full_s_mean": sum(r["compacted_full_s"] for r in rounds) / len(rounds),
        "rounds": len(rounds),
        "hour_rounds": hour_rounds,
    }


HEADERS = [
    "policy",
    "WA",
    "WA 2nd half",
    "read mean",
    "read p95",
    "range mean",
    "range p95",
    "delete files mean / max",
    "CPU s / GiB",
    "held MiB",
    "MiB written, by type",
    "of which deletes",
]


def _row(policy: str, f: Mapping[str, Any]) -> list[str]:
    by_type = ", ".join(f"{k} {v / MiB:.1f}" for k, v in f["written_bytes_by_type"].items()) or "-"
    return [
        policy,
        f"{f['write_amplification']:.2f}",
        f"{f['write_amplification_second_half']:.2f}",
        f"{f['read_amplification_mean']:.2f}",
        f"{f['read_amplification_p95']:.2f}",
        f"{f['range_read_amplification_mean']:.2f}",
        f"{f['range_read_amplification_p95']:.2f}",
        f"{f['delete_files_mean']:.1f} / {f['delete_files_max']}",
        f"{f['cpu_s_per_gib']:.0f}",
        f"{f['bytes_held'] / MiB:.0f}",
        by_type,
        f"{f['written_delete_bytes'] / MiB:.1f}",
    ]


def _targets(figures: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[Target]:
    """The issue's targets, for the workloads and policies this run measured."""
    targets = []
    for workload, most in (("uniform", 0.75), ("appends", 0.75), ("skewed", 0.5)):
        policies = figures.get(workload, {})
        if "amoro" not in policies or "floe-default" not in policies:
            continue
        amoro, floe = policies["amoro"], policies["floe-default"]
        ratio = floe["write_amplification"] / amoro["write_amplification"]
        reads_ok = floe["read_amplification_mean"] <= amoro["read_amplification_mean"]
        measured = (
            f"{ratio:.2f}x; read mean {floe['read_amplification_mean']:.2f} vs "
            f"{amoro['read_amplification_mean']:.2f}"
        )
        if workload == "skewed":
            reads_ok = reads_ok and floe["read_amplification_p95"] <= amoro["read_amplification_p95"]
            measured += f", p95 {floe['read_amplification_p95']:.2f} vs {amoro['read_amplification_p95']:.2f}"
        no_worse = "mean and p95 reads" if workload == "skewed" else "mean reads"
        targets.append(
            Target(
                f"{workload}: floe-default WA / Amoro's, {no_worse} no worse",
                f"<= {most:g}x",
                measured,
                ratio <= most and reads_ok,
            )
        )
    skewed = {p: f for p, f in figures.get("skewed", {}).items() if p.startswith("floe")}
    if skewed:
        # The nearest miss: the fastest p95 among the settings within the WA bound, else the least WA.
        within = [p for p, f in skewed.items() if f["write_amplification"] <= 3]
        best = (
            min(within, key=lambda p: skewed[p]["read_amplification_p95"])
            if within
            else min(skewed, key=lambda p: skewed[p]["write_amplification"])
        )
        met = [
            p
            for p, f in skewed.items()
            if f["write_amplification"] <= 3 and f["read_amplification_p95"] <= 1.5
        ]
        shown = met[0] if met else best
        f = skewed[shown]
        targets.append(
            Target(
                "skewed: some floe setting with WA <= 3 and p95 reads <= 1.5x",
                "one",
                f"{shown}: WA {f['write_amplification']:.2f}, p95 {f['read_amplification_p95']:.2f}x",
                bool(met),
            )
        )
    return targets


def frontier_plots(figures: Mapping[str, Mapping[str, Mapping[str, Any]]], directory: Path) -> list[Path]:
    """One PNG per workload: write amplification against mean read amplification, a point per policy."""
    written = []
    for workload, policies in figures.items():
        points = [
            FrontierPoint(
                policy,
                f["read_amplification_mean"],
                f["write_amplification"],
                f["read_amplification_p95"],
                reference=policy == "amoro",
            )
            for policy, f in policies.items()
        ]
        written.append(
            save_frontier(
                directory / f"cdc_frontier_{workload}.png",
                f"CDC {workload}: write against read amplification",
                points,
            )
        )
    return written


def frontier_result(
    args: argparse.Namespace,
    runs: Mapping[str, Mapping[str, Any]],
    figures: Mapping[str, Mapping[str, Mapping[str, Any]]],
    stem: str,
) -> BenchResult:
    """The benchmark's result: the targets, a table per workload, where the bytes go, the plots."""
    plots = frontier_plots(figures, args.plots)
    tables = [
        Figures(workload, HEADERS, [_row(p, f) for p, f in policies.items()])
        for workload, policies in figures.items()
    ]
    some = next(iter(figures.values()))
    compacted = {w: next(iter(p.values()))["compacted_full_s_mean"] for w, p in figures.items()}
    spread = {w: _read_spread(run) for w, run in runs.items()}
    late = [
        r["late_s"] for run in runs.values() for rs in run["rounds"].values() for r in rs if r["late_s"] > 0.5
    ]
    return new_result(
        stem,
        "CDC write amplification against read amplification",
        "How many bytes optimizing writes per byte a CDC table ingests (WA), and how much slower the table "
        "reads than the same rows compacted, under Amoro's policy and floe's at each favor setting, on the "
        "same seeded writes: upserts over all keys, upserts skewed to the newest keys, and appends.",
        targets=_targets(figures),
        figures=tables,
        notes=[
            f"Base: {args.base_rows:,} rows in {args.base_files} files written by Iceberg's Java writer; "
            f"{args.rounds} rounds of {args.rows_per_round:,} rows, {args.rounds_per_hour} rounds = 1 hour "
            f"(Amoro's minor interval), a round every {args.round_period_s:g} s "
            f"({len(late)} policy-rounds late, at most {max(late, default=0):.1f} s). Target file size "
            f"{args.target_mib:g} MiB; Amoro's duplicate ratio {args.duplicate_ratio:g}. "
            f"{next(iter(some.values()))['rounds']} rounds per policy.",
            "WA = bytes written by optimizing / bytes ingested (data and delete files), cumulative; "
            "2nd half: over the second half of the rounds. Read = the fastest of "
            f"{args.reads} reads (`count(*)`, `sum(hash(*))`) by Iceberg's Java reader / the same of a CTAS "
            "copy of the rows in target-sized files, full and over 1 % of the keys, mean and p95 over "
            "rounds. The compacted copy's full read took "
            + ", ".join(f"{w} {s:.2f} s" for w, s in compacted.items())
            + " on average; it reads the same rows each round but for the round's own, so its spread "
            "over the rounds (p95 / median of its time per row) is the noise floor of the ratios: "
            + ", ".join(f"{w} {s:.2f}" for w, s in spread.items())
            + ". CPU = the optimizing process's CPU seconds (Python and the JVM) per GiB "
            f"ingested. Held = bytes of every file a snapshot of the last {args.retention_hours:g} hours "
            "keeps. Every table read the same rows as the compacted copy after every round.",
            "Plots: " + ", ".join(f"`{shown_path(path)}`" for path in plots) + ".",
        ],
    )


def _read_spread(run: Mapping[str, Any]) -> float:
    """p95 / median of the compacted copy's full read time per row over a workload's rounds: how
    much the same read varies on this machine from round to round (per row, as the rows grow)."""
    times = [r["compacted_full_s"] / r["rows"] for r in next(iter(run["rounds"].values()))]
    return percentile(times, 0.95) / percentile(times, 0.5)
