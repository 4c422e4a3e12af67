"""When the engine has to look at each table next: a queue ordered by time.

An idle table needs nothing until its next refresh or its next maintenance job, so the
engine's round, every second, visits only the tables whose time has come, and those an event
changed (a process ended, a job finished, a manifest changed): at 10,000 tables, a few a
second instead of all of them.
"""

from __future__ import annotations

import heapq
import itertools
import math

from floe.optimizing.table_state import UNSUPPORTED, TableRuntime, TableState


class TableWakeups:
    """Per table, the earliest time the engine must look at it; not thread-safe (the engine
    holds its lock)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._live: dict[str, tuple[float, int]] = {}
        """Per table, its one entry of the heap that counts; the others are stale."""
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def wake_at(self, table_id: str, when_s: float) -> None:
        """Look at the table at `when_s` at the latest: an earlier wake-up it has stays."""
        live = self._live.get(table_id)
        if live is not None and live[0] <= when_s:
            return
        entry = (when_s, next(self._order))
        self._live[table_id] = entry
        heapq.heappush(self._heap, (*entry, table_id))

    def schedule(self, table_id: str, when_s: float) -> None:
        """Look at the table at `when_s`, in place of any wake-up it has; never, for inf."""
        self._live.pop(table_id, None)
        if when_s != math.inf:
            self.wake_at(table_id, when_s)

    def discard(self, table_id: str) -> None:
        """Forget the table (removed from the engine)."""
        self._live.pop(table_id, None)

    def pop_due(self, now_s: float) -> list[str]:
        """The tables whose time has come by `now_s`, in time order, taken off the queue: each is
        put back (`schedule`) once looked at."""
        due: list[str] = []
        heap = self._heap
        while heap and heap[0][0] <= now_s:
            when_s, order, table_id = heapq.heappop(heap)
            if self._live.get(table_id) == (when_s, order):
                del self._live[table_id]
                due.append(table_id)
        # Stale entries pile up behind wake-ups moved earlier: rebuild once they outnumber the live.
        if len(heap) > 2 * len(self._live) + 64:
            self._heap = [(when, order, t) for t, (when, order) in self._live.items()]
            heapq.heapify(self._heap)
        return due


def next_visit_s(runtime: TableRuntime, now_s: float) -> float:
    """When the engine must look at the table again if nothing happens to it meanwhile: its
    next refresh (none while a process runs: its end is such a happening), its next
    maintenance job (none while one runs), or the next round while it is PENDING (whether
    it may be planned changes with the time and its group). A table its catalog's sweep checks
    has no refresh of its own to wait for but its interval trigger. inf: only a happening can make
    anything due (disabled; busy with a job running)."""
    if runtime.state == TableState.DISABLED:
        return math.inf
    if runtime.state == TableState.PENDING:
        return now_s
    refresh = math.inf
    if not runtime.busy:
        refresh = runtime.refresh.own_check_s()
    maintenance = math.inf
    # The engine maintains only a table it has read: the refresh that first reads it is a visit.
    if (
        runtime.maintaining is None
        and runtime.refusal_reason != UNSUPPORTED
        and runtime.snapshot_id is not None
    ):
        # A job due but held back (one that commits, while a process runs) is asked again
        # at the next round, as it was before.
        maintenance = max(runtime.earliest_maintenance_s(), now_s)
    return min(refresh, maintenance)
