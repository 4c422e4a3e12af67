"""What runs beside the driver: a loop on a thread of its own, and ending a subprocess."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import Any

THREAD_JOIN_S = 600.0


class Loop:
    """Calls ``step`` on a daemon thread until stopped; ``step`` returns how long to wait before
    it is called again."""

    def __init__(self, name: str, step: Callable[[], float], first_wait_s: float = 0.0) -> None:
        """Prepare the thread ``name``; nothing runs before ``start``."""
        self._step = step
        self._first_wait_s = first_wait_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop after the step running now, and wait for it."""
        self._stop.set()
        self._thread.join(timeout=THREAD_JOIN_S)

    def _run(self) -> None:
        wait = self._first_wait_s
        while not self._stop.wait(wait):
            wait = self._step()


def end_process(process: subprocess.Popen[Any], timeout_s: float) -> None:
    """Wait for ``process`` to end (after it was asked to), killing it after ``timeout_s``."""
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
