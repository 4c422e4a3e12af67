"""floe at another git revision, for a before/after benchmark: its packages, and children that import them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.cli import BENCH_DIR
from harness.steps import run_step

REPO = BENCH_DIR.parent


def revision_source(revision: str, work_dir: Path) -> Path:
    """floe's packages (``operator``, ``optimizer_image``) at ``revision``, extracted once from git."""
    commit = subprocess.check_output(["git", "-C", str(REPO), "rev-parse", revision], text=True).strip()
    target = work_dir / f"src-{commit[:12]}"
    if not (target / "operator").is_dir():
        archive = work_dir / f"{commit[:12]}.tar"
        subprocess.run(
            ["git", "-C", str(REPO), "archive", "-o", str(archive), commit, "operator", "optimizer_image"],
            check=True,
        )
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        archive.unlink()
    return target


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
