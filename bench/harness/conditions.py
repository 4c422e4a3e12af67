"""A run's conditions, kept beside its raw results so that its result can be reported again later.

A long benchmark writes them once its measurements are done; ``--report-only`` reads them back, so
the result names the run's command, date, commit, machine and load, not the re-report's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from harness.results import BenchResult, new_result

CONDITIONS = ("command", "date", "commit", "machine", "load")
"""The fields of a `BenchResult` that describe the run rather than its figures."""


def save_conditions(path: Path, settings: dict[str, Any]) -> None:
    """Write this run's conditions, as `new_result` finds them, and the ``settings`` its report reads."""
    now = new_result("", "", "")
    conditions = {name: getattr(now, name) for name in CONDITIONS}
    path.write_text(json.dumps({"conditions": conditions, "settings": settings}, indent=1))


def load_conditions(path: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """The conditions and settings `save_conditions` wrote; a missing file ends the run naming it."""
    if not path.is_file():
        raise SystemExit(f"--report-only: {path} is missing (the run did not finish)")
    saved: dict[str, Any] = json.loads(path.read_text())
    return saved["conditions"], saved["settings"]


def under(result: BenchResult, conditions: dict[str, str]) -> BenchResult:
    """``result`` with the saved run's conditions in place of this process's."""
    return dataclasses.replace(result, **conditions)
