"""Scheduling overhead: how many tasks floe's task service hands out per second, and how fast.

The real `TaskService` holds 1,000 tables, each with a queued process of synthetic task
specs (`harness.task_workload`); 64 simulated optimizer threads poll → ack → complete as
fast as they can, each completion asking for the thread's next task. Runs: ``direct``
(the in-memory service, no HTTP) and ``http`` (the real server and client over
127.0.0.1), once per policy, and ``heartbeat`` (the floor of one HTTP request). Reported
per run: tasks per second, poll / ack / complete latency as the client sees it, and the
service's CPU per task. Targets (not asserted): ≥ 1,000 tasks/s, p99 poll < 50 ms.
Described in full in ``docs/benchmarks/index.md``.

Run: ``nice -n 10 .venv/bin/python bench/scheduling_overhead.py [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from harness.cli import benchmark_parser
from harness.cpu import process_cpu_seconds
from harness.figures import columns_figures
from harness.optimizer_load import LoadConfig, run_load
from harness.profiling import listing, own_time_by_area, profiling_every_thread
from harness.results import BenchResult, Figures, Target, new_result, report_result
from harness.service_child import run_against_service, serve_until_stdin_closes
from harness.steps import run_requested_step, run_step
from harness.task_workload import build_service
from harness.transports import DirectTransport, HttpTransport

from floe.api.group import SchedulingPolicy
from floe.service.http import TaskServiceServer

SCRIPT = Path(__file__).resolve()
TARGET_TASKS_PER_S = 1000.0
TARGET_P99_POLL_MS = 50.0


def step_serve(args: argparse.Namespace) -> dict[str, Any]:
    """Serve the service over HTTP until stdin closes (`serve_until_stdin_closes`).

    With ``--profile-out`` every thread is profiled from the server's start (the tables
    and processes are set up before).
    """
    refiller = build_service(args.tables, args.groups, args.tasks_per_table, SchedulingPolicy(args.policy))
    with profiling_every_thread(args.profile_out) if args.profile_out else nullcontext():
        server = TaskServiceServer(refiller.service)
        server.start()
        refiller.start()
        serve_until_stdin_closes(Path(args.url_file), server.url)
        refiller.stop()
        server.stop()
    return {"processes_queued": refiller.processes}


def step_load(args: argparse.Namespace) -> dict[str, Any]:
    """The simulated optimizers against the HTTP service at ``--url`` (pid ``--service-pid``)."""
    config = LoadConfig.from_args(args)
    return run_load(HttpTransport(args.url), config, lambda: process_cpu_seconds(args.service_pid))


def step_direct(args: argparse.Namespace) -> dict[str, Any]:
    """The simulated optimizers calling the in-memory service in this process."""
    refiller = build_service(args.tables, args.groups, args.tasks_per_table, SchedulingPolicy(args.policy))
    refiller.start()
    try:
        result = run_load(DirectTransport(refiller.service), LoadConfig.from_args(args), time.process_time)
    finally:
        refiller.stop()
    return result | {"processes_queued": refiller.processes}


def common_args(args: argparse.Namespace, policy: str) -> list[str]:
    """The workload's flags, passed on to a child."""
    return [
        f"--tables={args.tables}",
        f"--groups={args.groups}",
        f"--tasks-per-table={args.tasks_per_table}",
        f"--policy={policy}",
        f"--optimizers={args.optimizers}",
        f"--threads={args.threads}",
        f"--warmup={args.warmup}",
        f"--seconds={args.seconds}",
        f"--max-cycles={args.max_cycles}",
        *(["--separate-poll"] if args.separate_poll else []),
    ]


def run_http(
    args: argparse.Namespace, policy: str, mode: str, label: str, profile: Path | None
) -> dict[str, Any]:
    """Start the service child, run the load child against it, stop the service."""
    serve = ["--step=serve", *common_args(args, policy), *([f"--profile-out={profile}"] if profile else [])]
    load = ["--step=load", f"--mode={mode}", *common_args(args, policy)]
    return run_against_service(SCRIPT, serve, load, args.dir, label)


