"""One lock for a task service and all its groups, and "work may be available" callbacks.

The HTTP layer (optimizers polling, acking, completing) and the engine (planning,
committing) call the scheduling core from different threads; everything they touch is
guarded by one re-entrant lock. Waiting pollers subscribe to be woken when something
changed that may let a poll succeed; callbacks run after the outermost release of the
lock, so a callback may call back into the core without deadlocking and a slow one never
holds up the others' bookkeeping. One-shot callbacks (`after_release`) run the same way, on the
thread that asked for them: how a finished process reaches its committer at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_log = logging.getLogger(__name__)


class ChangeMonitor:
    """A re-entrant lock plus change callbacks fired once the lock is fully released."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._local = threading.local()
        self._subscribers: list[Callable[[], None]] = []

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the lock; on leaving the outermost hold, run the callbacks if `changed` was called."""
        callbacks: tuple[Callable[[], None], ...] = ()
        once: list[Callable[[], None]] = []
        try:
            with self._lock:
                depth: int = getattr(self._local, "depth", 0)
                self._local.depth = depth + 1
                try:
                    yield
                finally:
                    self._local.depth = depth
                    if depth == 0:
                        once = getattr(self._local, "once", None) or []
                        self._local.once = []
                        if getattr(self._local, "changed", False):
                            self._local.changed = False
                            callbacks = tuple(self._subscribers)
        finally:
            for callback in (*callbacks, *once):
                try:
                    callback()
                except Exception:
                    # One broken subscriber must not stop the others from being woken.
                    _log.exception("change callback %r failed", callback)

    def changed(self) -> None:
        """Record, while holding the lock, that tasks may have become available."""
        self._local.changed = True

    def after_release(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once, on this thread, when it leaves its outermost hold (call
        while holding the lock)."""
        once: list[Callable[[], None]] | None = getattr(self._local, "once", None)
        if once is None:
            once = self._local.once = []
        once.append(callback)

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (without the lock held) after each change."""
        with self._lock:
            self._subscribers.append(callback)
