"""The writers: each commits one operation to one table, the way its engine does.

- Spark 3.5 + Iceberg 1.10: ``INSERT``, and merge-on-read ``DELETE`` / ``UPDATE`` / ``MERGE``
  (position deletes on v2, deletion vectors on v3);
- pyiceberg: appends (v2 only: pyiceberg 0.12 does not write v3);
- Iceberg Java's ``RowDelta`` through py4j: CDC upserts as equality deletes plus inserts in one
  commit, the files written with pyarrow and described with Java's own metrics, committed the way
  Flink's ``IcebergFilesCommitter`` commits an equality-delete-only row delta;
- floe's ``commit_row_delta`` (pyiceberg side): the same upserts;
- Flink's Iceberg sink in upsert mode, when a Flink helper runs (``flink``).

A commit that loses to a concurrent one raises ``Conflict``; the driver then learns from the
table's history whether it landed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from floe.commit.row_delta import commit_row_delta
from floe.local.reference_reader import qualified_name
from floe.tables.writer import write_data_files, write_equality_deletes_by_partition

from .rows import COLUMNS, Delete, Insert, Merge, Op, Row, Update, Upsert

# Messages of a commit that lost to a concurrent one (Iceberg's validation or optimistic retry
# running out); anything else a writer raises is a failure of the soak.
CONFLICT_MARKERS = (
    "CommitFailedException",
    "ValidationException",
    "Cannot commit",
    "Found conflicting",
    "Requirement failed",
    "branch main has changed",
)
KEY_FIELD_ID = 1


class Conflict(Exception):
    """The operation's commit lost to a concurrent commit."""


