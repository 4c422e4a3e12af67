"""Quota accounting: how much task time each table used in the last hour, against its share.

A table's task time is the sum of its tasks' run intervals, from ack to completion,
failure or expiry, clipped to the look-back window; tasks still running count for the
time they have run so far. Occupation is that time divided by the window and by the
table's quota limit (threads), so a table that kept exactly ``limit`` threads busy for
the whole window is at 1.0 (100%).
"""

from __future__ import annotations

import math
from collections import deque

QUOTA_WINDOW_S = 3600.0

# quota * threads is computed in floating point: 0.1 * 30 is 3.0000000000000004, whose
# ceiling would grant a thread the quota never asked for.
_CEIL_TOLERANCE = 1e-9


def quota_limit(quota: float, group_threads: int) -> float:
    """Threads a table may keep busy: ``quota`` itself when above 1, else its share of the group.

    A quota of at most 1 is a fraction of the group's threads, rounded up (0 when the
    group has no threads); a larger quota is an absolute number of threads.
    """
    if quota > 1:
        return quota
    return float(max(0, math.ceil(quota * group_threads - _CEIL_TOLERANCE)))


def occupation(task_seconds: float, window_s: float, limit: float) -> float:
    """``task_seconds / window_s / limit``; 0.0 when the limit is 0.

    A limit of 0 only happens in a group without threads, where nothing is planned or
    handed out, so there is no share to measure against and no order to decide.
    """
    if limit <= 0:
        return 0.0
    return task_seconds / window_s / limit


class TaskTimeLedger:
    """Per-table run intervals of tasks, finished and running, over a look-back window.

    Finished intervals older than ``retention_s`` are pruned as time moves on, so the
    ledger stays bounded by the number of tasks that ran in the last window.
    """

    def __init__(self, retention_s: float = QUOTA_WINDOW_S, cache_ttl_s: float = 1.0) -> None:
        if retention_s <= 0:
            raise ValueError(f"retention_s must be positive, got {retention_s}")
        self._retention_s = retention_s
        # The quota policy orders every table on every poll; recomputing each table's
        # history each time made polls O(tables x tasks). A cached sum is reused for
        # `cache_ttl_s` (running tasks' time is added on top) and dropped as soon as one
        # of the table's tasks starts or stops.
        self._cache_ttl_s = cache_ttl_s
        self._cache: dict[str, tuple[float, float, float]] = {}
        self._finished: dict[str, deque[tuple[float, float]]] = {}
        self._running: dict[str, dict[str, float]] = {}
        self._table_of_run: dict[str, str] = {}

    def start(self, table_id: str, run_id: str, now: float) -> None:
        """A task of ``table_id`` started running (was acked); ``run_id`` names this run."""
        if run_id in self._table_of_run:
            raise ValueError(f"run {run_id!r} is already running")
        self._running.setdefault(table_id, {})[run_id] = now
        self._table_of_run[run_id] = table_id
        self._cache.pop(table_id, None)

    def stop(self, run_id: str, now: float) -> None:
        """The run ended (completed, failed, expired or was released); its interval becomes history."""
        table_id = self._table_of_run.pop(run_id)
        self._cache.pop(table_id, None)
        runs = self._running[table_id]
        started = runs.pop(run_id)
        if not runs:
            del self._running[table_id]
        self._finished.setdefault(table_id, deque()).append((started, max(started, now)))
        self._prune(table_id, now)

    def running(self, run_id: str) -> bool:
        """Whether ``run_id`` started and has not stopped (nor been forgotten with its table)."""
        return run_id in self._table_of_run

    def task_seconds(self, table_id: str, now: float, window_s: float = QUOTA_WINDOW_S) -> float:
        """Task time of the table within ``[now - window_s, now]``, running tasks included."""
        if window_s > self._retention_s:
            raise ValueError(f"window {window_s}s is longer than the ledger keeps ({self._retention_s}s)")
        if table_id not in self._finished and table_id not in self._running:
            return 0.0  # most tables of a large group: no history to sum, and no cache entry to keep
        cached = self._cache.get(table_id)
        if cached is not None:
            cached_window, computed_at, seconds = cached
            if cached_window == window_s and computed_at <= now < computed_at + self._cache_ttl_s:
                return seconds + len(self._running.get(table_id, ())) * (now - computed_at)
        self._prune(table_id, now)
        since = now - window_s
        total = 0.0
        for started, ended in self._finished.get(table_id, ()):
            total += max(0.0, min(ended, now) - max(started, since))
        for started in self._running.get(table_id, {}).values():
            total += max(0.0, now - max(started, since))
        self._cache[table_id] = (window_s, now, total)
        return total

    def occupation(self, table_id: str, now: float, limit: float, window_s: float = QUOTA_WINDOW_S) -> float:
        """The table's task time over the window, as a fraction of ``limit`` threads kept busy."""
        return occupation(self.task_seconds(table_id, now, window_s), window_s, limit)

    def tables(self) -> set[str]:
        """The tables with task time kept (running, or finished within the window, or just out
        of it and not pruned yet): every other table's is 0."""
        return self._finished.keys() | self._running.keys()

    def forget(self, table_id: str) -> None:
        """Drop everything known about the table (it left the group)."""
        self._finished.pop(table_id, None)
        self._cache.pop(table_id, None)
        for run_id in self._running.pop(table_id, {}):
            del self._table_of_run[run_id]

    def _prune(self, table_id: str, now: float) -> None:
        history = self._finished.get(table_id)
        if history is None:
            return
        cutoff = now - self._retention_s
        while history and history[0][1] <= cutoff:
            history.popleft()
        if not history:
            del self._finished[table_id]
