"""Scheduling overhead: how many tasks floe's task service hands out per second, and how fast.

The real `TaskService` holds 1,000 tables, each with a queued process of synthetic task
specs (`harness.task_workload`); 64 simulated optimizer threads poll → ack → complete as
fast as they can, each completion asking for the thread's next task. Runs: ``direct``
(the in-memory service, no HTTP) and ``http`` (the real server and client over
127.0.0.1), once per policy, and ``heartbeat`` (the floor of one HTTP request). Reported
per run: tasks per second, poll / ack / complete latency as the client sees it, and the
service's CPU per task. Targets (not asserted): ≥ 1,000 tasks/s, p99 poll < 50 ms.
Described in full in ``bench/README.md``.

Run: ``nice -n 10 .venv/bin/python bench/scheduling_overhead.py [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.cli import benchmark_parser
from harness.cpu import process_cpu_seconds
from harness.machine import load_average
from harness.profiling import listing, own_time_by_area, profiling_every_thread
from harness.report import columns_table, emit, markdown_table
from harness.steps import run_requested_step, run_step
from harness.task_workload import Completions, build_service, group_name

from floe.api.group import SchedulingPolicy
from floe.protocol.assignment import TaskAssignment
from floe.protocol.client import TaskServiceClient
from floe.protocol.wire import CompleteRequest, NextPoll, PollRequest, RegisterRequest
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService

SCRIPT = Path(__file__).resolve()
EMPTY_POLL_PAUSE_S = 0.002
"""The in-memory poll never waits; a thread that got nothing pauses this long (HTTP long-polls)."""
HTTP_POLL_WAIT_S = 1.0
TARGET_TASKS_PER_S = 1000.0
TARGET_P99_POLL_MS = 50.0


# -- the simulated optimizers -------------------------------------------------------------


class Transport(Protocol):
    """How a simulated optimizer reaches the service."""

    def register(self, group: str, threads: int) -> str:
        """Register an optimizer; returns its token."""
        ...

    def poll(self, token: str, thread: int) -> TaskAssignment | None:
        """A task for the thread, or None."""
        ...

    def ack(self, token: str, attempt_id: str) -> None:
        """Ack the attempt."""
        ...

    def complete(self, token: str, attempt_id: str, request: CompleteRequest) -> TaskAssignment | None:
        """Complete the attempt; the next task when the request asked for it and one was ready."""
        ...


class HttpTransport:
    """The real `TaskServiceClient` (a keep-alive connection per thread, as optimizers have)."""

    def __init__(self, url: str) -> None:
        self.client = TaskServiceClient(url)

    def register(self, group: str, threads: int) -> str:
        """Register over HTTP."""
        request = RegisterRequest(group=group, threads=threads, memory_bytes=0, name="bench")
        return self.client.register(request).token

    def heartbeat(self, token: str) -> None:
        """Heartbeat over HTTP."""
        self.client.heartbeat(token)

    def poll(self, token: str, thread: int) -> TaskAssignment | None:
        """Long poll over HTTP."""
        return self.client.poll(token, thread, wait_s=HTTP_POLL_WAIT_S)

    def ack(self, token: str, attempt_id: str) -> None:
        """Ack over HTTP."""
        self.client.ack(token, attempt_id)

    def complete(self, token: str, attempt_id: str, request: CompleteRequest) -> TaskAssignment | None:
        """Complete over HTTP."""
        return self.client.complete(token, attempt_id, request)


class DirectTransport:
    """The in-memory TaskService, called from the optimizer threads themselves."""

    def __init__(self, service: TaskService) -> None:
        self.service = service
        # Built once: validating a PollRequest per call would count as service CPU.
        self._polls = [PollRequest(thread=t, wait_s=0) for t in range(1024)]

    def register(self, group: str, threads: int) -> str:
        """Register in memory."""
        request = RegisterRequest(group=group, threads=threads, memory_bytes=0, name="bench")
        return self.service.register(request).token

    def poll(self, token: str, thread: int) -> TaskAssignment | None:
        """Poll in memory; never waits."""
        return self.service.poll(token, self._polls[thread])

    def ack(self, token: str, attempt_id: str) -> None:
        """Ack in memory."""
        self.service.ack(token, attempt_id)

    def complete(self, token: str, attempt_id: str, request: CompleteRequest) -> TaskAssignment | None:
        """Complete in memory."""
        return self.service.complete(token, attempt_id, request)


@dataclass
class ThreadLog:
    """What one simulated optimizer thread saw; times are ``time.perf_counter()`` values."""

    handed_at: list[float] = field(default_factory=list)
    poll_s: list[float] = field(default_factory=list)
    ack_s: list[float] = field(default_factory=list)
    complete_s: list[float] = field(default_factory=list)
    empty_at: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def task_loop(
    transport: Transport,
    token: str,
    thread: int,
    log: ThreadLog,
    completions: Completions,
    start: threading.Event,
    stop: threading.Event,
    max_cycles: int,
    pause_when_empty: bool,
    next_poll: bool,
) -> None:
    """Poll → ack → complete until ``stop`` is set or ``max_cycles`` tasks or empty polls went by.

    With ``next_poll`` each completion asks for the thread's next task; a task it brings
    is logged with the completion's latency as its poll latency (and as the complete
    latency of the task before).
    """
    start.wait()
    clock = time.perf_counter
    ask = NextPoll(thread=thread) if next_poll else None
    handed: TaskAssignment | None = None  # what the last completion brought
    handed_s = 0.0
    for _ in range(max_cycles):
        if stop.is_set():
            return
        try:
            if handed is None:
                t0 = clock()
                assignment = transport.poll(token, thread)
                t1 = clock()
                poll_s = t1 - t0
            else:
                assignment, poll_s, handed = handed, handed_s, None
                t1 = clock()
            if assignment is None:
                log.empty_at.append(t1)
                if pause_when_empty:
                    time.sleep(EMPTY_POLL_PAUSE_S)
                continue
            transport.ack(token, assignment.attempt_id)
            t2 = clock()
            request = completions.get(assignment.task_id)
            if ask is not None:
                request = request.model_copy(update={"next_poll": ask})
            handed = transport.complete(token, assignment.attempt_id, request)
            t3 = clock()
            handed_s = t3 - t2
        except Exception as exc:
            log.errors.append(f"{type(exc).__name__}: {exc}")
            handed = None
            continue
        log.handed_at.append(t1)
        log.poll_s.append(poll_s)
        log.ack_s.append(t2 - t1)
        log.complete_s.append(t3 - t2)


def heartbeat_loop(
    transport: HttpTransport,
    token: str,
    log: ThreadLog,
    start: threading.Event,
    stop: threading.Event,
    max_cycles: int,
) -> None:
    """Send heartbeats back to back; each is logged like a handed-out task with its latency as poll."""
    start.wait()
    clock = time.perf_counter
    for _ in range(max_cycles):
        if stop.is_set():
            return
        try:
            t0 = clock()
            transport.heartbeat(token)
            t1 = clock()
        except Exception as exc:
            log.errors.append(f"{type(exc).__name__}: {exc}")
            continue
        log.handed_at.append(t1)
        log.poll_s.append(t1 - t0)


@dataclass(frozen=True)
class LoadConfig:
    """How the simulated optimizers run."""

    mode: str  # "tasks" or "heartbeat"
    groups: int
    optimizers: int
    threads: int
    warmup_s: float
    seconds: float
    max_cycles: int
    next_poll: bool


def run_load(transport: Transport, config: LoadConfig, service_cpu: Callable[[], float]) -> dict[str, Any]:
    """Run the optimizer threads, measure the window after the warm-up, and summarize it."""
    per_optimizer = config.threads // config.optimizers
    tokens = [
        transport.register(group_name(o % config.groups), per_optimizer) for o in range(config.optimizers)
    ]
    start, stop = threading.Event(), threading.Event()
    completions = Completions()
    logs: list[ThreadLog] = []
    workers: list[threading.Thread] = []
    direct = isinstance(transport, DirectTransport)
    for optimizer, token in enumerate(tokens):
        for thread in range(per_optimizer):
            log = ThreadLog()
            logs.append(log)
            if config.mode == "heartbeat":
                assert isinstance(transport, HttpTransport), "heartbeats are measured over HTTP only"
                args: tuple[Any, ...] = (transport, token, log, start, stop, config.max_cycles)
                target: Callable[..., None] = heartbeat_loop
            else:
                args = (
                    *(transport, token, thread, log, completions, start, stop),
                    *(config.max_cycles, direct, config.next_poll),
                )
                target = task_loop
            workers.append(
                threading.Thread(target=target, args=args, name=f"opt{optimizer}-{thread}", daemon=True)
            )
    for worker in workers:
        worker.start()
    start.set()
    time.sleep(config.warmup_s)
    window_start = time.perf_counter()
    service_start, client_start = service_cpu(), time.process_time()
    time.sleep(config.seconds)
    window_end = time.perf_counter()
    service_end, client_end = service_cpu(), time.process_time()
    stop.set()
    for worker in workers:
        worker.join()
    return summarize(logs, window_start, window_end, service_end - service_start, client_end - client_start)


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (0.0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def summarize(
    logs: list[ThreadLog], start: float, end: float, service_cpu_s: float, client_cpu_s: float
) -> dict[str, Any]:
    """Figures of the window ``[start, end]``: a task counts when its poll returned in it."""
    window = end - start
    handed: list[float] = []
    polls: list[float] = []
    acks: list[float] = []
    completes: list[float] = []
    empty = 0
    for log in logs:
        for i, at in enumerate(log.handed_at):
            if start <= at <= end:
                handed.append(at)
                polls.append(log.poll_s[i])
                if log.ack_s:
                    acks.append(log.ack_s[i])
                    completes.append(log.complete_s[i])
        empty += sum(start <= at <= end for at in log.empty_at)
    quarters = [0, 0, 0, 0]
    for at in handed:
        quarters[min(3, int((at - start) / window * 4))] += 1
    tasks = len(handed)
    errors = [error for log in logs for error in log.errors]
    return {
        "window_s": window,
        "tasks": tasks,
        "tasks_per_s": tasks / window,
        "tasks_per_s_by_quarter": [q / (window / 4) for q in quarters],
        "tasks_total": sum(len(log.handed_at) for log in logs),
        "empty_polls": empty,
        "poll_ms": {name: percentile(polls, f) * 1000 for name, f in (("p50", 0.5), ("p99", 0.99))}
        | {"max": max(polls, default=0.0) * 1000},
        "ack_ms": {name: percentile(acks, f) * 1000 for name, f in (("p50", 0.5), ("p99", 0.99))},
        "complete_ms": {name: percentile(completes, f) * 1000 for name, f in (("p50", 0.5), ("p99", 0.99))},
        "service_cpu_s": service_cpu_s,
        "service_cpu_ms_per_task": service_cpu_s / tasks * 1000 if tasks else 0.0,
        "service_core_pct": service_cpu_s / window * 100,
        "client_core_pct": client_cpu_s / window * 100,
        "errors": len(errors),
        "first_errors": errors[:5],
    }


# -- child process steps --------------------------------------------------------------------


def step_serve(args: argparse.Namespace) -> dict[str, Any]:
    """Serve the service over HTTP until stdin closes; the URL goes to ``--url-file``.

    With ``--profile-out`` every thread is profiled from the server's start (the tables
    and processes are set up before).
    """
    refiller = build_service(args.tables, args.groups, args.tasks_per_table, SchedulingPolicy(args.policy))
    with profiling_every_thread(args.profile_out) if args.profile_out else nullcontext():
        server = TaskServiceServer(refiller.service)
        server.start()
        refiller.start()
        Path(args.url_file).write_text(server.url)
        sys.stdin.read()
        refiller.stop()
        server.stop()
    return {"processes_queued": refiller.processes}


def step_load(args: argparse.Namespace) -> dict[str, Any]:
    """The simulated optimizers against the HTTP service at ``--url`` (pid ``--service-pid``)."""
    config = load_config(args)
    return run_load(HttpTransport(args.url), config, lambda: process_cpu_seconds(args.service_pid))


def step_direct(args: argparse.Namespace) -> dict[str, Any]:
    """The simulated optimizers calling the in-memory service in this process."""
    refiller = build_service(args.tables, args.groups, args.tasks_per_table, SchedulingPolicy(args.policy))
    refiller.start()
    try:
        result = run_load(DirectTransport(refiller.service), load_config(args), time.process_time)
    finally:
        refiller.stop()
    return result | {"processes_queued": refiller.processes}


def load_config(args: argparse.Namespace) -> LoadConfig:
    """The LoadConfig given on the command line."""
    return LoadConfig(
        mode=args.mode,
        groups=args.groups,
        optimizers=args.optimizers,
        threads=args.threads,
        warmup_s=args.warmup,
        seconds=args.seconds,
        max_cycles=args.max_cycles,
        next_poll=not args.separate_poll,
    )


# -- the parent ---------------------------------------------------------------------------


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
    work = args.dir
    url_file = work / "logs" / f"{label}.url"
    (work / "logs").mkdir(parents=True, exist_ok=True)
    url_file.unlink(missing_ok=True)
    serve_result = work / "logs" / f"{label}-serve.json"
    command = [sys.executable, str(SCRIPT), "--step=serve", *common_args(args, policy)]
    command += [f"--url-file={url_file}", f"--result={serve_result}"]
    if profile is not None:
        command.append(f"--profile-out={profile}")
    with (work / "logs" / f"{label}-serve.log").open("w") as log:
        server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while not url_file.is_file() or not url_file.read_text():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the service child did not start; see {log.name}")
                time.sleep(0.1)
            load_args = [
                "--step=load",
                f"--mode={mode}",
                *common_args(args, policy),
                f"--url={url_file.read_text()}",
                f"--service-pid={server.pid}",
            ]
            result = run_step(SCRIPT, load_args, work, label)
        finally:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(timeout=120)
    served: dict[str, Any] = json.loads(serve_result.read_text())
    return result | served


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


def profile_report(path: Path, limit: int) -> str:
    """Where the profiled service's CPU went, by area of code (`own_time_by_area`), then its top functions."""
    areas = own_time_by_area(path, profile_area)
    total = sum(areas.values())
    ranked = sorted(areas.items(), key=lambda item: -item[1])
    rows = [[label, f"{seconds:.2f}", f"{seconds / total:.0%}"] for label, seconds in ranked]
    return (
        f"Service CPU under cProfile (thread CPU time, every thread): {total:.2f} s.\n\n"
        + markdown_table(["area of code (own time)", "CPU s", "share"], rows)
        + "\n\n```\n"
        + listing(path, [("tottime", limit), ("cumulative", limit)])
        + "```\n"
    )