PROFILE_AREAS = (
    (
        "policy ordering: sort tables (quota: occupation ledger)",
        (
            "floe/scheduling/policy.py",
            "floe/scheduling/occupation.py",
            "floe/scheduling/records.py:occupation",
        ),
    ),
    ("rest of the scheduler (group_scheduler.py, attempts.py)", ("floe/scheduling/",)),
    ("floe's task service and HTTP handlers", ("floe/service/",)),
    ("pydantic (validation, serialization)", ("pydantic",)),
    ("aiohttp", ("aiohttp", "multidict", "yarl")),
    ("asyncio, threads, sockets", ("asyncio", "selectors", "concurrent/futures", "threading", "socket")),
    # The simulated engine (the refiller) is in harness/task_workload.py, the step in this script.
    ("the benchmark's simulated engine", ("scheduling_overhead.py", "bench/harness/")),
)
"""Areas of code the service's CPU time is split into, by ``file:function`` of each profiled function."""


def profile_area(file: str, function: str) -> str:
    """The `PROFILE_AREAS` label of a profiled function ("other" when none matches)."""
    where = f"{file}:{function}"
    for label, markers in PROFILE_AREAS:
        if any(marker in where for marker in markers):
            return label
    return "other"


def profile_figures(path: Path, limit: int) -> Figures:
    """The profiled service's CPU by area of code (`own_time_by_area`); prints its top functions."""
    print(listing(path, [("tottime", limit), ("cumulative", limit)]))
    areas = own_time_by_area(path, profile_area)
    total = sum(areas.values())
    ranked = sorted(areas.items(), key=lambda item: -item[1])
    return Figures(
        f"Service CPU under cProfile by area of code (thread CPU time, every thread): {total:.2f} s",
        ["area of code (own time)", "CPU s", "share"],
        [[label, f"{seconds:.2f}", f"{seconds / total:.0%}"] for label, seconds in ranked],
    )


def runs_figures(results: dict[str, dict[str, Any]]) -> Figures:
    """One row per run: tasks handed out, latency as the client sees it, CPU of service and client."""
    return columns_figures(
        "Runs",
        [
            ("run", lambda r: r["name"]),
            ("tasks/s", lambda r: f"{r['tasks_per_s']:,.0f}"),
            ("tasks/s by quarter", lambda r: " / ".join(f"{q:,.0f}" for q in r["tasks_per_s_by_quarter"])),
            ("poll ms p50 / p99 / max", lambda r: "{p50:.1f} / {p99:.1f} / {max:.0f}".format(**r["poll_ms"])),
            ("ack / complete ms p50", lambda r: f"{r['ack_ms']['p50']:.1f} / {r['complete_ms']['p50']:.1f}"),
            ("service CPU ms/task", lambda r: f"{r['service_cpu_ms_per_task']:.2f}"),
            (
                "tasks/s per service core",
                lambda r: (
                    f"{1000 / r['service_cpu_ms_per_task']:,.0f}" if r["service_cpu_ms_per_task"] else "-"
                ),
            ),
            ("service core", lambda r: f"{r['service_core_pct']:.0f}%"),
            ("client core", lambda r: f"{r['client_core_pct']:.0f}%"),
            ("empty polls", lambda r: str(r["empty_polls"])),
            ("errors", lambda r: str(r["errors"])),
        ],
        [{"name": name, **r} for name, r in results.items()],
    )


