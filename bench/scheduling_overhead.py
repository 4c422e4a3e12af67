"""Scheduling overhead: how many tasks floe's task service hands out per second, and how fast.

The real `TaskService` (one `GroupScheduler` per group) holds 1,000 tables, each with a
process of synthetic `RewriteTaskSpec`s that are never executed. 64 simulated optimizer
threads poll → ack → complete as fast as they can, completing each task with a small
fake `RewriteTaskResult`; each completion asks for the thread's next task (``next_poll``),
as the optimizer does, so a thread polls only when a completion brought none
(``--separate-poll``: every task is polled for, the three-request cycle of the first
runs). The service accepts every result without checking it against storage (the
files the fake results name do not exist). A simulated engine thread in the service's
process plays the engine's part in the steady state: every 100 ms it takes the finished
processes and queues a new process for each of their tables, so the queue never runs dry.

Three kinds of run, each in fresh processes:

- ``http``: the service behind the real HTTP server (`TaskServiceServer`, aiohttp) in a
  child process, the optimizer threads in another child using the real
  `TaskServiceClient` over 127.0.0.1. The service's CPU is read from
  ``/proc/<pid>/stat`` at the start and end of the measured window.
- ``direct``: the same threads calling the in-memory `TaskService` in one process, no
  HTTP: the cost of the scheduler itself (that process's CPU is the service's, plus a
  negligible loop around the calls).
- ``heartbeat``: the optimizer threads only send heartbeats over HTTP: the floor of
  one authenticated request (on a kept-alive connection: aiohttp, a worker thread, the
  service's lock) with no scheduling in it. A task costs two requests (ack, and complete
  carrying the next poll), three with ``--separate-poll``.

``direct`` and ``http`` run once per policy (``--policies``, both by default): the
balanced policy orders the tables by a cheap key, so quota against balanced isolates
the cost of computing quota occupation at every poll.

Reported per run: tasks handed out per second over the window (and per quarter of it,
since the quota ledger grows as tasks finish), poll latency p50/p99/max as the client
sees it (for a task a completion brought: that completion's latency), ack and complete
latency, the service's CPU seconds per task, the tasks per second one full core would
give at that cost (other work shares this machine), the service's and the client's share
of a core. ``--profile`` adds an ``http`` run of the
first policy with the service under ``cProfile`` (per-thread CPU time, every thread)
and prints where its CPU goes, by area of code and by function. Targets (figures, not
asserted): ≥ 1,000 tasks/s, p99 poll latency < 50 ms.

Run: ``nice -n 10 .venv/bin/python bench/scheduling_overhead.py [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from common import load_average, markdown_table, run_step, write_result

from floe.api.models import SchedulingPolicy
from floe.local.workload import CLICKS_SCHEMA, CLICKS_SPEC
from floe.optimizer.result_check import ResultChecker
from floe.optimizer.task_spec import (
    InputDataFile,
    InputDeleteFile,
    RewriteTaskResult,
    RewriteTaskSpec,
    WrittenFile,
)
from floe.service.client import TaskServiceClient
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe.service.wire import CompleteRequest, NextPoll, PollRequest, RegisterRequest, TaskAssignment

SCRIPT = Path(__file__).resolve()
REFILL_INTERVAL_S = 0.1
EMPTY_POLL_PAUSE_S = 0.002
"""The in-memory poll never waits; a thread that got nothing pauses this long (HTTP long-polls)."""
HTTP_POLL_WAIT_S = 1.0
TARGET_TASKS_PER_S = 1000.0
TARGET_P99_POLL_MS = 50.0


# -- the workload ---------------------------------------------------------------------------


def table_id(index: int) -> str:
    """The id of the index-th synthetic table, ``default/t0042``-style like the engine's."""
    return f"default/t{index:04d}"


def group_name(index: int) -> str:
    """The name of the index-th optimizer group."""
    return f"group-{index}"


