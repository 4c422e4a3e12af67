"""How busy the machine was: the benchmarks run on a shared machine, so every section says."""

from __future__ import annotations

from pathlib import Path


def load_average() -> str:
    """The 1/5/15-minute load averages, as ``/proc/loadavg`` gives them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
