"""The CDC benchmark's input: an orders table keyed by ``order_id``, its base rows and its upserts.

The base is appended by Iceberg's Java writer (Spark), as Flink or Spark write CDC tables; an
upsert is one snapshot of the old rows' equality deletes and their new versions. floe's own
modules are imported where they are used: a "before" side imports them from an older revision.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType

TABLE = "db.orders"
SCHEMA = Schema(
    NestedField(1, "order_id", LongType(), required=True),
    NestedField(2, "customer", StringType(), required=False),
    NestedField(3, "status", StringType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
    NestedField(5, "updated_at", TimestampType(), required=False),
    NestedField(6, "note", StringType(), required=False),
    identifier_field_ids=[1],
)
PROPERTIES = {"format-version": "2", "write.parquet.compression-codec": "zstd"}
STATUSES = ["new", "paid", "packed", "shipped", "delivered", "returned"]


class Orders:
    """Deterministic order rows: new orders, and new versions of random existing ones."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.next_id = 0
        self.version = 0

    def new(self, count: int) -> pa.Table:
        """``count`` orders with the next ids."""
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        return self._rows(ids)

    def upsert(self, count: int) -> pa.Table:
        """New versions of ``count`` existing orders, keys drawn uniformly from all keys."""
        return self._rows(sorted(self.rng.sample(range(self.next_id), count)))

    def recent_upsert(self, new: int, count: int, hot_share: float = 0.9, hot_keys: float = 0.1) -> pa.Table:
        """``new`` new orders and new versions of ``count`` existing ones, ``hot_share`` of them drawn
        from the ``hot_keys`` most recently inserted keys, the rest from the older ones: order and
        session tables, whose young rows change and old ones rarely do."""
        first_hot = int(self.next_id * (1 - hot_keys))
        hot = round(count * hot_share)
        keys = set(self.rng.sample(range(first_hot, self.next_id), hot))
        keys |= set(self.rng.sample(range(first_hot), count - hot))
        ids = sorted(keys) + list(range(self.next_id, self.next_id + new))
        self.next_id += new
        return self._rows(ids)

    def deleted_keys(self, count: int) -> pa.Table:
        """``count`` existing keys, drawn uniformly, to delete."""
        return pa.table(
            {"order_id": pa.array(sorted(self.rng.sample(range(self.next_id), count)), pa.int64())}
        )

    def _rows(self, ids: list[int]) -> pa.Table:
        self.version += 1
        rng = self.rng
        stamp = 1_700_000_000_000_000 + self.version * 60_000_000
        return pa.table(
            {
                "order_id": pa.array(ids, pa.int64()),
                "customer": pa.array([f"c{rng.randrange(200_000):06d}" for _ in ids]),
                "status": pa.array([STATUSES[rng.randrange(len(STATUSES))] for _ in ids]),
                "amount": pa.array([round(rng.random() * 500, 2) for _ in ids], pa.float64()),
                "updated_at": pa.array([stamp + i for i in range(len(ids))], pa.timestamp("us")),
                # A random token per row, as CDC rows carry (a trace or request id): it keeps the
                # rows from compressing into nothing.
                "note": pa.array([f"{rng.getrandbits(96):024x}" for _ in ids]),
            }
        )


def create_table(
    catalog: SqlCatalog,
    reader: Any,
    seed: int,
    base_rows: int,
    base_files: int,
    scratch: Path,
    name: str = TABLE,
) -> tuple[Table, Orders]:
    """Create table ``name`` in ``catalog`` (``reader`` knows it by its name), its base rows in
    ``base_files``; the same ``seed`` gives the same rows.

    Each base file is one append by Iceberg's Java writer, whose Parquet layout (parquet-mr's
    encodings) is also a compacted copy's: a base written with pyarrow's defaults (dictionary
    pages on every column) reads 2-3x slower in Spark, and a read against the compacted copy
    would measure that rather than the deletes.
    """
    from floe.local.reference_reader import qualified_name
    from floe.tables.writer import conform

    catalog.create_namespace_if_not_exists(name.split(".")[0])
    table = catalog.create_table(name, SCHEMA, properties=PROPERTIES)
    orders = Orders(seed)
    staged = scratch / "base-rows.parquet"
    for _ in range(base_files):
        pq.write_table(conform(table, orders.new(base_rows // base_files)), staged)
        reader.spark.read.parquet(str(staged)).coalesce(1).writeTo(
            qualified_name(catalog.name, name)
        ).append()
        staged.unlink()
    table.refresh()
    return table, orders


def upsert(table: Table, rows: pa.Table) -> int:
    """Commit ``rows`` as a CDC upsert (equality deletes on the key plus the rows); its bytes."""
    return row_delta(table, rows, rows.select(["order_id"]))


def row_delta(table: Table, rows: pa.Table | None, deleted_keys: pa.Table | None) -> int:
    """Commit ``rows`` and equality deletes of ``deleted_keys`` (either may be None) in one snapshot,
    as a CDC writer does; the bytes of the files written."""
    from floe.commit.row_delta import commit_row_delta
    from floe.tables.writer import write_data_files, write_equality_deletes_by_partition

    deletes = (
        write_equality_deletes_by_partition(table, deleted_keys, ["order_id"])
        if deleted_keys is not None
        else []
    )
    data = write_data_files(table, rows) if rows is not None else []
    commit_row_delta(table, data_files=data, delete_files=deletes)
    table.refresh()
    return sum(f.file_size_in_bytes for f in (*data, *deletes))