def result(
    args: argparse.Namespace, results: dict[str, dict[str, Any]], floor: dict[str, Any]
) -> BenchResult:
    """The result: the runs, the HTTP floor, each run against the targets, the profile if taken."""
    figures = [runs_figures(results)]
    figures.append(
        Figures(
            "HTTP floor (heartbeats only)",
            ["requests/s", "latency ms p50 / p99", "service CPU ms/request", "service core", "client core"],
            [
                [
                    f"{floor['tasks_per_s']:,.0f}",
                    f"{floor['poll_ms']['p50']:.1f} / {floor['poll_ms']['p99']:.1f}",
                    f"{floor['service_cpu_ms_per_task']:.2f}",
                    f"{floor['service_core_pct']:.0f}%",
                    f"{floor['client_core_pct']:.0f}%",
                ]
            ],
        )
    )
    targets = []
    for name, r in results.items():
        rate, p99 = r["tasks_per_s"], r["poll_ms"]["p99"]
        targets.append(Target(f"{name}: tasks/s", ">= 1,000", f"{rate:,.0f}", rate >= TARGET_TASKS_PER_S))
        targets.append(Target(f"{name}: p99 poll", "< 50 ms", f"{p99:.1f} ms", p99 < TARGET_P99_POLL_MS))
    requests = (
        "three requests (poll, ack, complete)" if args.separate_poll else "two requests (ack, complete)"
    )
    notes = [
        f"{args.tables:,} tables in {args.groups} group(s), {args.tasks_per_table} tasks per process, "
        f"{args.threads} optimizer threads ({args.optimizers} optimizers), warm-up {args.warmup:g} s, "
        f"window {args.seconds:g} s. direct = the in-memory service, http = the real server and client "
        f"over 127.0.0.1; a task costs {requests} while work is queued.",
    ]
    errors = [e for r in (*results.values(), floor) for e in r["first_errors"]]
    if errors:
        notes.append("Errors seen (first ones): " + "; ".join(errors))
    return new_result(
        "scheduling_overhead",
        "Scheduling overhead",
        "How many tasks floe's task service and scheduler hand out per second to 64 optimizer threads "
        "polling as fast as they can, with 1,000 tables queued, and the latency each call sees.",
        targets=targets,
        figures=figures,
        notes=notes,
    )


def main_parent(args: argparse.Namespace) -> int:
    """Run every variant and report the result."""
    args.dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    for policy in args.policies:
        print(f"[{policy}] in-memory service, {args.threads} threads ...", flush=True)
        results[f"{policy} direct"] = run_step(
            SCRIPT,
            ["--step=direct", "--mode=tasks", *common_args(args, policy)],
            args.dir,
            f"{policy}-direct",
        )
        print(f"[{policy}] HTTP service, {args.threads} threads ...", flush=True)
        results[f"{policy} http"] = run_http(args, policy, "tasks", f"{policy}-http", None)
    print("HTTP heartbeats only ...", flush=True)
    floor = run_http(args, args.policies[0], "heartbeat", "heartbeat", None)
    profile_areas = None
    if args.profile:
        print(f"[{args.policies[0]}] HTTP service under cProfile ...", flush=True)
        profile = args.dir / "logs" / "service.prof"
        results[f"{args.policies[0]} http, profiled"] = run_http(
            args, args.policies[0], "tasks", "profiled-http", profile
        )
        profile_areas = profile_figures(profile, args.profile_lines)
    outcome = result(args, results, floor)
    if profile_areas is not None:
        outcome.figures.append(profile_areas)
    report_result(outcome, args.record)
    return 1 if any(r["errors"] for r in (*results.values(), floor)) else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = benchmark_parser(
        __doc__,
        "scheduling",
        profile="add an HTTP run with the service profiled",
        steps=("serve", "load", "direct"),
    )
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=1, help="tables are spread round-robin over them")
    parser.add_argument("--tasks-per-table", type=int, default=8, help="tasks of each queued process")
    parser.add_argument("--threads", type=int, default=64, help="simulated optimizer threads in all")
    parser.add_argument("--optimizers", type=int, default=4, help="optimizers the threads are split over")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before the window")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window")
    parser.add_argument("--max-cycles", type=int, default=1_000_000, help="cap on polls per thread")
    parser.add_argument(
        "--separate-poll",
        action="store_true",
        help="poll for every task, not letting completions bring the next (three requests per task)",
    )
    parser.add_argument(
        "--policies", nargs="+", default=["quota", "balanced"], choices=[p.value for p in SchedulingPolicy]
    )
    parser.add_argument("--profile-lines", type=int, default=25)
    # Child steps.
    parser.add_argument("--mode", choices=["tasks", "heartbeat"], default="tasks", help=argparse.SUPPRESS)
    parser.add_argument("--policy", default="quota", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--url-file", help=argparse.SUPPRESS)
    parser.add_argument("--service-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads % args.optimizers or args.optimizers % args.groups:
        parser.error("--threads must divide evenly over --optimizers, and --optimizers over --groups")
    return args


def main() -> int:
    """Entry point: the parent, or one child step."""
    args = parse_args()
    if args.step is None:
        return main_parent(args)
    run_requested_step(args, {"serve": step_serve, "load": step_load, "direct": step_direct})
    return 0


if __name__ == "__main__":
    sys.exit(main())
