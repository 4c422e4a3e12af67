"""A simulated clock for benchmarks of a catalog's life: an engine round is a second of it, so an
hour takes minutes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


class SimClock:
    """Simulated seconds since the epoch: moved by the benchmark, one second per engine round.
    With `offset_file`, the REST catalog server's clock follows it (``rest_s3``'s faked clock):
    the server stamps its metadata as the writers stamp their commits, in simulated time."""

    def __init__(self, start: float, offset_file: str | None = None) -> None:
        self.now = start
        self._offset_file = Path(offset_file) if offset_file else None

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock `seconds` on."""
        self.now += seconds
        if self._offset_file:
            self._offset_file.write_text(f"+{max(0, round(self.now - time.time()))}s\n")


def round_of(engine: Any, clock: SimClock, real_time: bool = False) -> None:
    """One engine round, then the clock a second on, or as long as the round took if longer: a
    catalog slower than the rounds it is asked in is not given time it did not have. In
    `real_time`, the round also waits out the rest of its second."""
    started = time.perf_counter()
    engine.tick()
    took = time.perf_counter() - started
    if real_time and took < 1.0:
        time.sleep(1.0 - took)
    clock.advance(max(1.0, took))
