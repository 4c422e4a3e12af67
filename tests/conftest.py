"""Shared fixtures: one Spark session with Iceberg's Java runtime, and fresh pyiceberg SQL catalogs."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

# Imported for its effect before any Spark starts: the mount root of catalog Secrets.
import mounted_secrets  # noqa: F401
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from floe.local.reference_jars import reference_jars
from floe.local.reference_reader import ReferenceReader
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
