"""The engine's committer: one thread that commits each optimizing process as soon as its last
task's result is accepted, rather than on the engine's next round.

Commits run one at a time, in the order their processes finished, off the threads that
accepted the results (an optimizer's HTTP request never waits for a catalog). A round of the
engine first waits for the commits already submitted (`settle`), so that after a round every
process finished before it has committed, as before, and a stop lets a running commit finish:
a commit is never cut in half.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from floe.tables.request_budget import Priority, calls_for

log = logging.getLogger(__name__)


class CommitRunner:
    """Runs commit work on one ``floe-commit`` thread and tells whether any is under way."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="floe-commit")
        self._lock = threading.Lock()
        self._pending: set[Future[None]] = set()
        self._closed = False

    def submit(self, work: Callable[[], None]) -> None:
        """Run `work` on the commit thread; an error it raises is logged. Ignored once closed
        (the stop abandons what is left)."""
        with self._lock:
            if self._closed:
                return
            future = self._pool.submit(self._run, work)
            self._pending.add(future)
        future.add_done_callback(self._done)

    @property
    def busy(self) -> bool:
        """Whether commit work is submitted and not yet done."""
        with self._lock:
            return bool(self._pending)

    def settle(self) -> None:
        """Wait until the work submitted before this call is done (call without the engine's
        lock: the work takes it)."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.exception()  # waits; `_run` already logged what went wrong

    def close(self) -> None:
        """Finish the work under way and queued, then stop the thread."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True)

    def _done(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)

    @staticmethod
    def _run(work: Callable[[], None]) -> None:
        try:
            # A commit goes first where the catalog's request budget is short.
            with calls_for(Priority.COMMIT):
                work()
        except Exception:
            # The process stays in flight or is forgotten as `work` left it; the next round's
            # backstop (`take_finished`, due retries) picks up what is left.
            log.exception("commit work failed")