def results_table(results: dict[str, dict[str, Any]]) -> str:
    """One row per run: tasks handed out, latency as the client sees it, CPU of service and client."""
    return columns_table(
        [
            ("run", lambda r: r["name"]),
            ("tasks/s", lambda r: f"{r['tasks_per_s']:,.0f}"),
            ("tasks/s by quarter", lambda r: " / ".join(f"{q:,.0f}" for q in r["tasks_per_s_by_quarter"])),
            (
                "poll ms p50 / p99 / max",
                lambda r: (
                    f"{r['poll_ms']['p50']:.1f} / {r['poll_ms']['p99']:.1f} / {r['poll_ms']['max']:.0f}"
                ),
            ),
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


def main_parent(args: argparse.Namespace) -> int:
    """Run every variant and print the results section."""
    args.dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    load_before = load_average()
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
    profile_text = ""
    if args.profile:
        print(f"[{args.policies[0]}] HTTP service under cProfile ...", flush=True)
        profile = args.dir / "logs" / "service.prof"
        results[f"{args.policies[0]} http, profiled"] = run_http(
            args, args.policies[0], "tasks", "profiled-http", profile
        )
        profile_text = profile_report(profile, args.profile_lines)
    load_after = load_average()

    lines = [
        "## Scheduling overhead (task service + scheduler)",
        "",
        f"{args.tables:,} tables in {args.groups} group(s), {args.tasks_per_table} tasks per process, "
        f"{args.threads} optimizer threads ({args.optimizers} optimizers), warm-up {args.warmup:g} s, "
        f"window {args.seconds:g} s; {os.cpu_count()} cores; load average {load_before} before, "
        f"{load_after} after.",
        "",
        results_table(results),
        "",
        f"HTTP floor (heartbeats only, {args.threads} threads): {floor['tasks_per_s']:,.0f} requests/s, "
        f"latency p50 {floor['poll_ms']['p50']:.1f} ms / p99 {floor['poll_ms']['p99']:.1f} ms, "
        f"service CPU {floor['service_cpu_ms_per_task']:.2f} ms per request, "
        f"service core {floor['service_core_pct']:.0f}%, client core {floor['client_core_pct']:.0f}%. "
        + (
            "A task costs three requests (poll, ack, complete)."
            if args.separate_poll
            else "A task costs two requests (ack, complete carrying the next poll) while work is queued."
        ),
        "",
    ]
    for name, r in results.items():
        met_rate = r["tasks_per_s"] >= TARGET_TASKS_PER_S
        met_p99 = r["poll_ms"]["p99"] < TARGET_P99_POLL_MS
        lines.append(
            f"- {name}: {r['tasks_per_s']:,.0f} tasks/s ({'meets' if met_rate else 'misses'} ≥ 1,000: "
            f"{r['tasks_per_s'] / TARGET_TASKS_PER_S:.2f}x), p99 poll {r['poll_ms']['p99']:.1f} ms "
            f"({'meets' if met_p99 else 'misses'} < 50 ms)"
        )
    errors = [e for r in (*results.values(), floor) for e in r["first_errors"]]
    if errors:
        lines += ["", "Errors seen (first ones):", *[f"- {e}" for e in errors]]
    text = "\n".join(lines) + "\n"
    if profile_text:
        text += f"\n### Service profile ({args.policies[0]} policy, HTTP)\n\n{profile_text}"
    emit(text, args.markdown)
    return 1 if errors else 0


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
