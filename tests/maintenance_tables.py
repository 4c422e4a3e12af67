"""Real tables with history for the maintenance tests, and the checks they share.

A table gets pyiceberg appends, a copy-on-write delete (pyiceberg rewrites a data file),
a merge-on-read DELETE through Iceberg Java (a position delete file) and an equality
delete written by floe, so its snapshots reference files that later snapshots dropped.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from floe.commit.row_delta import commit_row_delta
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.maintenance.executor import run_file_task
from floe.maintenance.orphans_on_executors import ExecutorPool
from floe.protocol.file_tasks import FileTaskResult, FileTaskSpec, OrphanScanSpec
from floe.tables.writer import conform, write_equality_deletes

TABLE = "db.t"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=True),
    NestedField(3, "v", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
}


def rows(ids: range, region: str) -> pa.Table:
    """Rows `ids` of `region`, with v = "v{id}"."""
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "region": pa.array([region] * len(ids), pa.string()),
            "v": pa.array([f"v{i}" for i in ids], pa.string()),
        }
    )


def create_table(catalog: SqlCatalog) -> Table:
    """An empty partitioned v2 table ``db.t`` whose row-level deletes are merge-on-read."""
    return catalog.create_table(TABLE, SCHEMA, partition_spec=SPEC, properties=PROPERTIES)


def equality_delete(table: Table, ids: list[int], region: str, spec_id: int | None = None) -> None:
    """Commit a CDC-style equality delete of `ids` in `region`, in the default spec unless given."""
    deletes = write_equality_deletes(
        table,
        pa.table({"id": pa.array(ids, pa.int64())}),
        ["id"],
        table.metadata.default_spec_id if spec_id is None else spec_id,
        Record(region),
    )
    commit_row_delta(table, delete_files=[deletes])


def build_history(catalog: SqlCatalog, reference: ReferenceReader) -> tuple[Table, list[int]]:
    """The table with eight snapshots (ids returned oldest first), of every kind of change."""
    table = create_table(catalog)
    table.append(conform(table, rows(range(0, 10), "eu")))  # 1
    table.append(conform(table, rows(range(10, 20), "eu")))  # 2
    table.append(conform(table, rows(range(100, 110), "us")))  # 3
    table.delete(EqualTo("id", 101))  # 4: copy-on-write, rewrites the us file
    reference.sql(f"DELETE FROM {qualified_name(catalog.name, TABLE)} WHERE id = 12")  # 5: position delete
    table.refresh()
    equality_delete(table, [3, 4], "eu")  # 6
    table.append(conform(table, rows(range(20, 30), "eu")))  # 7
    table.append(conform(table, rows(range(110, 115), "us")))  # 8
    table.refresh()
    ids = [s.snapshot_id for s in sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)]
    assert len(ids) == 8
    return table, ids


def read(reference: ReferenceReader, catalog: SqlCatalog, snapshot_id: int | None = None) -> Counter[Any]:
    """The rows Iceberg Java reads, now or as of `snapshot_id`."""
    return reference.rows(catalog.name, TABLE, snapshot_id)


def files_of_snapshot(table: Table, snapshot_id: int) -> set[str]:
    """Manifest list, manifests and live data/delete files of one snapshot, read with pyiceberg."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    found = {snapshot.manifest_list}
    for manifest in snapshot.manifests(table.io):
        found.add(manifest.manifest_path)
        found.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io))
    return found


def missing_files(table: Table) -> list[str]:
    """Files some snapshot of the table (or its metadata log) references that do not exist."""
    table.refresh()
    metadata = table.metadata
    wanted = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    for snapshot in metadata.snapshots:
        wanted |= files_of_snapshot(table, snapshot.snapshot_id)
    return sorted(path for path in wanted if not table.io.new_input(path).exists())


@contextmanager
def appending_writer(catalog: SqlCatalog) -> Iterator[list[int]]:
    """A thread appending batches of eu rows through its own table handle until the block ends.

    Yields the ids committed so far (filled in as the writer's commits succeed).
    """
    table = catalog.load_table(TABLE)
    committed: list[int] = []
    done = threading.Event()

    def write() -> None:
        start = 1000
        while not done.is_set():
            batch = range(start, start + 5)
            try:
                table.append(conform(table, rows(batch, "eu")))
            except CommitFailedException:
                table.refresh()
                continue
            committed.extend(batch)
            start += 5

    thread = threading.Thread(target=write)
    thread.start()
    try:
        yield committed
    finally:
        done.set()
        thread.join()


class InProcessExecutors:
    """Runs file tasks here, with the executor's own code; `during_scan` runs between the
    scan and its answer (a writer committing meanwhile)."""

    def __init__(self, during_scan: Callable[[], None] | None = None) -> None:
        self.specs: list[FileTaskSpec] = []
        self.during_scan = during_scan

    def run(self, specs: Sequence[FileTaskSpec]) -> list[FileTaskResult]:
        self.specs.extend(specs)
        results = [run_file_task(spec, spec.io_properties) for spec in specs]
        if any(isinstance(spec, OrphanScanSpec) for spec in specs) and self.during_scan is not None:
            self.during_scan()
        return results

    def executors(self, table: Table) -> ExecutorPool:
        return ExecutorPool(run=self.run, io_properties=dict(table.io.properties), storage_secret=None)