def error_line(exc: BaseException) -> str:
    """The line of ``exc`` that says what went wrong (py4j's "An error occurred while calling"
    skipped: the Java exception follows it)."""
    for line in str(exc).splitlines():
        line = line.strip().removeprefix(": ").strip()
        if line and not line.startswith(("An error occurred while calling", "at ")):
            return line[:400]
    return type(exc).__name__


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` says a commit lost to a concurrent one."""
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in CONFLICT_MARKERS)


@dataclass(frozen=True)
class SoakTable:
    """One table of a seed."""

    catalog: str
    namespace: str
    name: str
    version: int
    partitioned: bool

    @property
    def identifier(self) -> str:
        """``namespace.name``."""
        return f"{self.namespace}.{self.name}"

    @property
    def spark_name(self) -> str:
        """The backquoted Spark name."""
        return qualified_name(self.catalog, self.identifier)

    def create_sql(self) -> str:
        """Spark's CREATE TABLE: merge-on-read for DELETE, UPDATE and MERGE."""
        partitioning = " PARTITIONED BY (cat)" if self.partitioned else ""
        properties = {
            "format-version": str(self.version),
            "write.delete.mode": "merge-on-read",
            "write.update.mode": "merge-on-read",
            "write.merge.mode": "merge-on-read",
            "write.distribution-mode": "none",
        }
        listed = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
        return (
            f"CREATE TABLE {self.spark_name} ({COLUMNS}) USING iceberg{partitioning} TBLPROPERTIES ({listed})"
        )


class FlinkUpserts(Protocol):
    """A running Flink helper that upserts rows through Flink's Iceberg sink."""

    def upsert(self, table: SoakTable, rows: Sequence[Row]) -> None:
        """Upsert ``rows`` into ``table`` with one bounded Flink job (one commit)."""


class Writers:
    """Commits operations with the writer each names."""

    def __init__(self, spark: SparkSession, catalog: Catalog, flink: FlinkUpserts | None = None) -> None:
        """Write through ``spark`` (and its JVM) and the pyiceberg ``catalog`` (the same one)."""
        self.spark = spark
        self.catalog = catalog
        self.flink = flink
        self._by_writer: dict[str, Callable[[SoakTable, Any], None]] = {
            "spark-insert": self._spark_insert,
            "pyiceberg-append": self._pyiceberg_append,
            "spark-delete": self._spark_delete,
            "spark-update": self._spark_update,
            "spark-merge": self._spark_merge,
            "java-row-delta": self._java_row_delta,
            "floe-row-delta": self._floe_row_delta,
            "flink-upsert": self._flink_upsert,
        }

    def names(self, version: int) -> list[str]:
        """The writers that can write a table of ``version``."""
        names = list(self._by_writer)
        if version >= 3:
            names.remove("pyiceberg-append")
        if self.flink is None:
            names.remove("flink-upsert")
        return names

    def commit(self, table: SoakTable, op: Op) -> None:
        """Commit ``op``; raises ``Conflict`` when it lost to a concurrent commit."""
        try:
            self._by_writer[op.writer](table, op)
        except Exception as exc:
            if is_conflict(exc):
                raise Conflict(error_line(exc)) from exc
            raise

    # Spark SQL ---------------------------------------------------------------------------------

    def _spark_insert(self, table: SoakTable, op: Insert) -> None:
        self.spark.sql(f"INSERT INTO {table.spark_name} VALUES {_values(op.rows)}")

    def _spark_delete(self, table: SoakTable, op: Delete) -> None:
        self.spark.sql(f"DELETE FROM {table.spark_name} WHERE id IN ({_keys(op.keys)})")

    def _spark_update(self, table: SoakTable, op: Update) -> None:
        assignments = f"v = v + {op.delta}, note = '{op.note}'"
        self.spark.sql(f"UPDATE {table.spark_name} SET {assignments} WHERE id IN ({_keys(op.keys)})")

    def _spark_merge(self, table: SoakTable, op: Merge) -> None:
        source = (
            "SELECT CAST(col1 AS BIGINT) AS id, col2 AS cat, CAST(col3 AS BIGINT) AS v, col4 AS ts, "
            f"col5 AS note FROM VALUES {_values(op.source)}"
        )
        self.spark.sql(
            f"MERGE INTO {table.spark_name} t USING ({source}) s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET v = s.v, note = s.note WHEN NOT MATCHED THEN INSERT *"
        )

    # pyiceberg and floe ----------------------------------------------------------------------

    def _pyiceberg_append(self, table: SoakTable, op: Insert) -> None:
        iceberg = self.catalog.load_table(table.identifier)
        iceberg.append(_arrow(iceberg, op.rows, include_field_ids=False))

    def _floe_row_delta(self, table: SoakTable, op: Upsert) -> None:
        iceberg = self.catalog.load_table(table.identifier)
        rows = _arrow(iceberg, op.rows, include_field_ids=False)
        data_files = write_data_files(iceberg, rows)
        deletes = write_equality_deletes_by_partition(iceberg, rows.select(["id", "cat"]), ["id"])
        commit_row_delta(iceberg, data_files=data_files, delete_files=deletes)

    # Iceberg Java through py4j ---------------------------------------------------------------

    def _java_row_delta(self, table: SoakTable, op: Upsert) -> None:
        iceberg = self.catalog.load_table(table.identifier)
        java = _JavaTable(self.spark, f"{table.catalog}.{table.identifier}")
        row_delta = java.table.newRowDelta()
        arrow = _arrow(iceberg, op.rows, include_field_ids=True)
        key_schema = pa.schema([arrow.schema.field("id")])
        for cat in sorted({row[1] for row in op.rows}) if table.partitioned else [None]:
            part = arrow if cat is None else arrow.filter(pc.equal(arrow["cat"], cat))
            partition_path = None if cat is None else f"cat={cat}"
            data_path = _write_parquet(iceberg, partition_path, part, "java-data")
            deletes_path = _write_parquet(
                iceberg, partition_path, part.select(["id"]).cast(key_schema), "java-eq-deletes"
            )
            row_delta.addRows(java.data_file(data_path, partition_path))
            row_delta.addDeletes(java.equality_deletes(deletes_path, partition_path))
        # As Flink's IcebergFilesCommitter commits a row delta of equality deletes: no conflict
        # validation, since an equality delete applies by sequence number alone.
        row_delta.commit()

    def _flink_upsert(self, table: SoakTable, op: Upsert) -> None:
        if self.flink is None:
            raise RuntimeError("no Flink helper runs")
        self.flink.upsert(table, op.rows)


class _JavaTable:
    """An Iceberg Java table, loaded through Spark's catalog, and its file descriptions."""

    def __init__(self, spark: SparkSession, name: str) -> None:
        jvm: Any = spark._jvm
        self.jvm = jvm
        self.table: Any = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)
        gateway: Any = spark.sparkContext._gateway
        self._key_ids = gateway.new_array(gateway.jvm.int, 1)
        self._key_ids[0] = KEY_FIELD_ID

    def data_file(self, path: str, partition_path: str | None) -> Any:
        """A Java DataFile for the Parquet data file at ``path``."""
        return self._described(
            self.jvm.org.apache.iceberg.DataFiles.builder(self.table.spec()), path, partition_path
        )

    def equality_deletes(self, path: str, partition_path: str | None) -> Any:
        """A Java DeleteFile for the Parquet equality-delete file (on the key) at ``path``."""
        builder = self.jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(self.table.spec())
        return self._described(builder.ofEqualityDeletes(self._key_ids), path, partition_path)

    def _described(self, builder: Any, path: str, partition_path: str | None) -> Any:
        """``builder`` given the file's path, size and the metrics Java reads from its footer."""
        iceberg = self.jvm.org.apache.iceberg
        metrics = iceberg.parquet.ParquetUtil.fileMetrics(
            self.table.io().newInputFile(path), iceberg.MetricsConfig.forTable(self.table)
        )
        builder = builder.withPath(path).withFormat(iceberg.FileFormat.PARQUET)
        builder = builder.withFileSizeInBytes(Path(urlparse(path).path).stat().st_size).withMetrics(metrics)
        if partition_path is not None:
            builder = builder.withPartitionPath(partition_path)
        return builder.build()


def _values(rows: Sequence[Row]) -> str:
    return ", ".join(
        f"({key}, '{cat}', {value}, TIMESTAMP '{ts.strftime('%Y-%m-%d %H:%M:%S')}', '{note}')"
        for key, cat, value, ts, note in rows
    )


def _keys(keys: frozenset[int]) -> str:
    return ", ".join(str(key) for key in sorted(keys))


def _arrow(table: Table, rows: Sequence[Row], include_field_ids: bool) -> pa.Table:
    schema = schema_to_pyarrow(table.schema(), include_field_ids=include_field_ids)
    return pa.Table.from_pylist([dict(zip(schema.names, row, strict=True)) for row in rows], schema=schema)


def _write_parquet(table: Table, partition_path: str | None, rows: pa.Table, prefix: str) -> str:
    """Write ``rows`` under the table's data directory; returns the file's URI."""
    root = f"{table.metadata.location.rstrip('/')}/data"
    directory = root if partition_path is None else f"{root}/{partition_path}"
    uri = f"{directory}/{prefix}-{uuid.uuid4()}.parquet"
    local = Path(urlparse(uri).path)
    local.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, local)
    return uri
