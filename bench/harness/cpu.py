"""CPU time from ``/proc``: one process's so far, or a whole process tree's over a window."""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from pathlib import Path

SAMPLE_SECONDS = 0.1
"""How often `TreeCpuSampler` reads the process tree's counters."""


def _stat_fields(pid: int | str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the parenthesised command, which may hold spaces.

    Index 0 is field 3 (state): ppid is index 1, utime 11, stime 12, starttime 19.
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, every thread included."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree_cpu_ticks(root: int) -> dict[tuple[int, int], int]:
    """Own CPU ticks (user + system) of a process and each of its live descendants.

    Keyed by (pid, start time), so a pid the kernel reuses is a new process. Children's
    reaped time (cutime, cstime) is left out: the children themselves are sampled, and
    counting both would count them twice.
    """
    parents: dict[int, int] = {}
    ticks: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat_fields(entry.name)
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        ticks[pid] = (int(fields[19]), int(fields[11]) + int(fields[12]))
    children: dict[int, list[int]] = defaultdict(list)
    for pid, parent in parents.items():
        children[parent].append(pid)
    tree, stack = set(), [root]
    while stack:
        pid = stack.pop()
        tree.add(pid)
        stack.extend(children[pid])
    return {(pid, ticks[pid][0]): ticks[pid][1] for pid in tree if pid in ticks}


class TreeCpuSampler:
    """CPU seconds of this process and all its descendants over a window, exited ones included.

    Spark's Python daemon ignores SIGCHLD, so a worker it retires is reaped by the kernel
    and its time reaches no ancestor's counters: reading the tree at the start and the end
    would miss it. A thread therefore reads every process's own counters every
    `SAMPLE_SECONDS`, and a process that exits counts with its last reading (losing at
    most one interval). Each process counts what it used since the window opened (all of it
    if it started later), so no figure can be negative. The thread's own CPU is subtracted.
    """

    def __init__(self) -> None:
        self._root = os.getpid()
        self._stop = threading.Event()
        self._start: dict[tuple[int, int], int] = {}
        self._last: dict[tuple[int, int], int] = {}
        self._own_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> TreeCpuSampler:
        self._start = _tree_cpu_ticks(self._root)
        self._last = dict(self._start)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample()
        self._own_seconds = time.thread_time()

    def _sample(self) -> None:
        self._last.update(_tree_cpu_ticks(self._root))

    @property
    def seconds(self) -> float:
        """CPU seconds of the tree in the window, without the sampling thread's own."""
        ticks = sum(max(0, count - self._start.get(key, 0)) for key, count in self._last.items())
        return max(0.0, ticks / os.sysconf("SC_CLK_TCK") - self._own_seconds)


def minute_cpu_shares(pid: int, seconds: float) -> list[float]:
    """Wait `seconds`, sampling process `pid`'s CPU each minute: its share of a core in each whole
    minute (an operator's first hour is not as idle as its later ones)."""
    shares = []
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        before, started = process_cpu_seconds(pid), time.monotonic()
        time.sleep(min(60.0, left))
        if time.monotonic() - started >= 59.0:
            shares.append((process_cpu_seconds(pid) - before) / (time.monotonic() - started) * 100)
    return shares
