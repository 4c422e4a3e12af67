"""A service run in a child process of the benchmark, and a load step run against it from another one.

The service child is the script started with its serving step: it writes its URL to
``--url-file`` and serves until its stdin closes. The load child is a `run_step` step given
``--url`` and ``--service-pid`` (whose CPU it measures). Both write their result as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.steps import run_step

START_TIMEOUT_S = 120.0


def serve_until_stdin_closes(url_file: Path, url: str) -> None:
    """In the service child: publish ``url`` for the parent, then wait until the parent closes stdin."""
    url_file.write_text(url)
    sys.stdin.read()


def run_against_service(
    script: Path, serve_args: Sequence[str], load_args: Sequence[str], work_dir: Path, label: str
) -> dict[str, Any]:
    """Start ``script serve_args`` as the service, run ``script load_args`` against it, stop the service.

    The load step's result and the service's are merged; the service's output goes to
    ``<work_dir>/logs/<label>-serve.log``.
    """
    logs = work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    url_file = logs / f"{label}.url"
    url_file.unlink(missing_ok=True)
    serve_result = logs / f"{label}-serve.json"
    command = [sys.executable, str(script), *serve_args, f"--url-file={url_file}", f"--result={serve_result}"]
    with (logs / f"{label}-serve.log").open("w") as log:
        server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not url_file.is_file() or not url_file.read_text():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the service child did not start; see {log.name}")
                time.sleep(0.1)
            against = [f"--url={url_file.read_text()}", f"--service-pid={server.pid}"]
            result = run_step(script, [*load_args, *against], work_dir, label)
        finally:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(timeout=START_TIMEOUT_S)
    served: dict[str, Any] = json.loads(serve_result.read_text())
    return result | served
