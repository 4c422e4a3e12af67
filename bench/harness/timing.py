"""Timing a measured action: its wall time with its process tree's CPU time, and the fastest of repeats."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from harness.cpu import TreeCpuSampler

T = TypeVar("T")


@dataclass(frozen=True)
class Timed(Generic[T]):
    """What an action returned, how long it took and the CPU its process tree used meanwhile."""

    value: T
    seconds: float
    cpu_seconds: float


def timed(action: Callable[[], T]) -> Timed[T]:
    """Run ``action``; its result, wall seconds and CPU seconds of this process tree meanwhile."""
    with TreeCpuSampler() as cpu:
        started = time.perf_counter()
        value = action()
        seconds = time.perf_counter() - started
    return Timed(value, seconds, cpu.seconds)


def fastest(attempts: Sequence[dict[str, Any]], seconds: Callable[[dict[str, Any]], float]) -> dict[str, Any]:
    """The attempt ``seconds`` finds fastest, with every attempt's time under ``walls``.

    On a shared machine the fastest attempt is the one least disturbed by other work.
    """
    best: dict[str, Any] = min(attempts, key=seconds)
    return {**best, "walls": [seconds(attempt) for attempt in attempts]}
