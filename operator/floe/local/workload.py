"""Streaming writers for local tables: appends, CDC upserts and merge-on-read deletes.

They produce what real streaming ingestion leaves behind (many small files, equality
deletes, position deletes) so that the demo, the tests and the benchmarks optimize
realistic tables. Deterministic for a given seed.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType

from floe.commit.row_delta import commit_row_delta
from floe.tables.writer import conform, write_data_files, write_equality_deletes

CLICKS_SCHEMA = Schema(
    NestedField(1, "click_id", LongType(), required=True),
    NestedField(2, "ts", TimestampType(), required=True),
    NestedField(3, "user_id", LongType(), required=False),
    NestedField(4, "url", StringType(), required=False),
)
CLICKS_SPEC = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day")
)

ORDERS_SCHEMA = Schema(
    NestedField(1, "order_id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=True),
    NestedField(3, "status", StringType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
    identifier_field_ids=[1],
)
ORDERS_SPEC = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region")
)
REGIONS = ("emea", "amer", "apac")
STATUSES = ("new", "paid", "shipped", "delivered", "returned")

ACCOUNTS_SCHEMA = Schema(
    NestedField(1, "account_id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "balance", DoubleType(), required=False),
)

V2 = {"format-version": "2"}


class ClickStream:
    """Append-only events over three days: every batch leaves one small file per day
    (or a single one, with an unpartitioned spec)."""

    def __init__(
        self, catalog: Catalog, identifier: str, seed: int = 1, partition_spec: PartitionSpec = CLICKS_SPEC
    ) -> None:
        self.table = catalog.create_table(
            identifier, CLICKS_SCHEMA, partition_spec=partition_spec, properties=V2
        )
        self._rng = random.Random(seed)
        self._next_id = 0
        self._start = datetime(2024, 3, 1)

    def append_batch(self, rows: int) -> None:
        """Append `rows` clicks spread over three days."""
        rng = self._rng
        ids = list(range(self._next_id, self._next_id + rows))
        self._next_id += rows
        batch = pa.table(
            {
                "click_id": pa.array(ids, pa.int64()),
                "ts": pa.array(
                    [self._start + timedelta(seconds=rng.randrange(3 * 86400)) for _ in ids],
                    pa.timestamp("us"),
                ),
                "user_id": pa.array(
                    [rng.randrange(10_000) if rng.random() > 0.05 else None for _ in ids], pa.int64()
                ),
                "url": pa.array([f"/page/{rng.randrange(500)}" for _ in ids], pa.string()),
            }
        )
        self.table.append(conform(self.table, batch))


class OrderCdcStream:
    """CDC upserts keyed by order_id: each batch inserts new orders and updates old ones.

    An update is an equality delete of the key plus an insert of the new version in the
    same snapshot, the way Flink's upsert sink writes Iceberg.
    """

    def __init__(self, catalog: Catalog, identifier: str, seed: int = 2) -> None:
        self.table = catalog.create_table(
            identifier, ORDERS_SCHEMA, partition_spec=ORDERS_SPEC, properties=V2
        )
        self._rng = random.Random(seed)
        self._region_of: dict[int, str] = {}
        self._next_id = 0

    def upsert_batch(self, inserts: int, updates: int) -> None:
        """Insert `inserts` new orders and update `updates` existing ones in one snapshot."""
        rng = self._rng
        new_ids = list(range(self._next_id, self._next_id + inserts))
        self._next_id += inserts
        for order_id in new_ids:
            self._region_of[order_id] = rng.choice(REGIONS)
        known = list(self._region_of)
        updated = rng.sample(
            known[: max(0, len(known) - inserts)], min(updates, max(0, len(known) - inserts))
        )
        ids = new_ids + updated
        rows = pa.table(
            {
                "order_id": pa.array(ids, pa.int64()),
                "region": pa.array([self._region_of[i] for i in ids], pa.string()),
                "status": pa.array([rng.choice(STATUSES) for _ in ids], pa.string()),
                "amount": pa.array([round(rng.uniform(1, 500), 2) for _ in ids], pa.float64()),
            }
        )
        data_files = write_data_files(self.table, rows)
        by_region: dict[str, list[int]] = defaultdict(list)
        for order_id in updated:
            by_region[self._region_of[order_id]].append(order_id)
        spec_id = self.table.metadata.default_spec_id
        deletes = [
            write_equality_deletes(
                self.table,
                pa.table({"order_id": pa.array(keys, pa.int64())}),
                ["order_id"],
                spec_id,
                Record(region),
            )
            for region, keys in sorted(by_region.items())
        ]
        commit_row_delta(self.table, data_files=data_files, delete_files=deletes)


class AccountsTable:
    """An unpartitioned table appended by pyiceberg; Spark's merge-on-read DELETE/UPDATE
    statements (through the Iceberg Java runtime) add position deletes to it."""

    def __init__(self, catalog: Catalog, identifier: str, seed: int = 3) -> None:
        self.table = catalog.create_table(
            identifier,
            ACCOUNTS_SCHEMA,
            properties={
                **V2,
                "write.delete.mode": "merge-on-read",
                "write.update.mode": "merge-on-read",
                "write.merge.mode": "merge-on-read",
            },
        )
        self._rng = random.Random(seed)
        self._next_id = 0

    def append_batch(self, rows: int) -> None:
        """Append `rows` new accounts."""
        ids = list(range(self._next_id, self._next_id + rows))
        self._next_id += rows
        self.table.append(
            conform(
                self.table,
                pa.table(
                    {
                        "account_id": pa.array(ids, pa.int64()),
                        "name": pa.array([f"account-{i}" for i in ids], pa.string()),
                        "balance": pa.array([round(self._rng.uniform(0, 1e4), 2) for _ in ids], pa.float64()),
                    }
                ),
            )
        )

    @property
    def next_id(self) -> int:
        """Number of accounts appended so far."""
        return self._next_id
