"""Child-process steps: each measurement runs in a fresh interpreter, the script started with ``--step``.

So one engine's warm JIT, caches or heap never help or hurt another. The child writes its
result as JSON to the file ``--result`` names, and the parent reads it back.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

Step = Callable[[argparse.Namespace], dict[str, Any]]
"""A child step: the parsed command line in, the JSON-able result out."""


class StepFailed(RuntimeError):
    """A benchmark child process exited with an error."""


def add_step_arguments(parser: argparse.ArgumentParser, steps: Sequence[str]) -> None:
    """The hidden ``--step`` and ``--result`` flags the parent passes to a child."""
    parser.add_argument("--step", choices=steps, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)


def run_requested_step(args: argparse.Namespace, steps: Mapping[str, Step]) -> None:
    """In a child: run the step ``--step`` names and write its result for ``run_step`` to read.

    Without ``--result`` (a step run by hand) it refuses before the step's work, not after it.
    """
    if args.result is None:
        raise SystemExit(f"--step {args.step} needs --result FILE, where its result is written")
    write_result(args.result, steps[args.step](args))


def run_step(script: Path, args: Sequence[str], work_dir: Path, label: str) -> dict[str, Any]:
    """Run ``script --step ...`` in a fresh interpreter and return the JSON it wrote.

    The child's output goes to ``<work_dir>/logs/<label>.log``; on failure its tail is
    put in the raised ``StepFailed``.
    """
    logs = work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{label}.log"
    result_path = logs / f"{label}.json"
    result_path.unlink(missing_ok=True)
    command = [sys.executable, str(script), *args, "--result", str(result_path)]
    started = time.monotonic()
    with log_path.open("w") as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if code != 0 or not result_path.is_file():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise StepFailed(f"step {label} exited with {code} after {time.monotonic() - started:.0f}s:\n{tail}")
    result: dict[str, Any] = json.loads(result_path.read_text())
    return result


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Write a child's result for ``run_step`` to read."""
    path.write_text(json.dumps(result, indent=2, sort_keys=True))
