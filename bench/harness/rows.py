"""Deterministic rows of the events table (`harness.events`), made with pyarrow compute (no numpy)."""

from __future__ import annotations

import io
import random
import string
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.events import epoch_micros

DAYS = 8
FIRST_DAY = datetime(2024, 6, 1)
"""`EventGenerator` spreads its rows over `DAYS` days from `FIRST_DAY`."""


class EventGenerator:
    """Deterministic clickstream rows made with pyarrow compute (no numpy), spread over `DAYS` days."""

    EVENT_TYPES = ("view", "click", "scroll", "search", "add_to_cart", "remove_from_cart", "checkout")
    EVENT_TYPES_RARE = ("purchase", "login", "logout", "share", "review")
    DEVICES = ("mobile", "desktop", "tablet", "tv")
    SECTIONS = ("product", "category", "search", "account", "cart", "blog", "help")

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self._seed = seed
        self._sessions = pa.array([f"{rng.getrandbits(64):016x}" for _ in range(200_000)])
        self._event_types = pa.array([*self.EVENT_TYPES, *self.EVENT_TYPES_RARE])
        self._countries = pa.array(
            sorted({"".join(rng.choices(string.ascii_uppercase, k=2)) for _ in range(80)})
        )
        self._urls = pa.array(
            [f"/{rng.choice(self.SECTIONS)}/{rng.randrange(1_000_000)}" for _ in range(20_000)]
        )
        words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randrange(4, 10))) for _ in range(500)]
        self._referrers = pa.array([f"{w}.{rng.choice(('com', 'net', 'org', 'io'))}" for w in words])
        self._devices = pa.array(self.DEVICES)

    def batch(self, index: int, first_id: int, rows: int) -> pa.Table:
        """Rows ``first_id .. first_id + rows - 1``, spread uniformly over the table's days."""

        def uniform(column: int) -> pa.Array:
            return pc.random(rows, initializer=(self._seed * 1_000_003 + index) * 101 + column)

        def pick(pool: pa.Array, column: int, skew: float) -> pa.Array:
            position = pc.floor(pc.multiply(pc.power(uniform(column), skew), len(pool)))
            return pool.take(pc.cast(position, pa.int32()))

        def with_nulls(values: pa.Array, fraction: float, column: int) -> pa.Array:
            return pc.if_else(pc.less(uniform(column), fraction), pa.scalar(None, values.type), values)

        event_id = pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), rows), start=first_id - 1)
        offset_us = pc.floor(pc.multiply(uniform(1), DAYS * 86_400 * 1_000_000))
        ts = pc.cast(pc.add(pc.cast(offset_us, pa.int64()), epoch_micros(FIRST_DAY)), pa.int64()).cast(
            pa.timestamp("us")
        )
        user_id = pc.cast(pc.floor(pc.multiply(pc.power(uniform(2), 3), 5_000_000)), pa.int64())
        cents = pc.cast(pc.add(pc.floor(pc.multiply(pc.power(uniform(9), 2), 50_000)), 99), pa.int64())
        price = pc.divide(cents.cast(pa.decimal128(19, 0)), pa.scalar(100, pa.decimal128(3, 0)))
        quantity = pc.cast(pc.add(pc.floor(pc.multiply(pc.power(uniform(11), 2), 10)), 1), pa.int32())
        latency = pc.round(pc.multiply(pc.negate(pc.ln(pc.subtract(1.0, uniform(12)))), 80.0), 1)
        return pa.table(
            {
                "event_id": event_id,
                "ts": ts,
                "user_id": with_nulls(user_id, 0.03, 102),
                "session_id": pick(self._sessions, 3, 1.0),
                "event_type": pick(self._event_types, 4, 2.0),
                "country": pick(self._countries, 5, 2.0),
                "url": pick(self._urls, 6, 1.5),
                "referrer": with_nulls(pick(self._referrers, 7, 1.5), 0.35, 107),
                "device": pick(self._devices, 8, 1.5),
                "price": with_nulls(price.cast(pa.decimal128(12, 2)), 0.1, 109),
                "quantity": quantity,
                "latency_ms": latency,
                "is_mobile": pc.less(uniform(13), 0.55),
            }
        )

    def rows_per_file(self, file_bytes: int) -> int:
        """Rows that make a zstd Parquet file of about ``file_bytes``, measured on generated rows."""
        rows = 10_000
        for _ in range(2):
            sink = io.BytesIO()
            pq.write_table(self.batch(-1, 0, rows), sink, compression="zstd")
            rows = max(100, round(file_bytes / (sink.tell() / rows)))
        return rows
