"""Shared fixtures: one Spark session with Iceberg's Java runtime, fresh pyiceberg SQL catalogs, a
format v3 table with deletion vectors written by Spark, and that table made one floe refuses."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

# Imported for its effect before any Spark starts: the mount root of catalog Secrets.
import mounted_secrets  # noqa: F401
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession
from refused_tables import commit_metadata, unknown_sort_order

from floe.local.reference_jars import reference_jars
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe_optimizer.spark_session import get_spark

_catalog_numbers = itertools.count()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The test run's SparkSession, with the Iceberg Spark runtime and SQLite JDBC driver."""
    session = get_spark(extra_jars=reference_jars())
    yield session
    session.stop()


@pytest.fixture(scope="session")
def reference(spark: SparkSession) -> ReferenceReader:
    """The reference reader (Iceberg Java through Spark) over the test run's session."""
    return ReferenceReader(spark)


@pytest.fixture
def sql_catalog(tmp_path: Path, reference: ReferenceReader) -> Iterator[SqlCatalog]:
    """A fresh pyiceberg SQLite catalog with namespace ``db``, also registered in ``reference``.

    Each test gets a new catalog name because Spark keeps a loaded catalog for the whole session.
    """
    name = f"cat_{next(_catalog_numbers)}"
    database = tmp_path / "catalog.db"
    warehouse = (tmp_path / "warehouse").as_uri()
    catalog = SqlCatalog(name, uri=f"sqlite:///{database}", warehouse=warehouse)
    catalog.create_namespace("db")
    reference.register_sql_catalog(name, database, warehouse)
    yield catalog
    catalog.engine.dispose()


V3_MOR = (
    "'format-version' = '3', 'write.delete.mode' = 'merge-on-read', "
    "'write.update.mode' = 'merge-on-read', 'write.merge.mode' = 'merge-on-read'"
)


JAN_1 = 1_704_067_200
"""2024-01-01T00:00:00Z, in seconds since the epoch."""


def timestamped_spark_table(spark: SparkSession, catalog: SqlCatalog, properties: str) -> str:
    """Create ``db.t`` with Spark (`properties` its TBLPROPERTIES) and return its Spark name: rows
    0-399 in four inserts, two files each (partitioned by ``cat`` = id % 2), row ``id``'s ``ts``
    `JAN_1` plus ``id`` hours."""
    name = qualified_name(catalog.name, "db.t")
    spark.sql(
        f"CREATE TABLE {name} (id bigint, cat string, ts timestamp) USING iceberg "
        f"PARTITIONED BY (cat) TBLPROPERTIES ({properties})"
    )
    for start in range(0, 400, 100):
        spark.sql(
            f"INSERT INTO {name} SELECT id, CAST(id % 2 AS string), timestamp_seconds({JAN_1} + id * 3600) "
            f"FROM range({start}, {start + 100})"
        )
    return name


@pytest.fixture
def v3_table(sql_catalog: SqlCatalog, spark: SparkSession, reference: ReferenceReader) -> SqlCatalog:
    """``db.t``: a partitioned v3 table with four appends, then a DELETE, an UPDATE and a MERGE
    (updates and inserts) that write deletion vectors."""
    name = qualified_name(sql_catalog.name, "db.t")
    spark.sql(
        f"CREATE TABLE {name} (id bigint, cat string, v double) USING iceberg "
        f"PARTITIONED BY (cat) TBLPROPERTIES ({V3_MOR})"
    )
    for start in range(0, 400, 100):
        rows = f"range({start}, {start + 100})"
        spark.sql(f"INSERT INTO {name} SELECT id, CAST(id % 2 AS string), id * 1.0 FROM {rows}")
    spark.sql(f"DELETE FROM {name} WHERE id % 7 = 0")
    spark.sql(f"UPDATE {name} SET v = -1 WHERE id % 11 = 0")
    spark.sql(
        f"MERGE INTO {name} t USING (SELECT id, CAST(id % 2 AS string) AS cat, -2.0 AS v "
        f"FROM range(0, 400, 13)) s ON t.id = s.id "
        f"WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    )
    return sql_catalog


@pytest.fixture
def refused_table(v3_table: SqlCatalog) -> SqlCatalog:
    """The v3 table Spark wrote (deletion vectors and all), its sort order then given a transform
    floe does not know, the way another engine would commit it."""
    commit_metadata(v3_table, "t", unknown_sort_order)
    return v3_table
