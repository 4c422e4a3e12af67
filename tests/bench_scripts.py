"""The benchmark scripts in `bench/`, imported as modules so tests can call their argument checks."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def import_bench_script(name: str) -> ModuleType:
    """`bench/<name>.py` as a module, with `bench/` on the path while it imports its `harness` package."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
