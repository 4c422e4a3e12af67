"""floe at another git revision: its packages extracted once, and a benchmark's function run against them.

A benchmark that compares floe before and after a change runs the same measuring code on
both sides, each in a fresh interpreter that imports floe from the side's source: this
checkout's, or a revision's extracted from git.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent


def revision_source(revision: str, work_dir: Path, packages: Sequence[str] = ("operator",)) -> Path:
    """The repository's ``packages`` directories at ``revision``, extracted once under ``work_dir``."""
    commit = subprocess.check_output(["git", "-C", str(REPO), "rev-parse", revision], text=True).strip()
    target = work_dir / f"src-{commit[:12]}"
    if not all((target / package).is_dir() for package in packages):
        work_dir.mkdir(parents=True, exist_ok=True)
        archive = work_dir / f"{commit[:12]}.tar"
        subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), commit, *packages], check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        archive.unlink()
    return target


def run_against(source: Path, script: str, function: str, *args: Any) -> Any:
    """``bench/<script>.py``'s ``function(*args)`` in a fresh interpreter importing floe from
    ``source/operator`` (`REPO` for this checkout); its result, which must be JSON.

    The arguments go as JSON too, so they must be JSON-able.
    """
    code = (
        "import json, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
        f"import {script} as s; print(json.dumps(s.{function}(*json.loads(sys.argv[3]))))"
    )
    command = [sys.executable, "-c", code, str(source / "operator"), str(BENCH), json.dumps(list(args))]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