def synthetic_specs(table: str, tasks: int) -> list[RewriteTaskSpec]:
    """A process's worth of realistic task specs for ``table``: 6 data and 2 delete files each."""
    base = f"file:///warehouse/bench/{table.replace('/', '_')}"
    schema_json = CLICKS_SCHEMA.model_dump_json()
    spec_json = CLICKS_SPEC.model_dump_json()
    specs = []
    for task in range(tasks):
        partition = f"{base}/data/ts_day=2024-03-{task % 28 + 1:02d}"
        specs.append(
            RewriteTaskSpec(
                task_id=f"{table}-task-{task}",
                io_properties={},
                table_schema_json=schema_json,
                partition_spec_json=spec_json,
                output_dir=partition,
                data_files=[
                    InputDataFile(
                        path=f"{partition}/00000-{task}-{n}-0f3c9a2e-6d1b-4c55-9a7e-{n:012d}.parquet",
                        record_count=20_000 + n,
                        size_bytes=2_000_000 + n,
                        data_sequence_number=n + 1,
                    )
                    for n in range(6)
                ],
                delete_files=[
                    InputDeleteFile(
                        path=f"{partition}/00001-{task}-{n}-deletes-{n:012d}.parquet",
                        kind=2,
                        record_count=500,
                        size_bytes=8_000,
                        data_sequence_number=10 + n,
                        equality_ids=[1],
                    )
                    for n in range(2)
                ],
                target_file_size_bytes=128 * 1024 * 1024,
                delete_memory_limit_bytes=512 * 1024 * 1024,
                file_name_prefix=f"proc-{table.replace('/', '_')}-{task}",
            )
        )
    return specs


def fake_completion(task_id: str) -> CompleteRequest:
    """A small successful outcome: one written file with metrics for the 4 columns."""
    columns = range(1, 5)
    return CompleteRequest(
        result=RewriteTaskResult(
            task_id=task_id,
            files=[
                WrittenFile(
                    path=f"file:///warehouse/bench/out/{task_id}.parquet",
                    record_count=120_000,
                    size_bytes=12_000_000,
                    column_sizes={c: 3_000_000 for c in columns},
                    value_counts={c: 120_000 for c in columns},
                    null_value_counts={c: 0 for c in columns},
                    nan_value_counts={},
                    lower_bounds={c: "0000000000000000" for c in columns},
                    upper_bounds={c: "ffffffffffffff7f" for c in columns},
                    split_offsets=[4],
                )
            ],
            rows_read=121_000,
            rows_deleted=1_000,
            bytes_read=12_016_000,
        )
    )


class AcceptEveryResult(ResultChecker):
    """Accepts every result without reading storage: the fake completions name files that do not exist.

    The service checks real results against storage before accepting them; what that costs
    depends on the storage, not on scheduling, and the rewrite benchmark reports it.
    """

    def check(self, spec: RewriteTaskSpec, result: RewriteTaskResult, process_id: str = "") -> None:
        """Accept."""


class Refiller:
    """The engine's part in the steady state: requeue a process for every table whose process finished."""

    def __init__(
        self, service: TaskService, groups: list[str], specs: dict[str, list[RewriteTaskSpec]]
    ) -> None:
        self.service = service
        self.groups = groups
        self.specs = specs
        self.processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-refiller", daemon=True)

    def start(self) -> None:
        """Start requeueing in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop requeueing and wait for the thread."""
        self._stop.set()
        self._thread.join()

    def refill(self) -> None:
        """Queue a new process for every table whose process finished since the last call."""
        for name in self.groups:
            scheduler = self.service.group(name)
            for outcome in scheduler.take_finished():
                self.processes += 1
                scheduler.add_process(
                    outcome.table_id,
                    f"process-{self.processes}",
                    self.specs[outcome.table_id],
                    max_retries=5,
                    allow_partial_commit=False,
                )

    def _run(self) -> None:
        while not self._stop.wait(REFILL_INTERVAL_S):
            self.refill()


