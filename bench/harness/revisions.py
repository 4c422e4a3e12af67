"""floe at another git revision, for a before/after benchmark: its packages, and children that import them.

A benchmark that compares floe before and after a change runs the same measuring code on
both sides, each in a fresh interpreter that imports floe from the side's source: this
checkout's, or a revision's extracted from git.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.cli import BENCH_DIR
from harness.steps import run_step

REPO = BENCH_DIR.parent


def revision_source(
    revision: str, work_dir: Path, packages: Sequence[str] = ("operator", "optimizer_image")
) -> Path:
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

    The arguments go as JSON too, so they must be JSON-able. The child's stderr is this one's:
    a failure shows its traceback.
    """
    code = (
        "import json, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
        f"import {script} as s; print(json.dumps(s.{function}(*json.loads(sys.argv[3]))))"
    )
    command = [sys.executable, "-c", code, str(source / "operator"), str(BENCH_DIR), json.dumps(list(args))]
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@contextlib.contextmanager
def floe_from(source: Path) -> Iterator[None]:
    """Child processes started meanwhile import floe from ``source`` (ahead of the editable install).

    ``source`` is a checkout or a `revision_source`; ``bench/`` stays importable for the harness.
    """
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(source / "operator"), str(source / "optimizer_image"), str(BENCH_DIR)]
    )
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = previous


def run_before_and_after(script: Path, flags: Sequence[str], before: str, work_dir: Path) -> None:
    """Run ``script --step side`` twice, each in a fresh interpreter: floe at ``before``, then this one.

    Each side works in ``<work_dir>/<side>`` and writes its result to ``<work_dir>/logs/<side>.json``.
    """
    for side, source in (("before", revision_source(before, work_dir)), ("after", REPO)):
        with floe_from(source):
            run_step(
                script, [*flags, f"--dir={work_dir / side}", f"--side={side}", "--step=side"], work_dir, side
            )
