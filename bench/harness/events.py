"""The events table the rewrite and planning benchmarks use: its schema, partitioning and properties.

A clickstream-like table of 13 columns (ids, a timestamp, strings of low and high
cardinality, a decimal, an int, a double, a flag, most nullable), partitioned by day.
Its rows are generated in `harness.rows`, apart, so that the planning benchmark, which
never writes a row, does not import pyarrow before its timed catalog load.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
)

NAMESPACE = "bench"

EVENTS_SCHEMA = Schema(
    NestedField(1, "event_id", LongType(), required=True),
    NestedField(2, "ts", TimestampType(), required=True),
    NestedField(3, "user_id", LongType(), required=False),
    NestedField(4, "session_id", StringType(), required=False),
    NestedField(5, "event_type", StringType(), required=False),
    NestedField(6, "country", StringType(), required=False),
    NestedField(7, "url", StringType(), required=False),
    NestedField(8, "referrer", StringType(), required=False),
    NestedField(9, "device", StringType(), required=False),
    NestedField(10, "price", DecimalType(12, 2), required=False),
    NestedField(11, "quantity", IntegerType(), required=False),
    NestedField(12, "latency_ms", DoubleType(), required=False),
    NestedField(13, "is_mobile", BooleanType(), required=False),
)
"""A clickstream-like table: ids, a timestamp, low- and high-cardinality strings, a decimal,
numbers and a flag, most of them nullable."""

EVENTS_SPEC = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day")
)
"""Partitioned by day of ``ts``."""

TABLE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.compression-codec": "zstd",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}
"""Format v2, zstd Parquet (floe, pyiceberg and Iceberg Java all honour it) and merge-on-read
row-level operations, so Spark's ``DELETE`` writes position deletes."""


def epoch_micros(moment: datetime) -> int:
    """Microseconds since the epoch of a naive (UTC) datetime, as Iceberg stores timestamps."""
    return (moment - datetime(1970, 1, 1)) // timedelta(microseconds=1)
