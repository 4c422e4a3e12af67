"""Timed queries kept apart from floe's rewrite tasks on a Spark session they share.

So a query's time measures the table's layout, not the query and a rewrite competing for
the cores. The writers, and floe's planning and commits, carry on meanwhile.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from floe.local.reference_reader import ReferenceReader
from floe.protocol.assignment import TaskSpec
from floe_optimizer.runner import TaskRunner
from floe_optimizer.spark_runner import TaskOutcome


class ScanGate:
    """Rewrite tasks share the gate; a timed query holds it alone.

    A query waiting for the gate holds back new rewrite tasks, so it waits at most for those
    already running.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._tasks = 0
        self._queries_waiting = 0
        self._query_running = False

    @contextlib.contextmanager
    def task(self) -> Iterator[None]:
        """Hold the gate for one rewrite task."""
        with self._cond:
            self._cond.wait_for(lambda: not self._query_running and not self._queries_waiting)
            self._tasks += 1
        try:
            yield
        finally:
            with self._cond:
                self._tasks -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def query(self) -> Iterator[None]:
        """Hold the gate alone for one timed query."""
        with self._cond:
            self._queries_waiting += 1
            self._cond.wait_for(lambda: self._tasks == 0 and not self._query_running)
            self._queries_waiting -= 1
            self._query_running = True
        try:
            yield
        finally:
            with self._cond:
                self._query_running = False
                self._cond.notify_all()

    def timed_read(self, reader: ReferenceReader, query: str) -> tuple[float, int, int]:
        """Seconds, count and hash sum of ``query`` (``SELECT count(*), sum(hash(*)) ...``), gate held."""
        with self.query():
            started = time.perf_counter()
            [(count, hash_sum)] = reader.sql(query)
            elapsed = time.perf_counter() - started
        return elapsed, int(count), int(hash_sum or 0)


class GatedRunner:
    """An optimizer's task runner, each task run through the `ScanGate`."""

    def __init__(self, runner: TaskRunner, gate: ScanGate) -> None:
        self.runner = runner
        self.gate = gate

    def run(self, spec: TaskSpec) -> TaskOutcome:
        """Run the task once no timed query runs or waits."""
        with self.gate.task():
            return self.runner.run(spec)

    def cancel(self) -> None:
        """Cancel the running tasks."""
        self.runner.cancel()
