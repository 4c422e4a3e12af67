"""The table's write properties reach the files floe writes, read back the way other engines
read them: footers and pages through parquet-mr (the copy Iceberg Java ships), bloom filters
through Iceberg Java's row-group filter, column metrics from the committed manifests.

Each table gets 8 appends of 2,500 rows; a full optimizing rewrites them into one file.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DoubleType, LongType, NestedField, StringType
from pyspark.sql import SparkSession

from floe.api.table import OptimizedTableSpec
from floe.api.table_properties import InvalidTableProperty
from floe.cli import main
from floe.local.optimize import optimize_once
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingType
from floe.rewrite.parquet_options import ParquetOptions
from floe.tables.writer import conform

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "cat", StringType(), required=True),
    NestedField(3, "note", StringType(), required=False),
    NestedField(4, "val", DoubleType(), required=False),
)
CONFIG = OptimizingConfig(target_size=64 * 1024 * 1024)
APPENDS, ROWS = 8, 2_500
# Odd ids only: every even id is absent, for point lookups the bloom filter must skip.
IDS = range(1, 2 * APPENDS * ROWS, 2)


def _table(catalog: SqlCatalog, name: str, properties: Mapping[str, str]) -> Table:
    table = catalog.create_table(f"db.{name}", SCHEMA, properties={"format-version": "2", **properties})
    rng = random.Random(11)
    ids = list(IDS)
    for start in range(0, len(ids), ROWS):
        chunk = ids[start : start + ROWS]
        rows = pa.table(
            {
                "id": pa.array(chunk, pa.int64()),
                # 1,000 distinct values in no order: a dictionary (about 16 KiB) pays.
                "cat": [f"category-{rng.randrange(1000):04d}" for _ in chunk],
                "note": [f"{rng.getrandbits(96):024x}-a note longer than sixteen characters" for _ in chunk],
                "val": [rng.random() for _ in chunk],
            }
        )
        table.append(conform(table, rows))
    return table


def _optimized(table: Table, spark: SparkSession) -> str:
    """Fully optimize `table`; the path of the one file written."""
    result = optimize_once(table, table.name()[-1], CONFIG, spark=lambda: spark, forced=OptimizingType.FULL)
    assert result.commit is not None
    (written,) = [f.path for r in result.task_results for f in r.files]
    return written


@dataclass
class Page:
    rows: int
    compressed_bytes: int
    encoding: str


class JavaParquet:
    """One Parquet file opened by Iceberg's parquet-mr in Spark's JVM."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        self.jvm = jvm
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        # Iceberg's runtime carries parquet-mr relocated: its row-group filters take those classes.
        parquet = jvm.org.apache.iceberg.shaded.org.apache.parquet
        input_file = parquet.hadoop.util.HadoopInputFile.fromPath(hadoop_path, conf)
        self.reader = parquet.hadoop.ParquetFileReader.open(input_file)
        self.schema = self.reader.getFooter().getFileMetaData().getSchema()

    def close(self) -> None:
        self.reader.close()

    def data_pages(self, column: str) -> list[Page]:
        """Every data page of `column`, row group after row group."""
        descriptor = next(c for c in self.schema.getColumns() if list(c.getPath()) == [column])
        pages = []
        store = self.reader.readNextRowGroup()
        while store is not None:
            page_reader = store.getPageReader(descriptor)
            page = page_reader.readPage()
            while page is not None:
                encoding = str(page.getValueEncoding())  # pyarrow writes v1 data pages
                pages.append(Page(page.getValueCount(), page.getCompressedSize(), encoding))
                page = page_reader.readPage()
            store = self.reader.readNextRowGroup()
        return pages

    def row_groups_read(self, table: Table, column: str, value: int) -> int:
        """Row groups Iceberg Java's bloom filter says may hold ``column = value``."""
        iceberg = self.jvm.org.apache.iceberg
        schema = iceberg.SchemaParser.fromJson(table.schema().model_dump_json())
        expression = iceberg.expressions.Expressions.equal(column, self.jvm.java.lang.Long(value))
        row_filter = iceberg.parquet.ParquetBloomRowGroupFilter(schema, expression)
        read = 0
        for row_group in self.reader.getRowGroups():
            bloom = self.reader.getBloomFilterDataReader(row_group)
            read += bool(row_filter.shouldRead(self.schema, row_group, bloom))
        return read


def _metadata(path: str) -> pq.FileMetaData:
    return pq.ParquetFile(path.removeprefix("file://")).metadata


