"""Encodings chosen per column: what is chosen for which data, and that every reader of
Iceberg tables reads floe's output: Iceberg Java's vectorized and row readers through Spark,
pyarrow and DuckDB, each giving back the rows the table held before."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
)
from pyspark.sql import SparkSession

from floe.local.optimize import optimize_once
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingType
from floe.rewrite.encodings import DICTIONARY, candidates, choose_encodings
from floe.tables.writer import conform

ROWS = 6_000


def test_each_column_gets_the_smallest_encoding_its_readers_all_read() -> None:
    rng = random.Random(5)
    rows = pa.table(
        {
            "seq": pa.array(range(ROWS), pa.int64()),  # ascending: deltas of 1
            "status": [rng.choice(("new", "paid", "shipped", "returned")) for _ in range(ROWS)],
            "token": [f"{rng.getrandbits(96):024x}" for _ in range(ROWS)],  # every value distinct
            "amount": [rng.random() for _ in range(ROWS)],
            "tags": [["a", "b"] if i % 2 else [] for i in range(ROWS)],
            "flag": [i % 3 == 0 for i in range(ROWS)],
        }
    )
    chosen = choose_encodings(rows, {"compression": "zstd"})
    assert chosen.encodings == {"seq": "DELTA_BINARY_PACKED", "token": "PLAIN", "amount": "PLAIN"}
    # Few distinct values keep the dictionary; a nested column and booleans keep pyarrow's default.
    assert chosen.dictionary == ("status", "tags.list.element", "flag")
    assert chosen.writer_options() == {
        "use_dictionary": ["status", "tags.list.element", "flag"],
        "column_encoding": chosen.encodings,
    }


def test_candidates_leave_out_what_iceberg_javas_vectorized_reader_refuses() -> None:
    assert candidates(pa.int32()) == (DICTIONARY, "PLAIN", "DELTA_BINARY_PACKED")
    assert candidates(pa.timestamp("us")) == (DICTIONARY, "PLAIN", "DELTA_BINARY_PACKED")
    assert candidates(pa.date32()) == (DICTIONARY, "PLAIN", "DELTA_BINARY_PACKED")
    # Byte-stream-split floats and delta byte arrays fail vectorized reads in Iceberg 1.10.
    assert candidates(pa.float64()) == (DICTIONARY, "PLAIN")
    assert candidates(pa.string()) == (DICTIONARY, "PLAIN")
    assert candidates(pa.decimal128(12, 2)) == ()
    assert candidates(pa.list_(pa.int64())) == ()


SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "day", DateType(), required=True),
    NestedField(3, "at", TimestampType(), required=False),
    NestedField(4, "status", StringType(), required=True),
    NestedField(5, "token", StringType(), required=False),
    NestedField(6, "amount", DoubleType(), required=False),
    NestedField(7, "price", DecimalType(12, 2), required=False),
    NestedField(8, "qty", IntegerType(), required=False),
    NestedField(9, "tags", ListType(10, StringType(), element_required=False), required=False),
    NestedField(
        11,
        "address",
        StructType(NestedField(12, "city", StringType(), required=False)),
        required=False,
    ),
)


def _rows(start: int, count: int, rng: random.Random) -> pa.Table:
    ids = range(start, start + count)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": [date(2024, 1, 1) + timedelta(days=i // 500) for i in ids],
            "at": [None if i % 17 == 0 else datetime(2024, 1, 1) + timedelta(seconds=7 * i) for i in ids],
            "status": [rng.choice(("new", "paid", "shipped")) for _ in ids],
            "token": [None if i % 11 == 0 else f"{rng.getrandbits(80):020x}" for i in ids],
            "amount": [None if i % 13 == 0 else rng.random() * 100 for i in ids],
            "price": [Decimal(rng.randrange(100_000)) / 100 for _ in ids],
            "qty": [rng.randrange(-50, 50) for _ in ids],
            "tags": [None if i % 7 == 0 else [f"t{i % 5}"] * (i % 3) for i in ids],
            "address": [{"city": rng.choice(("Oslo", "Lima", None))} for _ in ids],
        }
    )


COLUMNS = ("id", "day", "at", "status", "token", "amount", "price", "qty", "tags", "address.city")


def _spark_rows(spark: SparkSession, name: str, vectorized: bool) -> Counter[tuple[Any, ...]]:
    """The table's rows as Iceberg Java reads them, with its vectorized reader or its row reader."""
    spark.conf.set("spark.sql.iceberg.vectorization.enabled", str(vectorized).lower())
    try:
        return _counted(spark.sql(f"SELECT {', '.join(COLUMNS)} FROM {name}").collect())
    finally:
        spark.conf.unset("spark.sql.iceberg.vectorization.enabled")


def test_floes_output_is_read_alike_by_iceberg_java_pyarrow_and_duckdb(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table = sql_catalog.create_table("db.t", SCHEMA, properties={"format-version": "2"})
    rng = random.Random(3)
    for start in range(0, 4 * ROWS, ROWS):
        table.append(conform(table, _rows(start, ROWS, rng)))
    name = qualified_name(sql_catalog.name, "db.t")
    before = _spark_rows(spark, name, vectorized=True)

    config = OptimizingConfig(target_size=64 * 1024 * 1024)
    result = optimize_once(table, "db.t", config, spark=lambda: spark, forced=OptimizingType.FULL)
    assert result.commit is not None
    (written,) = [Path(f.path.removeprefix("file://")) for r in result.task_results for f in r.files]
    footer = pq.ParquetFile(written).metadata.row_group(0)
    encodings = {
        footer.column(i).path_in_schema: set(footer.column(i).encodings) for i in range(footer.num_columns)
    }
    # The test reads what it means to: delta-encoded integers and plain strings among dictionaries.
    assert "DELTA_BINARY_PACKED" in encodings["id"] and "DELTA_BINARY_PACKED" in encodings["at"]
    assert "RLE_DICTIONARY" not in encodings["token"] and "RLE_DICTIONARY" in encodings["status"]

    assert _spark_rows(spark, name, vectorized=True) == before
    assert _spark_rows(spark, name, vectorized=False) == before
    arrow = pq.read_table(written).to_pylist()
    assert _counted((*(row[c] for c in COLUMNS[:-1]), _city(row)) for row in arrow) == before
    # Quoted: "at" is a keyword to DuckDB.
    selected = ", ".join('"' + '"."'.join(column.split(".")) + '"' for column in COLUMNS)
    with duckdb.connect() as duck:
        duck_rows = duck.execute(f"SELECT {selected} FROM read_parquet(?)", [str(written)]).fetchall()
    assert _counted(duck_rows) == before


def _city(row: dict[str, Any]) -> Any:
    return row["address"]["city"] if row["address"] is not None else None


def _counted(rows: Iterable[Sequence[Any]]) -> Counter[tuple[Any, ...]]:
    """Rows as hashable tuples (lists become tuples), counted."""
    return Counter(tuple(tuple(v) if isinstance(v, list) else v for v in row) for row in rows)
