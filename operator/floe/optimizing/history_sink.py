"""Appending the engine's run records to the run history table, in batches, on a thread of its
own: a commit never waits for the history, and a history table that cannot be written loses
nothing while it comes back within `max_pending` runs (`HistoryProblem` says why meanwhile)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from pyiceberg.table import Table

from floe.api.history import RunRecord
from floe.tables.run_history_table import append_runs

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 300.0
"""How long a run waits before it is appended: one snapshot, and one small file per day's
partition, per interval."""
FLUSH_AT = 1000
"""Runs waiting that are appended at once, whatever the interval."""
MAX_PENDING = 100_000
"""Runs kept while the table cannot be written; beyond them the oldest are dropped (and counted)."""


class RunHistorySink:
    """Takes run records (`put`) and appends them to the table `open_table` opens (on first use,
    and again after a failure). `on_problem` hears a message when an append fails, and None once
    one succeeds again; it is called on the sink's thread."""

    def __init__(
        self,
        open_table: Callable[[], Table],
        on_problem: Callable[[str | None], None],
        flush_interval_s: float = FLUSH_INTERVAL_S,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self._open_table = open_table
        self._on_problem = on_problem
        self._flush_interval_s = flush_interval_s
        self._pending: deque[RunRecord] = deque(maxlen=max_pending)
        self._table: Table | None = None
        self.problem: str | None = None
        """Why the last append failed; None after a success."""
        self.dropped = 0
        """Runs dropped because `max_pending` runs were waiting."""
        self.appended = 0
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="floe-run-history", daemon=True)
        self._thread.start()

    def put(self, run: RunRecord) -> None:
        """Queue a run for the next append; never blocks on the table."""
        with self._lock:
            if len(self._pending) == self._pending.maxlen:
                self.dropped += 1
            self._pending.append(run)
            full = len(self._pending) >= FLUSH_AT
        if full:
            self._wake.set()

    def flush(self) -> bool:
        """Append every run waiting now; False (the runs kept) when the table cannot take them."""
        with self._flushing:  # one append at a time: the thread's, or a caller's
            with self._lock:
                batch = list(self._pending)
            if not batch:
                return True
            try:
                if self._table is None:
                    self._table = self._open_table()
                append_runs(self._table, batch)
            except Exception as exc:  # any failure keeps the runs for the next flush
                self._table = None  # opened again next time: the catalog or the table may have changed
                message = f"the run history table could not be written ({len(batch)} runs wait): {exc}"
                if self.problem is None:
                    log.warning("%s", message)
                self.problem = message
                self._on_problem(message)
                return False
            appended = {id(run) for run in batch}
            with self._lock:
                # Runs put meanwhile are behind the batch; runs dropped meanwhile were its oldest.
                while self._pending and id(self._pending[0]) in appended:
                    self._pending.popleft()
            self.appended += len(batch)
            if self.problem is not None:
                self.problem = None
                self._on_problem(None)
            return True

    def close(self) -> None:
        """Append what waits (once), then stop the thread."""
        self._stopped.set()
        self._wake.set()
        self._thread.join()
        self.flush()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self._flush_interval_s)
            self._wake.clear()
            if not self._stopped.is_set():
                self.flush()
