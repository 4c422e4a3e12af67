"""The CDC frontier's three workloads: what each round writes to every policy's table.

- ``uniform``: upserts of existing orders, keys drawn from all keys (a CDC mirror of a table
  whose rows all change alike);
- ``skewed``: as many new orders as upserts, 90 % of the upserts on the 10 % most recently
  inserted keys (order and session tables);
- ``appends``: new orders only, and once an hour deletes of a tenth of a round's rows, keys
  drawn from all keys (an event table with erasure requests).

Upserts carry an equality delete for every key they write, new keys included, as Flink's and
Spark's upsert writers do; appends carry none.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.table import Table

from harness.cdc_orders import Orders, row_delta

WORKLOADS = ("uniform", "skewed", "appends")


@dataclass(frozen=True)
class Workload:
    """One workload's rounds: ``rows_per_round`` rows each, ``hour_rounds`` rounds an hour."""

    name: str
    rows_per_round: int
    hour_rounds: int

    def round(self, orders: Orders, number: int) -> tuple[pa.Table | None, pa.Table | None]:
        """Round ``number``'s rows to write and keys to delete (either may be None)."""
        if self.name == "uniform":
            return orders.upsert(self.rows_per_round), None
        if self.name == "skewed":
            half = self.rows_per_round // 2
            return orders.recent_upsert(new=self.rows_per_round - half, count=half), None
        deleted = orders.deleted_keys(self.rows_per_round // 10) if number % self.hour_rounds == 0 else None
        return orders.new(self.rows_per_round), deleted

    def write(self, table: Table, rows: pa.Table | None, deleted: pa.Table | None) -> int:
        """Commit one round to ``table``, as the workload's writer does; the bytes written."""
        if self.name == "appends":
            return row_delta(table, rows, deleted)
        assert rows is not None  # upsert workloads write rows every round
        return row_delta(table, rows, rows.select(["order_id"]))
