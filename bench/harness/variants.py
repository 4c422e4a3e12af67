"""The rewrite benchmark's input: the events table without deletes, with position deletes and with
equality deletes, each kept as a pristine copy (`Layout`) that every timed run starts from.

At scale 1 the table is ~2 GiB in 4,000 zstd Parquet files of ~512 KiB over `DAYS` day
partitions, written with pyiceberg in commits of 5 batches, each batch one small file per
day. Both kinds of deletes remove the same 5% of the rows (``event_id % 20 = 0``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from floe.commit.row_delta import commit_row_delta
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.tables.writer import write_data_files, write_equality_deletes_by_partition
from harness import MiB
from harness.events import EVENTS_SCHEMA, EVENTS_SPEC, NAMESPACE, TABLE_PROPERTIES
from harness.pristine import Layout
from harness.rows import DAYS, EventGenerator
from harness.timing import timed
from harness.warehouse import live_files

TABLE = f"{NAMESPACE}.events"
VARIANTS = {
    "none": "no deletes",
    "pos": "5% position deletes (Spark merge-on-read DELETE)",
    "eq": "5% equality deletes (on event_id)",
}
FULL_FILES = 4_000
FULL_TABLE_BYTES = 2 * 1024 * MiB
BATCHES_PER_COMMIT = 5
EQ_DELETE_COMMITS = 5
DELETE_MODULUS = 20
DELETED_KEYS = "deleted-keys.parquet"
"""Under the layout's root: key and partition source of the rows the variants with deletes remove."""


def table_stats(layout: Layout, name: str) -> dict[str, int]:
    """`live_files` of the table in catalog ``name``."""
    with layout.catalog(name) as catalog:
        return live_files(catalog.load_table(TABLE))


def write_base(layout: Layout, name: str, scale: float, seed: int) -> dict[str, Any]:
    """Write the table without deletes in catalog ``name`` (`FULL_FILES` x ``scale`` files) and the
    keys of the rows later deleted; the rows written and the seconds it took."""
    started = time.perf_counter()
    with layout.catalog(name) as catalog:
        catalog.create_namespace(NAMESPACE)
        table = catalog.create_table(
            TABLE, EVENTS_SCHEMA, partition_spec=EVENTS_SPEC, properties=TABLE_PROPERTIES
        )
        generator = EventGenerator(seed)
        files = max(DAYS, round(FULL_FILES * scale))
        batches = math.ceil(files / DAYS)
        rows_per_batch = generator.rows_per_file(round(FULL_TABLE_BYTES / FULL_FILES)) * DAYS
        pending: list[Any] = []
        deleted: list[pa.Table] = []
        for index in range(batches):
            rows = generator.batch(index, index * rows_per_batch, rows_per_batch)
            deleted.append(_deleted_rows(rows))
            pending.extend(write_data_files(table, rows))
            if (index + 1) % BATCHES_PER_COMMIT == 0 or index + 1 == batches:
                commit_row_delta(table, data_files=pending)
                pending = []
        pq.write_table(pa.concat_tables(deleted), layout.root / DELETED_KEYS)
    return {"rows": batches * rows_per_batch, "build_seconds": time.perf_counter() - started}


def _deleted_rows(batch: pa.Table) -> pa.Table:
    """Key and partition source of the rows every variant with deletes removes (event_id % 20 = 0)."""
    ids = batch.column("event_id")
    remainder = pc.subtract(ids, pc.multiply(pc.divide(ids, DELETE_MODULUS), DELETE_MODULUS))
    return batch.select(["event_id", "ts"]).filter(pc.equal(remainder, 0))


def add_equality_deletes(layout: Layout, name: str) -> None:
    """Delete the rows of `DELETED_KEYS` by equality deletes on event_id, in `EQ_DELETE_COMMITS` commits."""
    with layout.catalog(name) as catalog:
        table = catalog.load_table(TABLE)
        keys = pq.read_table(layout.root / DELETED_KEYS)
        chunk = math.ceil(keys.num_rows / EQ_DELETE_COMMITS)
        for start in range(0, keys.num_rows, chunk):
            rows = keys.slice(start, chunk)
            delete_files = write_equality_deletes_by_partition(table, rows, ["event_id"])
            commit_row_delta(table, delete_files=delete_files)


def register(reader: ReferenceReader, layout: Layout, name: str) -> None:
    """Make catalog ``name`` of the live directory known to Spark."""
    reader.register_sql_catalog(name, layout.database(name), layout.warehouse_uri)


def content_hash(reader: ReferenceReader, layout: Layout, name: str) -> list[str]:
    """Row count and two order-independent hash sums of the table, read by Iceberg Java.

    The sums are exact decimals, so they cannot overflow; row multisets are not collected,
    because at ~50 M rows they would not fit the driver.
    """
    register(reader, layout, name)
    [row] = reader.sql(
        "SELECT count(*), CAST(sum(CAST(xxhash64(*) AS DECIMAL(38, 0))) AS STRING), "
        f"CAST(sum(CAST(hash(*) AS DECIMAL(38, 0))) AS STRING) FROM {qualified_name(name, TABLE)}"
    )
    return [str(value) for value in row]


def full_scan_seconds(reader: ReferenceReader, layout: Layout, name: str, repeat: int = 2) -> float:
    """The fastest of `repeat` full reads of every column of the table by Iceberg Java."""
    register(reader, layout, name)
    query = f"SELECT sum(hash(*)) FROM {qualified_name(name, TABLE)}"
    return min(timed(lambda: reader.sql(query)).seconds for _ in range(repeat))


def spark_delete(reader: ReferenceReader, layout: Layout, name: str) -> float:
    """Delete 5% of the rows with Spark's merge-on-read DELETE (position deletes); return seconds."""
    register(reader, layout, name)
    statement = f"DELETE FROM {qualified_name(name, TABLE)} WHERE event_id % {DELETE_MODULUS} = 0"
    return timed(lambda: reader.sql(statement)).seconds


@dataclass
class Variants:
    """The variants built: each one's live files and its content as Iceberg Java reads it."""

    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    content: dict[str, list[str]] = field(default_factory=dict)


def build_variants(
    layout: Layout, reader: ReferenceReader, variants: list[str], log: Callable[[str], None]
) -> Variants:
    """Derive each variant from the saved ``none`` copy (`write_base`) and save it as its pristine copy.

    ``pos`` deletes with Spark's merge-on-read ``DELETE`` through Iceberg's Java runtime
    (one file-scoped position delete file per data file), ``eq`` with floe's equality deletes.
    """
    built = Variants()
    for variant in variants:
        name = f"{variant}_build"
        if variant != "none":
            layout.restore("none", name)
            if variant == "pos":
                log(f"Spark DELETE wrote position deletes in {spark_delete(reader, layout, name):.0f} s")
            else:
                add_equality_deletes(layout, name)
            layout.save(variant, name)
        built.stats[variant] = table_stats(layout, name)
        built.content[variant] = content_hash(reader, layout, name)
        log(f"variant {variant}: {built.stats[variant]}; content {built.content[variant]}")
    return built
