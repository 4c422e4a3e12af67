"""SIGINT and SIGTERM as an exception the CLI's commands clean up after, and end with 130 / 143.

`stop_on_signals` turns either signal into `Interrupted` in the main thread, so the work in
progress unwinds through its ``finally`` and ``except BaseException`` blocks (cancelling Spark
jobs, deleting the files an abandoned process wrote). Inside `deferred_interrupts` a signal
only takes effect when the block ends: a commit in flight is never cut in half.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, like KeyboardInterrupt: no ``except
    Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.outcome = ""
        """What the interrupted work left, for the one line the command prints (set on the way out)."""
        super().__init__(f"interrupted by {self.signal_name}")

    @property
    def signal_name(self) -> str:
        """SIGINT or SIGTERM."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as shells report a process a signal ended: 130, 143."""
        return 128 + self.signum


class _State:
    active = False
    deferring = 0
    pending: int | None = None


def _on_signal(signum: int, _: FrameType | None) -> None:
    if _State.deferring:
        _State.pending = signum
        return
    raise Interrupted(signum)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted` in the main thread; the
    previous handlers come back after it. Call `reinstall` after starting Spark, whose
    SparkContext takes SIGINT for itself."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("signal handlers can only be installed from the main thread")
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    _State.active = True
    reinstall()
    try:
        yield
    finally:
        _State.active = False
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _State.pending = None


def reinstall() -> None:
    """Take SIGINT and SIGTERM (back) for `Interrupted`, inside `stop_on_signals` only."""
    if _State.active:
        for signum in STOP_SIGNALS:
            signal.signal(signum, _on_signal)


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold a signal that arrives inside the block until it ends, then raise `Interrupted`
    (after the block's own result, if any, is in place). No effect without `stop_on_signals`."""
    _State.deferring += 1
    try:
        yield
    finally:
        _State.deferring -= 1
    if not _State.deferring and _State.pending is not None:
        signum, _State.pending = _State.pending, None
        raise Interrupted(signum)