def test_without_write_properties_floe_writes_as_before(sql_catalog: SqlCatalog, spark: SparkSession) -> None:
    path = _optimized(_table(sql_catalog, "plain", {}), spark)
    metadata = _metadata(path)
    assert metadata.num_row_groups == 1
    assert metadata.row_group(0).column(0).compression == "ZSTD"
    java = JavaParquet(spark, path)
    try:
        assert java.row_groups_read(sql_catalog.load_table("db.plain"), "id", 4) == 1, "no bloom filter"
    finally:
        java.close()


def test_page_and_row_group_sizes_and_codec_are_the_tables(
    sql_catalog: SqlCatalog, spark: SparkSession
) -> None:
    properties = {
        "write.parquet.compression-codec": "gzip",
        "write.parquet.row-group-size-bytes": str(128 * 1024),
        "write.parquet.page-size-bytes": str(8 * 1024),
        "write.parquet.page-row-limit": "700",
    }
    path = _optimized(_table(sql_catalog, "sized", properties), spark)
    metadata = _metadata(path)
    assert metadata.num_rows == APPENDS * ROWS
    assert metadata.num_row_groups > 1
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    assert {g.column(c).compression for g in groups for c in range(g.num_columns)} == {"GZIP"}
    # The first row group is sized before any compression ratio is known, the others from it.
    sizes = [sum(g.column(c).total_compressed_size for c in range(g.num_columns)) for g in groups]
    assert all(size <= 1.25 * 128 * 1024 for size in sizes), sizes
    ids, notes = [], []
    for column, pages in (("id", ids), ("note", notes)):
        java = JavaParquet(spark, path)
        try:
            pages.extend(java.data_pages(column))
        finally:
            java.close()
    assert sum(p.rows for p in ids) == APPENDS * ROWS
    assert max(p.rows for p in ids) <= 700, "page-row-limit"
    # A page closes once a batch of rows passes the limit: at most one batch over it.
    assert len(notes) > len(groups) and max(p.compressed_bytes for p in notes) <= 3 * 8 * 1024


def test_the_dictionary_page_limit_is_the_tables(sql_catalog: SqlCatalog, spark: SparkSession) -> None:
    encodings = {}
    for name, properties in (("dict", {}), ("small_dict", {"write.parquet.dict-size-bytes": "4096"})):
        java = JavaParquet(spark, _optimized(_table(sql_catalog, name, properties), spark))
        try:
            encodings[name] = {page.encoding for page in java.data_pages("cat")}
        finally:
            java.close()
    # The 16 KiB dictionary fits pyarrow's default limit; past a 4 KiB one the writer falls
    # back from dictionary indices to plain values.
    assert encodings["dict"] == {"RLE_DICTIONARY"}
    assert "PLAIN" in encodings["small_dict"]


def test_the_compression_level_is_the_tables(sql_catalog: SqlCatalog, spark: SparkSession) -> None:
    sizes = {}
    for level in (1, 19):
        properties = {
            "write.parquet.compression-codec": "zstd",
            "write.parquet.compression-level": str(level),
        }
        path = _optimized(_table(sql_catalog, f"level{level}", properties), spark)
        sizes[level] = sum(
            _metadata(path).row_group(0).column(c).total_compressed_size for c in range(len(SCHEMA.fields))
        )
    assert sizes[19] < sizes[1], sizes


def test_bloom_filters_are_written_and_used_by_iceberg_java(
    sql_catalog: SqlCatalog, spark: SparkSession
) -> None:
    properties = {
        "write.parquet.bloom-filter-enabled.column.id": "true",
        "write.parquet.bloom-filter-fpp.column.id": "0.01",
        "write.parquet.row-group-size-bytes": str(256 * 1024),
    }
    table = _table(sql_catalog, "bloom", properties)
    path = _optimized(table, spark)
    groups = _metadata(path).num_row_groups
    assert groups > 1
    java = JavaParquet(spark, path)
    try:
        present = [java.row_groups_read(table, "id", i) for i in (1, 20_001, 39_999)]
        absent = [java.row_groups_read(table, "id", i) for i in range(2, 40_000, 4_000)]
    finally:
        java.close()
    # A present id is in one row group (the bloom filter keeps that one); an absent one in none,
    # though its value lies between the row groups' min and max.
    assert present == [1, 1, 1]
    assert absent == [0] * len(absent)


