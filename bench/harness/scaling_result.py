"""The autoscaling benchmarks' result: each group's executor-seconds and latencies, where the latency goes.

Targets: the autoscaled group holds >= 50 % fewer executor-seconds than the static group, and
its median trigger-to-commit latency is <= 1.2x the static group's.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field

from harness.bursts import Burst
from harness.results import BenchResult, Figures, Target, new_result

QUESTION = (
    "Executors sized by demand (`minExecutors: 0`) against a group sized for the peak, on tables that "
    "each get a burst of small files every period: how many executor-seconds autoscaling saves, and how "
    "much later a burst is committed (trigger-to-commit latency: from a table's last file of a burst to "
    "floe's snapshot of it)."
)
GROUP_HEADERS = [
    "group",
    "executor-s",
    "wall s",
    "most executors",
    "scale changes",
    "median latency s",
    "median latency s, refresh waits pooled",
    "p95 latency s",
]
STAGES_TITLE = "Where each group's latency goes, median / p95 s"


@dataclass
class ModeResult:
    """One group's run of the pattern."""

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
        """Each measured burst's trigger-to-commit latency."""
        return [b.latency_s for b in self.bursts]


def p95(values: list[float]) -> float:
    """The 95th percentile of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


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


def breakdown(results: dict[str, ModeResult]) -> tuple[Figures | None, list[str]]:
    """Where each group's latency goes, for the bursts whose marks are known, and a note on each
    group's executor pod starts.

    The stages: to the planning (the table refresh finding the burst; where every group's
    planning times are known), to the handout of the first task (planning, a thread polling the
    task: for a waking group, the scale-up and its optimizer's registration), from it to the
    task's start on an executor (an executor to run it on: one waking, with its Python worker),
    and from there to the commit (the task and the commit)."""
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
                *(f"{statistics.median(stage):.1f} / {p95(stage):.1f}" for stage in stages),
            ]
        )
    to_handout = (
        ["trigger → planned", "planned → first task handed to Spark"]
        if with_planning
        else ["trigger → first task handed to Spark"]
    )
    headers = ["group", "bursts", *to_handout, "handed out → began on an executor", "began → commit"]
    notes = [
        f"{r.mode}: {len(r.pod_starts_s)} executor pods created while measuring, from creation to "
        f"their container running median {statistics.median(r.pod_starts_s):.1f} s, "
        f"p95 {p95(r.pod_starts_s):.1f} s (Kubernetes' timestamps, whole seconds)."
        for r in results.values()
        if r.pod_starts_s
    ]
    return (Figures(STAGES_TITLE, headers, rows) if rows else None), notes


def scaling_result(
    benchmark: str, title: str, results: dict[str, ModeResult], args: argparse.Namespace, setting: str
) -> BenchResult:
    """The result of both groups' runs: targets, each group's figures, where the latency goes;
    the pattern (from `args`) and where it ran (`setting`) as a note."""
    static, auto = results["static"], results["autoscaled"]
    saved = 1 - auto.executor_seconds / static.executor_seconds
    latency_ratio = statistics.median(auto.latencies) / statistics.median(static.latencies)
    pooled = refresh_pooled_medians(results)
    rows = [
        [
            r.mode,
            f"{r.executor_seconds:.0f}",
            f"{r.wall_s:.0f}",
            str(r.most_executors),
            str(r.scale_changes),
            f"{statistics.median(r.latencies):.1f}",
            f"{pooled[r.mode]:.1f}" if pooled else "-",
            f"{p95(r.latencies):.1f}",
        ]
        for r in (static, auto)
    ]
    pooled_ratio = f"{pooled['autoscaled'] / pooled['static']:.2f}x" if pooled else "-"
    notes = [
        f"{args.tables} tables, each getting {args.burst_files} files of {args.rows:,} rows at once every "
        f"{args.period:g} s (each at a random offset in the round's first {args.jitter:g} s), {args.rounds} "
        f"rounds after {args.warmup_rounds} not counted; executors of {args.cores} cores, at most "
        f"{args.max_executors}; scale-down delay {args.scale_down_delay:g} s. {setting}",
        f"Autoscaled / static: median latency with the refresh waits pooled {pooled_ratio}, p95 latency "
        f"{p95(auto.latencies) / p95(static.latencies):.2f}x. Refresh waits pooled: each group's median of "
        "every trigger → planned wait of both groups' bursts plus each of its own planned → commit times. "
        "The table refresh is the same code for both groups and where a burst falls in its period is "
        "chance, which a few rounds sample only a few times.",
    ]
    stages, pod_notes = breakdown(results)
    return new_result(
        benchmark,
        title,
        QUESTION,
        targets=[
            Target("executor-seconds saved by the autoscaled group", ">= 50 %", f"{saved:.0%}", saved >= 0.5),
            Target(
                "median trigger-to-commit latency, autoscaled / static",
                "<= 1.2x",
                f"{latency_ratio:.2f}x",
                latency_ratio <= 1.2,
            ),
        ],
        figures=[Figures("Each group's run", GROUP_HEADERS, rows), *([stages] if stages else [])],
        notes=notes + pod_notes,
    )
