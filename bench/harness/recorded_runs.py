"""A benchmark whose runs each take their own command (an hour and more apiece) keeps every run's
figures in ``bench/results/<benchmark>_runs.json`` and reports them together: a recorded run
replaces only the earlier one of the same key (table count, catalog, shape or mode)."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from harness.results import Target

Run = dict[str, Any]


def merged_runs(
    runs: list[Run], path: Path, key: Callable[[Run], Hashable], order: Callable[[Run], Any]
) -> list[Run]:
    """The runs recorded in `path` with `runs` in place of those of the same `key`, sorted by `order`."""
    earlier = json.loads(path.read_text()) if path.exists() else []
    merged = {key(run): run for run in earlier}
    merged.update({key(run): run for run in runs})
    return sorted(merged.values(), key=order)


def worst_target(
    measured: list[Run], what: str, key: str, goal: float, where: Callable[[Run], str], form: str = "{:.1f}"
) -> Target:
    """The target `what` (at most `goal`) against the worst of the `measured` runs: one line per target
    however many runs are recorded (each run's figures are in the record's tables); `where` names the
    worst run."""
    worst = max(measured, key=lambda run: run[key])
    return Target(
        f"{what}: worst of {len(measured)} (at {where(worst)})",
        f"<= {goal:g}",
        form.format(worst[key]),
        worst[key] <= goal,
    )


def provenance_note(runs: list[Run], what: str) -> str:
    """Which command measured the runs, when and at which commit: `what` says what a command measured."""
    commands = sorted({f"`{run['command']}` ({run['date']}, {run['commit']})" for run in runs})
    return f"Each {what} is recorded by its own command: " + "; ".join(commands) + "."
