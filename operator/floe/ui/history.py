"""The optimizing runs the UI charts: each that ends while the process runs, as a compact point in
one ring bounded across all tables (`RUN_POINTS`), so a table's charts reach further back than the
last `floe.api.history.STATUS_HISTORY` runs its status keeps, which its maintenance jobs share."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from floe.api.history import RunRecord

RUN_POINTS = 20_000
"""Optimizing runs kept, all tables together: about 500 bytes each, some 10 MB at most; 10,000
tables optimized hourly keep about their last two hours each, a hundred tables their last week."""
OPTIMIZING_KINDS = frozenset({"minor", "major", "full"})


@dataclass(frozen=True, slots=True)
class RunPoint:
    """What a chart shows of one optimizing run."""

    run_id: str
    finished: str
    """RFC 3339: orders the points, and labels them."""
    committed: bool
    files_in: int
    files_out: int
    bytes_in: int
    bytes_out: int
    executor_seconds: float

    @classmethod
    def of(cls, run: RunRecord) -> RunPoint:
        """The point of a run record."""
        return cls(
            run.run_id,
            run.finished,
            run.outcome == "committed",
            run.files_in,
            run.files_out,
            run.bytes_in,
            run.bytes_out,
            run.executor_seconds,
        )


class RunPoints:
    """The ring of points, by table; `put` is the engine's run listener (`subscribe_runs`)."""

    def __init__(self, bound: int = RUN_POINTS) -> None:
        self._ring: deque[tuple[str, RunPoint]] = deque(maxlen=bound)
        self._lock = threading.Lock()

    def put(self, run: RunRecord) -> None:
        """Keep an optimizing run that ended (a maintenance job's is not charted)."""
        if run.kind in OPTIMIZING_KINDS:
            point = RunPoint.of(run)
            with self._lock:
                self._ring.append((run.table, point))

    def of(self, table_id: str, kept: Iterable[RunRecord] = ()) -> list[RunPoint]:
        """The table's points, oldest first, with the optimizing runs among `kept` (its status's,
        which may predate this process) that the ring does not hold."""
        with self._lock:
            mine = {point.run_id: point for table, point in self._ring if table == table_id}
        for run in kept:
            if run.kind in OPTIMIZING_KINDS and run.run_id not in mine:
                mine[run.run_id] = RunPoint.of(run)
        return sorted(mine.values(), key=lambda point: point.finished)
