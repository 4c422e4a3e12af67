"""A bounded queue and the one thread that empties it: posting kept off the threads that post.

As kopf posts its Events (``kopf/_core/engines/posting.py``), with a thread instead of a task,
since floe's engine is not async: a thread that raises an Event (the engine's, a refresh or
maintenance worker, the task service's HTTP thread) only queues it, and never waits for the API
server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

WARN_EVERY_S = 60.0
"""A full queue says so at most this often: it fills when the API server is slow or away."""


class EventPoster(Generic[T]):
    """Calls `post` on each item submitted, in order, from a thread of its own.

    `submit` never blocks: on a full queue (`maxsize` items waiting) the item is dropped and
    counted in `dropped`. An item whose `post` raises is logged and passed over.
    """

    def __init__(
        self,
        post: Callable[[T], None],
        name: str = "floe-events",
        maxsize: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.post = post
        self.name = name
        self.maxsize = maxsize
        self.clock = clock
        self.dropped = 0
        """Items refused because the queue was full, or the poster stopped."""
        self._queue: deque[T] = deque()
        self._changed = threading.Condition()
        self._submitted = 0
        self._posted = 0
        """Items taken off the queue and posted (or failed): `drain` waits for this count."""
        self._stopping = False
        self._last_warning: float | None = None
        self._thread: threading.Thread | None = None

    def submit(self, item: T) -> bool:
        """Queue `item` for posting; False when it is dropped (a full queue, a stopped poster)."""
        with self._changed:
            if self._stopping or len(self._queue) >= self.maxsize:
                self.dropped += 1
                self._warn_dropped()
                return False
            self._queue.append(item)
            self._submitted += 1
            self._changed.notify_all()
            return True

    def start(self) -> None:
        """Start posting, what was submitted before first."""
        with self._changed:
            self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def drain(self, timeout_s: float) -> bool:
        """Wait until what is queued now has been posted; False if it has not after `timeout_s`
        (or cannot be: the poster is not running)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            target = self._submitted
            while self._posted < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._thread is None or not self._thread.is_alive():
                    return False
                self._changed.wait(remaining)
            return True

    def stop(self, timeout_s: float = 5.0) -> None:
        """Post what is queued (for at most `timeout_s`), then stop; later submits are dropped."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("%s: stopped with %d items not posted", self.name, len(self._queue))
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._stopping:
                    self._changed.wait()
                if not self._queue:
                    return  # stopping, and everything is posted
                item = self._queue.popleft()
            try:
                self.post(item)
            except Exception:
                log.exception("%s: posting failed", self.name)
            with self._changed:
                self._posted += 1
                self._changed.notify_all()

    def _warn_dropped(self) -> None:
        now = self.clock()
        if self._last_warning is None or now - self._last_warning >= WARN_EVERY_S:
            self._last_warning = now
            log.warning("%s: queue full or stopped: %d items dropped so far", self.name, self.dropped)
