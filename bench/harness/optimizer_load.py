"""The scheduling benchmark's simulated optimizers: threads that poll, ack and complete tasks as fast as
they can (or only heartbeat), and the figures of a measured window of their logs."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from floe.protocol.assignment import TaskAssignment
from floe.protocol.wire import NextPoll
from harness.percentiles import percentile
from harness.task_workload import Completions, group_name
from harness.transports import DirectTransport, HttpTransport, Transport

EMPTY_POLL_PAUSE_S = 0.002
"""The in-memory poll never waits; a thread that got nothing pauses this long (HTTP long-polls)."""


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

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LoadConfig:
        """The configuration the benchmark's command line gives."""
        return cls(
            mode=args.mode,
            groups=args.groups,
            optimizers=args.optimizers,
            threads=args.threads,
            warmup_s=args.warmup,
            seconds=args.seconds,
            max_cycles=args.max_cycles,
            next_poll=not args.separate_poll,
        )


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