def build_service(tables: int, groups: int, tasks_per_table: int, policy: SchedulingPolicy) -> Refiller:
    """The simulated engine over a new TaskService: ``tables`` tables spread over ``groups`` groups,
    one process of ``tasks_per_table`` tasks queued for each.

    Table specs are built once and reused by every later process of the table (task ids
    only need to be unique within a process), so refilling costs no pydantic work.
    """
    service = TaskService(clock=time.time, result_checker=AcceptEveryResult())
    names = [group_name(g) for g in range(groups)]
    for name in names:
        service.add_group(name, policy)
    specs: dict[str, list[RewriteTaskSpec]] = {}
    refiller = Refiller(service, names, specs)
    for index in range(tables):
        tid = table_id(index)
        specs[tid] = synthetic_specs(tid, tasks_per_table)
        scheduler = service.group(names[index % groups])
        scheduler.upsert_table(tid, quota=0.5, last_optimized_s=None)
        refiller.processes += 1
        scheduler.add_process(tid, f"process-{refiller.processes}", specs[tid], 5, False)
    return refiller


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


class Completions:
    """Fake completions, built once per task id and shared by the threads."""

    def __init__(self) -> None:
        self._cache: dict[str, CompleteRequest] = {}

    def get(self, task_id: str) -> CompleteRequest:
        """The completion for ``task_id``."""
        request = self._cache.get(task_id)
        if request is None:
            request = self._cache.setdefault(task_id, fake_completion(task_id))
        return request


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


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, every thread included (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the ")" of comm, field 3 (state) is index 0: utime is field 14, stime field 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


@contextlib.contextmanager
def profiling_every_thread(out: Path) -> Iterator[None]:
    """Profile every thread started inside the block, and the block itself, by thread CPU time.

    Python 3.11's cProfile follows one thread only, so each thread gets its own profiler
    (``threading.Thread.run`` is wrapped) and the profiles are merged into ``out``.
    """
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()
    original_run = threading.Thread.run

    def profiled_run(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(profile)
        profile.enable()
        try:
            original_run(self)
        finally:
            profile.disable()

    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    main = cProfile.Profile(time.thread_time)
    profiles.append(main)
    main.enable()
    try:
        yield
    finally:
        main.disable()
        threading.Thread.run = original_run  # type: ignore[method-assign]
        with lock:
            for profile in profiles:
                profile.create_stats()
            # pstats refuses a profile that recorded nothing (a thread that never ran Python code).
            stats = pstats.Stats(*[p for p in profiles if p.stats])
        stats.dump_stats(out)


def step_serve(args: argparse.Namespace) -> dict[str, Any]:
    """Serve the service over HTTP until stdin closes; the URL goes to ``--url-file``.

    With ``--profile-out`` every thread is profiled from the server's start (the tables
    and processes are set up before).
    """
    refiller = build_service(args.tables, args.groups, args.tasks_per_table, SchedulingPolicy(args.policy))
    with profiling_every_thread(args.profile_out) if args.profile_out else contextlib.nullcontext():
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
    return run_load(HttpTransport(args.url), config, lambda: process_cpu_s(args.service_pid))


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
        ("floe/scheduling/policy.py", "floe/scheduling/occupation.py", "floe/scheduling/queue.py:occupation"),
    ),
    ("rest of the scheduler (queue.py, monitor.py)", ("floe/scheduling/",)),
    ("floe's task service and HTTP handlers", ("floe/service/",)),
    ("pydantic (validation, serialization)", ("pydantic",)),
    ("aiohttp", ("aiohttp", "multidict", "yarl")),
    ("asyncio, threads, sockets", ("asyncio", "selectors", "concurrent/futures", "threading", "socket")),
    ("the benchmark's simulated engine", ("scheduling_overhead.py",)),
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
    """Where the profiled service's CPU went, by area of code, then its top functions.

    Each function's own time counts for its file's area; a built-in's (``sorted``,
    ``dict.get``, ...) is split between its callers' areas by what each caller spent in it.
    """
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    entries: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    areas: dict[str, float] = defaultdict(float)
    for (file, _, function), (_, _, own, _, callers) in entries.items():
        if file != "~":
            areas[profile_area(file, function)] += own
            continue
        via_callers = sum(c[2] for c in callers.values())
        for (caller_file, _, caller), (_, _, spent, _) in callers.items():
            areas[profile_area(caller_file, caller)] += own * spent / via_callers if via_callers else 0.0
    total = sum(areas.values())
    ranked = sorted(areas.items(), key=lambda item: -item[1])
    rows = [[label, f"{seconds:.2f}", f"{seconds / total:.0%}"] for label, seconds in ranked]
    out.write(f"Service CPU under cProfile (thread CPU time, every thread): {total:.2f} s.\n\n")
    out.write(markdown_table(["area of code (own time)", "CPU s", "share"], rows) + "\n\n```\n")
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)
    out.write("```\n")
    return out.getvalue()


