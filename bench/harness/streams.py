"""The ingest benchmark's input: the same streaming writes, round after round, into catalogs A and B.

Three tables, written by floe's own workload generators with the same seeds on both
sides, so A and B hold the same rows after every round:

- ``clicks``: `ClickStream` appends, partitioned by day (3 small files per round);
- ``pageviews``: `ClickStream` appends, unpartitioned (1 small file per round);
- ``orders``: `OrderCdcStream` upserts, partitioned by region: new orders plus updates
  of old ones as equality deletes (up to 3 data and 3 delete files per round).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table

from floe.local.reference_reader import ReferenceReader
from floe.local.workload import CLICKS_SPEC, ClickStream, OrderCdcStream
from harness.warehouse import sql_catalog_properties

NAMESPACE = "bench"
SIDES = {"A": "without floe", "B": "with floe run"}

log = logging.getLogger(__name__)


def clicks_writer(
    rows: int, seed: int, spec: PartitionSpec
) -> Callable[[SqlCatalog, str], Callable[[], None]]:
    """A `ClickStream` appending ``rows`` per round."""

    def create(catalog: SqlCatalog, identifier: str) -> Callable[[], None]:
        stream = ClickStream(catalog, identifier, seed=seed, partition_spec=spec)
        return lambda: stream.append_batch(rows)

    return create


def orders_writer(inserts: int, updates: int) -> Callable[[SqlCatalog, str], Callable[[], None]]:
    """An `OrderCdcStream` upserting ``inserts`` new and ``updates`` old orders per round."""

    def create(catalog: SqlCatalog, identifier: str) -> Callable[[], None]:
        stream = OrderCdcStream(catalog, identifier, seed=2)
        return lambda: stream.upsert_batch(inserts=inserts, updates=updates)

    return create


class CommitRetries(logging.Handler):
    """Counts the commits pyiceberg retried because another commit (floe's) got in first."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Count pyiceberg's "retrying" warnings."""
        if record.getMessage().startswith("Commit failed due to a concurrent update"):
            self.count += 1


@dataclass(frozen=True)
class Workload:
    """One table of the run: how to create its writer and how to read it selectively."""

    name: str
    where: str
    create: Callable[[SqlCatalog, str], Callable[[], None]]

    @property
    def identifier(self) -> str:
        """``namespace.table``."""
        return f"{NAMESPACE}.{self.name}"


WORKLOADS = (
    Workload(
        "clicks",
        "ts >= TIMESTAMP_NTZ '2024-03-02 10:00:00' AND ts < TIMESTAMP_NTZ '2024-03-02 11:00:00'",
        clicks_writer(2000, seed=1, spec=CLICKS_SPEC),
    ),
    Workload("pageviews", "user_id BETWEEN 4200 AND 4299", clicks_writer(500, seed=4, spec=PartitionSpec())),
    Workload("orders", "region = 'apac' AND order_id < 2000", orders_writer(inserts=400, updates=200)),
)


class Catalogs:
    """Catalogs A and B, their writers, and the Spark names the reference reader knows them by."""

    def __init__(self, work: Path, reader: ReferenceReader) -> None:
        self.catalogs: dict[str, SqlCatalog] = {}
        self.properties: dict[str, dict[str, str]] = {}
        self.writers: dict[str, list[Callable[[], None]]] = {}
        for side in SIDES:
            directory = work / side
            (directory / "warehouse").mkdir(parents=True)
            properties = sql_catalog_properties(directory / "catalog.db", directory / "warehouse")
            name = f"ingest_{side.lower()}"
            catalog = SqlCatalog(name, **properties)
            catalog.create_namespace(NAMESPACE)
            reader.register_sql_catalog(name, directory / "catalog.db", properties["warehouse"])
            self.catalogs[side] = catalog
            self.properties[side] = properties
            self.writers[side] = [w.create(catalog, w.identifier) for w in WORKLOADS]

    def write_round(self) -> None:
        """One batch into every table, A's then B's (same seeds, so the same rows)."""
        for side in SIDES:
            for write in self.writers[side]:
                write()

    def pin(self) -> dict[tuple[str, str], Table]:
        """Every table as of now, by (table name, side); call between rounds."""
        return {
            (w.name, side): self.catalogs[side].load_table(w.identifier) for w in WORKLOADS for side in SIDES
        }


class Rounds:
    """The writer thread: a round of writes into A and B every interval until the end."""

    def __init__(self, catalogs: Catalogs, interval_s: float, end_s: float, started: float) -> None:
        self.catalogs = catalogs
        self.interval_s = interval_s
        self.end_s = end_s
        self.started = started
        self.lock = threading.Lock()
        self.done = 0
        self.late = 0
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-writers", daemon=True)

    def start(self) -> None:
        """Start writing in the background."""
        self._thread.start()

    def join(self) -> None:
        """Wait for the last round; re-raise what stopped the writers, if anything did."""
        self._thread.join()
        if self.failure is not None:
            raise RuntimeError("a writer failed") from self.failure

    def alive(self) -> bool:
        """Whether rounds are still being written."""
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while True:
                due = self.started + self.done * self.interval_s
                if due - self.started >= self.end_s:
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                else:
                    self.late += 1
                with self.lock:
                    self.catalogs.write_round()
                    self.done += 1
        except BaseException as exc:
            self.failure = exc
            log.exception("writer round %d failed", self.done)
