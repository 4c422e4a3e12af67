"""cProfile for the benchmarks: a block profiled to a text listing, every thread profiled, time by area."""

from __future__ import annotations

import contextlib
import cProfile
import io
import pstats
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

Listing = Sequence[tuple[str, int]]
"""What a profile listing shows: (sort key, number of functions) for each of its tables."""


def listing(source: cProfile.Profile | Path, tables: Listing) -> str:
    """The top functions of a profile (one just run, or one dumped to a file), one table per sort key."""
    text = io.StringIO()
    stats = pstats.Stats(source if isinstance(source, cProfile.Profile) else str(source), stream=text)
    for key, lines in tables:
        stats.sort_stats(key).print_stats(lines)
    return text.getvalue()


@contextlib.contextmanager
def profiled(out: Path | None, tables: Listing) -> Iterator[None]:
    """Run the block under cProfile and write its `listing` to ``out``; no profiling when ``out`` is None."""
    if out is None:
        yield
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
    out.write_text(listing(profiler, tables))


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


def own_time_by_area(path: Path, area: Callable[[str, str], str]) -> dict[str, float]:
    """Own time of a dumped profile's functions, summed by ``area(file, function)``.

    A built-in's time (``sorted``, ``dict.get``, ...) has no file of its own, so it is
    split between its callers' areas by what each caller spent in it.
    """
    entries: dict[tuple[str, int, str], Any] = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    areas: dict[str, float] = defaultdict(float)
    for (file, _, function), (_, _, own, _, callers) in entries.items():
        if file != "~":
            areas[area(file, function)] += own
            continue
        via_callers = sum(c[2] for c in callers.values())
        for (caller_file, _, caller), (_, _, spent, _) in callers.items():
            areas[area(caller_file, caller)] += own * spent / via_callers if via_callers else 0.0
    return dict(areas)