def row(name: str, r: dict[str, Any]) -> list[str]:
    """One results-table row."""
    return [
        name,
        f"{r['tasks_per_s']:,.0f}",
        " / ".join(f"{q:,.0f}" for q in r["tasks_per_s_by_quarter"]),
        f"{r['poll_ms']['p50']:.1f} / {r['poll_ms']['p99']:.1f} / {r['poll_ms']['max']:.0f}",
        f"{r['ack_ms']['p50']:.1f} / {r['complete_ms']['p50']:.1f}",
        f"{r['service_cpu_ms_per_task']:.2f}",
        f"{1000 / r['service_cpu_ms_per_task']:,.0f}" if r["service_cpu_ms_per_task"] else "-",
        f"{r['service_core_pct']:.0f}%",
        f"{r['client_core_pct']:.0f}%",
        str(r["empty_polls"]),
        str(r["errors"]),
    ]


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

    headers = [
        "run",
        "tasks/s",
        "tasks/s by quarter",
        "poll ms p50 / p99 / max",
        "ack / complete ms p50",
        "service CPU ms/task",
        "tasks/s per service core",
        "service core",
        "client core",
        "empty polls",
        "errors",
    ]
    lines = [
        "## Scheduling overhead (task service + scheduler)",
        "",
        f"{args.tables:,} tables in {args.groups} group(s), {args.tasks_per_table} tasks per process, "
        f"{args.threads} optimizer threads ({args.optimizers} optimizers), warm-up {args.warmup:g} s, "
        f"window {args.seconds:g} s; {os.cpu_count()} cores; load average {load_before} before, "
        f"{load_after} after.",
        "",
        markdown_table(headers, [row(name, r) for name, r in results.items()]),
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
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text)
    return 1 if errors else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
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
    parser.add_argument("--profile", action="store_true", help="add an HTTP run with the service profiled")
    parser.add_argument("--profile-lines", type=int, default=25)
    parser.add_argument("--dir", type=Path, default=SCRIPT.parent / ".work" / "scheduling")
    parser.add_argument("--markdown", type=Path, help="also write the results section here")
    # Child steps.
    parser.add_argument("--step", choices=["serve", "load", "direct"], help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["tasks", "heartbeat"], default="tasks", help=argparse.SUPPRESS)
    parser.add_argument("--policy", default="quota", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--url-file", help=argparse.SUPPRESS)
    parser.add_argument("--service-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads % args.optimizers or args.optimizers % args.groups:
        parser.error("--threads must divide evenly over --optimizers, and --optimizers over --groups")
    return args


def main() -> int:
    """Entry point: the parent, or one child step."""
    args = parse_args()
    if args.step is None:
        return main_parent(args)
    steps: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
        "serve": step_serve,
        "load": step_load,
        "direct": step_direct,
    }
    write_result(args.result, steps[args.step](args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