def test_column_metrics_follow_the_tables_metrics_modes(sql_catalog: SqlCatalog, spark: SparkSession) -> None:
    properties = {
        "write.metadata.metrics.default": "counts",
        "write.metadata.metrics.column.id": "full",
        "write.metadata.metrics.column.note": "truncate(4)",
        "write.metadata.metrics.column.val": "none",
    }
    table = _table(sql_catalog, "metrics", properties)
    _optimized(table, spark)
    table.refresh()
    (data_file,) = [task.file for task in table.scan().plan_files()]
    lower = data_file.lower_bounds or {}
    assert set(lower) == {1, 3}, "bounds of id (full) and note (truncated) only"
    assert len(lower[3]) == 4
    assert set(data_file.value_counts or {}) == {1, 2, 3}, "val (none) has no counts"


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        (
            {"write.parquet.page-size-bytes": "big"},
            "write.parquet.page-size-bytes='big': expected an integer",
        ),
        ({"write.parquet.row-group-size-bytes": "0"}, "expected at least 1"),
        (
            {"write.parquet.compression-codec": "lzo"},
            "write.parquet.compression-codec='lzo': expected one of",
        ),
        (
            {"write.parquet.bloom-filter-enabled.column.nope": "true"},
            "the table has no primitive column 'nope'",
        ),
        ({"write.parquet.bloom-filter-enabled.column.id": "yes"}, "expected true or false"),
        (
            {
                "write.parquet.bloom-filter-enabled.column.id": "true",
                "write.parquet.bloom-filter-fpp.column.id": "2",
            },
            "expected a number between 0 and 1",
        ),
        ({"write.metadata.metrics.default": "most"}, "write.metadata.metrics.*"),
    ],
)
def test_bad_write_properties_are_refused_with_the_property_named(
    properties: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidTableProperty, match=re.escape(message)):
        ParquetOptions.from_properties(properties, SCHEMA)


def test_a_bad_write_property_stops_floe_optimize_before_any_task(
    sql_catalog: SqlCatalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(sql_catalog, "bad", {})
    # Set after the appends: pyarrow, writing them for pyiceberg, would loop on a negative limit.
    with table.transaction() as transaction:
        transaction.set_properties({"write.parquet.page-row-limit": "-5"})
    snapshot = table.current_snapshot()
    config = tmp_path / "catalog.yaml"
    config.write_text(yaml.safe_dump({"name": sql_catalog.name, "type": "sql", **sql_catalog.properties}))
    assert main(["optimize", "--catalog-config", str(config), "db.bad", "--type", "full"]) == 2
    assert "write.parquet.page-row-limit='-5': expected at least 1" in capsys.readouterr().err
    assert sql_catalog.load_table("db.bad").current_snapshot() == snapshot


def _spec(**fields: str) -> OptimizedTableSpec:
    return OptimizedTableSpec.model_validate({"table": "db.t", "catalog": {"name": "c"}, **fields})


def test_the_target_file_size_is_the_manifests_else_the_tables() -> None:
    table_says = {"write.target-file-size-bytes": str(64 * 1024)}
    assert _spec().optimizing_config(table_says).target_size == 64 * 1024
    assert _spec(targetSize="1Mi").optimizing_config(table_says).target_size == 1024 * 1024
    assert _spec().optimizing_config({}).target_size == 128 * 1024 * 1024
    with pytest.raises(
        InvalidTableProperty, match=re.escape("write.target-file-size-bytes='-1': expected at least 1")
    ):
        _spec().optimizing_config({"write.target-file-size-bytes": "-1"})


def test_floe_optimize_writes_files_of_the_tables_target_size(
    sql_catalog: SqlCatalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = 128 * 1024
    table = _table(sql_catalog, "sized_files", {"write.target-file-size-bytes": str(target)})
    config = tmp_path / "catalog.yaml"
    config.write_text(yaml.safe_dump({"name": sql_catalog.name, "type": "sql", **sql_catalog.properties}))
    assert main(["optimize", "--catalog-config", str(config), "db.sized_files", "--type", "full"]) == 0
    table.refresh()
    sizes = [task.file.file_size_in_bytes for task in table.scan().plan_files()]
    # Files roll at 90 % of the target; the last one holds what is left.
    assert len(sizes) > 2 and all(size <= 1.1 * target for size in sizes), sizes
    assert sum(size >= 0.8 * target for size in sizes) >= len(sizes) - 1, sizes
