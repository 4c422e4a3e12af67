"""Read Iceberg tables with Iceberg's own Java implementation (through Spark) as a reference.

floe reads and rewrites tables with pyiceberg; tests check the result against what the
Java library, the reference implementation of the spec, reads from the same catalog.
Both sides share one SQLite database: pyiceberg's ``SqlCatalog`` and Java's ``JdbcCatalog``
use the same ``iceberg_tables`` / ``iceberg_namespace_properties`` layout, and both filter
rows by catalog name, so the Spark catalog must carry the pyiceberg catalog's name.

It also reads through an Iceberg REST catalog whose tables are on an S3-protocol object
store: ``rest_catalog_properties`` turns a pyiceberg client's REST catalog properties
(``uri``, ``s3.*``) into the Java ones (``RESTCatalog`` with ``S3FileIO``), and
``ReferenceReader.register_catalog`` / ``ReferenceReader.for_catalog`` take pyiceberg-style
properties of either kind of catalog.

Rows come back as a multiset (``Counter``) of tuples in schema order, with values
normalized so that they compare equal to the same data read through pyarrow
(see ``arrow_rows``).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.errors import AnalysisException, IllegalArgumentException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    StructType,
    TimestampType,
)

from floe.local.reference_jars import reference_jars
from floe_optimizer.spark_session import get_spark

SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
S3_FILE_IO_CLASS = "org.apache.iceberg.aws.s3.S3FileIO"
_SQLITE_URI_PREFIX = "sqlite:///"
# Properties a pyiceberg REST client and Iceberg Java's RESTCatalog / S3FileIO spell alike.
_REST_PASSTHROUGH = (
    "warehouse",
    "prefix",
    "credential",
    "token",
    "scope",
    "oauth2-server-uri",
    "s3.endpoint",
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
)
_CATALOG_TABLES = ("iceberg_tables", "iceberg_namespace_properties")

Rows = Counter[tuple[Any, ...]]


class ReferenceTableNotFound(LookupError):
    """The reference reader was asked for a table its catalog does not have."""


class ReferenceSnapshotNotFound(LookupError):
    """The reference reader was asked to time-travel to a snapshot the table does not have."""


def jdbc_catalog_properties(sqlite_path: Path, warehouse: str) -> dict[str, str]:
    """Return the Iceberg catalog properties that open pyiceberg's SQLite catalog with ``JdbcCatalog``.

    ``jdbc.init-catalog-tables=false``: when JdbcCatalog creates its tables "if missing" it
    leaves the ``getTables`` metadata query of that check open, and the open statement holds
    SQLite's shared lock for as long as the catalog lives, so every later pyiceberg commit
    fails with "database is locked" (WAL mode is no cure: the Java connection then stays in
    its old read snapshot and neither sees pyiceberg's commits nor can commit itself).
    pyiceberg's ``SqlCatalog`` creates the tables instead, so it must be opened first.
    ``jdbc.schema-version=V1``: pyiceberg (0.12) creates the V1 layout (with the
    ``iceberg_type`` column), which JdbcCatalog would detect anyway; on a V0 database made by
    an older pyiceberg it adds the column, and pyiceberg rows with a NULL type still count as tables.
    ``cache-enabled=false``: Spark's ``CachingCatalog`` would keep serving a table's old
    metadata after pyiceberg commits to it, and a reference reader must see every commit.
    """
    return {
        "type": "jdbc",
        "uri": f"jdbc:sqlite:{Path(sqlite_path).resolve()}",
        "warehouse": warehouse,
        "jdbc.init-catalog-tables": "false",
        "jdbc.schema-version": "V1",
        "cache-enabled": "false",
    }


def rest_catalog_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Return the Iceberg Java properties of the REST catalog a pyiceberg client opens with ``properties``.

    ``properties`` are a pyiceberg REST client's (``uri``, optional ``warehouse``, OAuth2
    ``credential``/``token``, and ``s3.endpoint``, ``s3.access-key-id``,
    ``s3.secret-access-key``, ``s3.region``). Files are read with ``S3FileIO``: path-style
    addressing unless ``s3.force-virtual-addressing`` is true (pyarrow's rule) or
    ``s3.path-style-access`` says otherwise, and ``client.region`` from ``s3.region``
    (or ``client.region``). ``cache-enabled=false`` so every read sees the latest commit.
    """
    uri = properties.get("uri")
    if not uri:
        raise ValueError("a REST catalog needs a 'uri' property")
    java = {"type": "rest", "uri": uri, "io-impl": S3_FILE_IO_CLASS, "cache-enabled": "false"}
    java.update({key: str(properties[key]) for key in _REST_PASSTHROUGH if key in properties})
    virtual = str(properties.get("s3.force-virtual-addressing", "false")).lower() == "true"
    java["s3.path-style-access"] = str(properties.get("s3.path-style-access", str(not virtual).lower()))
    region = properties.get("s3.region") or properties.get("client.region")
    if region:
        java["client.region"] = str(region)
    return java


def java_catalog_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Return Iceberg Java catalog properties for a catalog that pyiceberg opens with ``properties``.

    ``type: rest`` gives ``rest_catalog_properties``; ``type: sql`` with a
    ``sqlite:///path`` ``uri`` and a ``warehouse`` gives ``jdbc_catalog_properties``;
    ``type: hive`` gives Iceberg's Hive catalog on the same metastore ``uri`` and
    ``warehouse``. Other catalogs are not supported.
    """
    kind = properties.get("type")
    if kind == "rest":
        return rest_catalog_properties(properties)
    if kind == "hive":
        hive = {"type": "hive", "uri": properties["uri"], "cache-enabled": "false"}
        return hive | ({"warehouse": properties["warehouse"]} if "warehouse" in properties else {})
    if kind == "sql":
        uri = properties.get("uri", "")
        if not uri.startswith(_SQLITE_URI_PREFIX) or "warehouse" not in properties:
            raise ValueError(f"only SQLite sql catalogs with a warehouse are supported, got uri {uri!r}")
        return jdbc_catalog_properties(Path(uri.removeprefix(_SQLITE_URI_PREFIX)), properties["warehouse"])
    raise ValueError(f"the reference reader supports catalogs of type 'rest', 'sql' and 'hive', not {kind!r}")


def _require_catalog_tables(sqlite_path: Path) -> None:
    if not Path(sqlite_path).is_file():
        raise FileNotFoundError(
            f"no SQLite catalog at {sqlite_path}; open the pyiceberg SqlCatalog first, it creates the tables"
        )
    with closing(sqlite3.connect(f"{Path(sqlite_path).resolve().as_uri()}?mode=ro", uri=True)) as conn:
        found = {
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)", _CATALOG_TABLES
            )
        }
    missing = sorted(set(_CATALOG_TABLES) - found)
    if missing:
        raise ValueError(
            f"SQLite database {sqlite_path} lacks the catalog table(s) {', '.join(missing)}; "
            "open the pyiceberg SqlCatalog on it first, it creates them"
        )


class ReferenceReader:
    """Reads Iceberg tables through a SparkSession that has the Iceberg Spark runtime on its classpath."""

    def __init__(self, spark: SparkSession) -> None:
        """Wrap ``spark``; it must have been started with the Iceberg Spark runtime jar."""
        self.spark = spark
        self._catalogs: dict[str, dict[str, str]] = {}

    @classmethod
    def start(cls, master: str = "local[2]") -> ReferenceReader:
        """Return a reader on floe's SparkSession, fetching the reference jars if needed."""
        return cls(get_spark(master=master, extra_jars=reference_jars()))

    @classmethod
    def for_catalog(
        cls, name: str, properties: Mapping[str, str], master: str = "local[2]"
    ) -> ReferenceReader:
        """Return a started reader (see ``start``) with the pyiceberg catalog ``name`` registered.

        ``properties`` are the pyiceberg catalog's (see ``register_catalog``).
        """
        reader = cls.start(master=master)
        reader.register_catalog(name, properties)
        return reader

    def register_catalog(self, name: str, properties: Mapping[str, str]) -> None:
        """Make pyiceberg's catalog ``name`` with ``properties`` readable as Spark catalog ``name``.

        ``properties`` are pyiceberg-style catalog properties of a ``rest`` catalog (on an
        S3-protocol store; see ``rest_catalog_properties``) or an SQLite ``sql`` catalog
        (see ``register_sql_catalog``, whose rules apply). A name is registered for the
        session's life, as with ``register_sql_catalog``.
        """
        java = java_catalog_properties(properties)
        if properties.get("type") == "sql":
            sqlite_path = Path(properties["uri"].removeprefix(_SQLITE_URI_PREFIX))
            self._register(name, java, lambda: _require_catalog_tables(sqlite_path))
        else:
            self._register(name, java)

    def register_sql_catalog(self, name: str, sqlite_path: Path, warehouse: str) -> None:
        """Make the pyiceberg ``SqlCatalog`` at ``sqlite_path`` readable as Spark catalog ``name``.

        ``name`` must be the pyiceberg catalog's name, and the ``SqlCatalog`` must already have
        created its tables in the database. Spark reads catalog settings when a catalog is
        first used, so this works on a running session; but it keeps the loaded catalog for
        the session's life, so a name cannot be pointed at another database later.
        """
        properties = jdbc_catalog_properties(sqlite_path, warehouse)
        self._register(name, properties, lambda: _require_catalog_tables(sqlite_path))

    def _register(
        self, name: str, properties: dict[str, str], check: Callable[[], None] | None = None
    ) -> None:
        if not name.isidentifier():
            raise ValueError(f"catalog name must be a plain identifier, got {name!r}")
        registered = self._catalogs.get(name)
        if registered is not None:
            if registered != properties:
                raise ValueError(
                    f"catalog {name!r} is already registered with {registered}; Spark keeps a loaded "
                    "catalog for the whole session, so use a new name for another catalog"
                )
            return
        if check is not None:
            check()
        prefix = f"spark.sql.catalog.{name}"
        self.spark.conf.set(prefix, SPARK_CATALOG_CLASS)
        for key, value in properties.items():
            self.spark.conf.set(f"{prefix}.{key}", value)
        self._catalogs[name] = properties

    def rows(self, catalog: str, table: str, snapshot_id: int | None = None) -> Rows:
        """Return the multiset of rows of ``catalog``.``table`` (``"ns.table"``), in schema order.

        With ``snapshot_id`` the table is read as of that snapshot (``VERSION AS OF``).
        Raises ``ReferenceTableNotFound`` if the table does not exist and
        ``ReferenceSnapshotNotFound`` if it has no such snapshot.
        """
        with self._reading(catalog, table, snapshot_id) as frame:
            return Counter(normalize_row(row, frame.schema) for row in frame.collect())

    def count(self, catalog: str, table: str, snapshot_id: int | None = None) -> int:
        """Return the number of live rows of ``catalog``.``table``, optionally as of ``snapshot_id``."""
        with self._reading(catalog, table, snapshot_id) as frame:
            return int(frame.count())

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        """Run ``query`` with Spark and return its rows as normalized tuples (empty for DDL/DML)."""
        frame = self.spark.sql(query)
        return [normalize_row(row, frame.schema) for row in frame.collect()]

    @contextmanager
    def _reading(self, catalog: str, table: str, snapshot_id: int | None) -> Iterator[DataFrame]:
        if catalog not in self._catalogs and self._conf(f"spark.sql.catalog.{catalog}") is None:
            raise ValueError(f"catalog {catalog!r} is not registered with the reference reader")
        name = qualified_name(catalog, table)
        query = f"SELECT * FROM {name}"
        if snapshot_id is not None:
            query += f" VERSION AS OF {int(snapshot_id)}"
        try:
            yield self.spark.sql(query)
        except AnalysisException as exc:
            if _error_class(exc) in {"TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND"}:
                raise ReferenceTableNotFound(
                    f"table {table!r} does not exist in catalog {catalog!r} (read as {name})"
                ) from exc
            raise
        except IllegalArgumentException as exc:
            if "Cannot find snapshot" in str(exc):
                raise ReferenceSnapshotNotFound(
                    f"table {table!r} in catalog {catalog!r} has no snapshot {snapshot_id}"
                ) from exc
            raise

    def _conf(self, key: str) -> str | None:
        value = self.spark.conf.get(key, None)
        return None if value is None else str(value)


def qualified_name(catalog: str, table: str) -> str:
    """Return the backquoted Spark name of ``table`` (``"ns.table"``, ``"ns1.ns2.table"``) in ``catalog``."""
    parts = table.split(".")
    if len(parts) < 2 or not all(parts):
        raise ValueError(f"expected a table name of the form 'namespace.table', got {table!r}")
    return ".".join(_quote(part) for part in (catalog, *parts))


def _quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def _error_class(exc: AnalysisException) -> str | None:
    getter = getattr(exc, "getErrorClass", None)
    error_class = getter() if getter is not None else None
    return None if error_class is None else str(error_class)


def normalize_row(row: Iterable[Any], schema: StructType) -> tuple[Any, ...]:
    """Return a Spark row as a hashable tuple of normalized values (see ``normalize_value``)."""
    return tuple(
        normalize_value(value, field.dataType) for value, field in zip(row, schema.fields, strict=True)
    )


def normalize_value(value: Any, data_type: DataType) -> Any:
    """Return a Spark value in the form ``arrow_rows`` gives the same Iceberg value.

    Structs and lists become tuples and maps tuples of ``(key, value)`` sorted by key, so
    rows hash; ``bytearray`` becomes ``bytes``; timestamps with time zone, which Spark hands
    over as naive local time, become aware UTC datetimes. Decimals, dates, naive
    timestamps, strings and floats are kept as they are.
    """
    if value is None:
        return None
    if isinstance(data_type, StructType):
        return normalize_row(value, data_type)
    if isinstance(data_type, ArrayType):
        return tuple(normalize_value(element, data_type.elementType) for element in value)
    if isinstance(data_type, MapType):
        return _sorted_items(
            (normalize_value(key, data_type.keyType), normalize_value(item, data_type.valueType))
            for key, item in value.items()
        )
    if isinstance(data_type, TimestampType):
        return _as_utc(value)
    if isinstance(data_type, BinaryType):
        return bytes(value)
    return value


def arrow_rows(table: pa.Table) -> Rows:
    """Return the multiset of rows of a pyarrow table, normalized like ``ReferenceReader.rows``."""
    columns = [
        [_normalize_arrow(value, field.type) for value in table.column(index).to_pylist()]
        for index, field in enumerate(table.schema)
    ]
    return Counter(zip(*columns, strict=True)) if columns else Counter({(): table.num_rows})


def _normalize_arrow(value: Any, arrow_type: Any) -> Any:
    if value is None:
        return None
    if pa.types.is_struct(arrow_type):
        fields = [arrow_type.field(index) for index in range(arrow_type.num_fields)]
        return tuple(_normalize_arrow(value[field.name], field.type) for field in fields)
    if pa.types.is_map(arrow_type):
        return _sorted_items(
            (_normalize_arrow(key, arrow_type.key_type), _normalize_arrow(item, arrow_type.item_type))
            for key, item in (value.items() if isinstance(value, Mapping) else value)
        )
    if (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    ):
        return tuple(_normalize_arrow(element, arrow_type.value_type) for element in value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    if isinstance(value, uuid.UUID):
        # Spark has no UUID type and reads Iceberg uuids as their string form.
        return str(value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _as_utc(value: Any) -> Any:
    if not isinstance(value, dt.datetime):
        return value
    # A naive datetime here is local time (pyspark converts with fromtimestamp), which
    # astimezone interprets as such, including the fold of an ambiguous hour.
    return value.astimezone(dt.UTC)


def _sorted_items(items: Iterable[tuple[Any, Any]]) -> tuple[tuple[Any, Any], ...]:
    return tuple(sorted(items, key=lambda item: repr(item[0])))
