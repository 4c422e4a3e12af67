"""Waiting between retries, and logging an unreachable task service once per outage."""

from __future__ import annotations

import logging
import random
import threading
import time


class Backoff:
    """Exponentially growing, jittered delays between attempts of a failing call."""

    def __init__(self, initial_s: float = 0.5, max_s: float = 30.0, factor: float = 2.0) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.factor = factor
        self._failures = 0

    def next_delay(self) -> float:
        """The wait before the next attempt; each call makes the following one longer."""
        delay = min(self.max_s, self.initial_s * self.factor**self._failures)
        self._failures += 1
        # Jitter keeps the threads of one optimizer (and many optimizers) from retrying in step.
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        """Start again from the initial delay after a success."""
        self._failures = 0


class Outage:
    """Logs when the task service becomes unreachable, every minute it stays so, and when it is back.

    Shared by all threads of an optimizer, so one outage is one warning, not one per thread and call.
    """

    def __init__(self, log: logging.Logger, repeat_s: float = 60.0) -> None:
        self._log = log
        self._repeat_s = repeat_s
        self._lock = threading.Lock()
        self._since: float | None = None
        self._last_logged = 0.0

    def failed(self, error: Exception) -> None:
        """A call could not reach the service."""
        now = time.monotonic()
        with self._lock:
            if self._since is None:
                self._since = self._last_logged = now
                self._log.warning("%s; retrying with backoff", error)
            elif now - self._last_logged >= self._repeat_s:
                self._last_logged = now
                self._log.warning("%s; still retrying after %.0f s", error, now - self._since)
            else:
                self._log.debug("%s", error)

    def succeeded(self) -> None:
        """A call reached the service."""
        with self._lock:
            if self._since is not None:
                self._log.info("task service reachable again after %.0f s", time.monotonic() - self._since)
                self._since = None
