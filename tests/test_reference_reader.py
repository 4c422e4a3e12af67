"""The reference reader: Iceberg's Java implementation, through Spark, on pyiceberg's SQLite catalog."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)
from pyspark.sql import SparkSession

from floe.local.reference_jars import ReferenceJarsUnavailable, reference_jars
from floe.local.reference_reader import (
    ReferenceReader,
    ReferenceSnapshotNotFound,
    ReferenceTableNotFound,
    arrow_rows,
)
from floe_optimizer.spark_session import ICEBERG_EXTENSIONS, get_spark

EVENTS_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "category", StringType(), required=False),
    NestedField(3, "amount", DecimalType(10, 2), required=False),
    NestedField(4, "day", DateType(), required=False),
    NestedField(5, "at", TimestamptzType(), required=False),
    NestedField(6, "local_at", TimestampType(), required=False),
    NestedField(7, "score", DoubleType(), required=False),
    NestedField(8, "payload", BinaryType(), required=False),
    NestedField(9, "tags", ListType(20, StringType(), element_required=False), required=False),
    NestedField(
        10,
        "attrs",
        MapType(21, StringType(), 22, IntegerType(), value_required=False),
        required=False,
    ),
    NestedField(
        11,
        "origin",
        StructType(
            NestedField(30, "host", StringType(), required=False),
            NestedField(31, "port", IntegerType(), required=False),
        ),
        required=False,
    ),
)
CATEGORY_SPEC = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="category")
)


def _event(event_id: int, category: str, amount: str) -> dict[str, Any]:
    return {
        "id": event_id,
        "category": category,
        "amount": Decimal(amount),
        "day": dt.date(2024, 1, event_id),
        "at": dt.datetime(2024, 3, 31, 1, event_id, 30, 250_000, tzinfo=dt.UTC),
        "local_at": dt.datetime(2024, 3, 31, 2, event_id, 0, 7),
        "score": event_id / 3,
        "payload": bytes([event_id, 0, 255]),
        "tags": ["a", None, str(event_id)],
        "attrs": [("z", event_id), ("k", None)],
        "origin": {"host": f"h{event_id}", "port": 8000 + event_id},
    }


def _row(event: dict[str, Any]) -> tuple[Any, ...]:
    """The row the reference reader returns for ``event``."""
    return (
        event["id"],
        event["category"],
        event["amount"],
        event["day"],
        event["at"],
        event["local_at"],
        event["score"],
        event["payload"],
        tuple(event["tags"]),
        tuple(sorted(event["attrs"])),
        (event["origin"]["host"], event["origin"]["port"]),
    )


def test_pyiceberg_and_spark_share_the_catalog(sql_catalog: SqlCatalog, reference: ReferenceReader) -> None:
    table = sql_catalog.create_table(
        "db.events", EVENTS_SCHEMA, partition_spec=CATEGORY_SPEC, properties={"format-version": "2"}
    )
    events = [
        _event(1, "a", "1.10"),
        _event(2, "a", "2.20"),
        _event(3, "a", "3.30"),
        _event(4, "b", "4.40"),
        _event(5, "b", "5.50"),
        _event(6, "b", "-6.60"),
    ]
    appended = pa.Table.from_pylist(events, schema=table.schema().as_arrow())
    table.append(appended)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    first_snapshot_id = snapshot.snapshot_id
    original = Counter(_row(event) for event in events)
    catalog = sql_catalog.name

    assert reference.rows(catalog, "db.events") == original
    assert arrow_rows(appended) == original

    name = f"{catalog}.db.events"
    reference.sql(
        f"ALTER TABLE {name} SET TBLPROPERTIES "
        "('write.delete.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read')"
    )
    reference.sql(f"DELETE FROM {name} WHERE id = 2")
    reference.sql(f"UPDATE {name} SET amount = amount + 100 WHERE id = 5")

    table.refresh()
    assert table.properties["write.delete.mode"] == "merge-on-read"
    history = [entry.snapshot_id for entry in table.history()]
    assert history[0] == first_snapshot_id
    assert len(history) == 3, "Spark's DELETE and UPDATE each commit one snapshot pyiceberg sees"
    delete_files = table.inspect.delete_files().to_pylist()
    assert len(delete_files) == 2, "one position delete file per statement, each in a one-row partition"
    assert {row["content"] for row in delete_files} == {1}, "merge-on-read writes position deletes"
    assert {row["file_format"] for row in delete_files} == {"PARQUET"}, "v2 deletes are Parquet, not DVs"
    assert {row["partition"]["category"] for row in delete_files} == {"a", "b"}

    updated = {**events[4], "amount": Decimal("105.50")}
    expected = Counter(_row(event) for event in (events[0], events[2], events[3], updated, events[5]))
    assert reference.rows(catalog, "db.events") == expected
    assert reference.count(catalog, "db.events") == 5
    assert arrow_rows(table.scan().to_arrow()) == expected, "pyiceberg applies Spark's position deletes"

    assert reference.rows(catalog, "db.events", snapshot_id=first_snapshot_id) == original
    assert reference.count(catalog, "db.events", snapshot_id=first_snapshot_id) == 6

    # pyiceberg can still commit after the Java catalog has been used (it holds no SQLite lock),
    # and Spark sees that commit at once (no catalog caching).
    later = [_event(7, "a", "7.70")]
    table.append(pa.Table.from_pylist(later, schema=table.schema().as_arrow()))
    assert reference.rows(catalog, "db.events") == expected + Counter([_row(later[0])])


def test_table_created_by_spark_is_visible_to_pyiceberg(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    name = f"{sql_catalog.name}.db.made_by_spark"
    reference.sql(f"CREATE TABLE {name} (id BIGINT, label STRING) USING iceberg PARTITIONED BY (label)")
    reference.sql(f"INSERT INTO {name} VALUES (1, 'x'), (2, 'y'), (3, NULL)")

    table = sql_catalog.load_table("db.made_by_spark")
    assert arrow_rows(table.scan().to_arrow()) == Counter([(1, "x"), (2, "y"), (3, None)])
    table.append(pa.Table.from_pylist([{"id": 4, "label": "x"}], schema=table.schema().as_arrow()))
    assert reference.sql(f"SELECT count(*) FROM {name}") == [(4,)]


@pytest.fixture
def new_york_time() -> Iterator[None]:
    """Run the test with the Python process's local time zone set to America/New_York."""
    previous = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if previous is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = previous
    time.tzset()


@pytest.mark.usefixtures("new_york_time")
def test_timestamps_with_zone_do_not_depend_on_local_time(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    schema = Schema(
        NestedField(1, "at", TimestamptzType(), required=False),
        NestedField(2, "local_at", TimestampType(), required=False),
    )
    table = sql_catalog.create_table("db.times", schema)
    # 06:30 UTC on 2024-11-03 is 01:30 in New York's second (standard-time) pass through 01:00-02:00.
    instants = [dt.datetime(2024, 11, 3, hour, 30, tzinfo=dt.UTC) for hour in (5, 6, 12)]
    data = pa.Table.from_pylist(
        [{"at": instant, "local_at": instant.replace(tzinfo=None)} for instant in instants],
        schema=table.schema().as_arrow(),
    )
    table.append(data)

    assert reference.rows(sql_catalog.name, "db.times") == arrow_rows(data)
    assert reference.rows(sql_catalog.name, "db.times") == Counter(
        (instant, instant.replace(tzinfo=None)) for instant in instants
    )


def test_missing_table_raises_a_clear_error(sql_catalog: SqlCatalog, reference: ReferenceReader) -> None:
    with pytest.raises(ReferenceTableNotFound, match=r"'db\.nope'.*'cat_\d+'"):
        reference.rows(sql_catalog.name, "db.nope")
    with pytest.raises(ReferenceTableNotFound, match=r"'missing_ns\.t'"):
        reference.count(sql_catalog.name, "missing_ns.t")


def test_missing_snapshot_raises_a_clear_error(sql_catalog: SqlCatalog, reference: ReferenceReader) -> None:
    table = sql_catalog.create_table("db.one", Schema(NestedField(1, "id", LongType(), required=False)))
    assert reference.rows(sql_catalog.name, "db.one") == Counter()
    table.append(pa.table({"id": pa.array([1], pa.int64())}))
    with pytest.raises(ReferenceSnapshotNotFound, match="has no snapshot 123"):
        reference.rows(sql_catalog.name, "db.one", snapshot_id=123)


def test_unregistered_catalog_and_bad_names_are_rejected(
    sql_catalog: SqlCatalog, reference: ReferenceReader, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="not registered"):
        reference.rows("never_registered", "db.t")
    with pytest.raises(ValueError, match=r"namespace\.table"):
        reference.rows(sql_catalog.name, "no_namespace")
    with pytest.raises(ValueError, match="already registered"):
        reference.register_sql_catalog(sql_catalog.name, tmp_path / "other.db", "file:///elsewhere")


def test_registering_a_database_without_catalog_tables_fails(
    reference: ReferenceReader, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError, match="open the pyiceberg SqlCatalog first"):
        reference.register_sql_catalog("not_created", tmp_path / "absent.db", tmp_path.as_uri())
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(ValueError, match="lacks the catalog table"):
        reference.register_sql_catalog("not_created", empty, tmp_path.as_uri())


def test_python_workers_import_floe(spark: SparkSession) -> None:
    def worker_floe_version(_: int) -> str:
        import floe

        return floe.__version__

    import floe

    versions = spark.sparkContext.parallelize(range(4), 2).map(worker_floe_version).collect()
    assert versions == [floe.__version__] * 4


def test_get_spark_returns_the_running_session(spark: SparkSession) -> None:
    assert get_spark(extra_jars=reference_jars()) is spark
    assert spark.conf.get("spark.sql.extensions") == ICEBERG_EXTENSIONS


def test_get_spark_refuses_jars_the_running_session_lacks(spark: SparkSession, tmp_path: Path) -> None:
    jar = tmp_path / "late-addition-1.0.jar"
    jar.write_bytes(b"")
    with pytest.raises(RuntimeError, match=r"late-addition-1\.0\.jar"):
        get_spark(extra_jars=[jar])


def test_cached_jars_cost_no_maven_call(monkeypatch: pytest.MonkeyPatch) -> None:
    jars = reference_jars()
    assert [jar.name for jar in jars] == [
        "iceberg-spark-runtime-3.5_2.12-1.10.0.jar",
        "sqlite-jdbc-3.46.1.3.jar",
        "iceberg-aws-bundle-1.10.0.jar",
    ]

    def no_subprocess(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("reference_jars ran a process although the jars are cached")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    assert reference_jars() == jars


def test_missing_maven_names_the_artifact(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLOE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(ReferenceJarsUnavailable, match=r"iceberg-spark-runtime-3\.5_2\.12:1\.10\.0.*mvn"):
        reference_jars()


def test_failing_maven_names_the_artifact(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_mvn = tmp_path / "bin" / "mvn"
    fake_mvn.parent.mkdir()
    fake_mvn.write_text("#!/bin/sh\necho '[ERROR] Could not resolve artifact' >&2\nexit 1\n")
    fake_mvn.chmod(0o755)
    monkeypatch.setenv("FLOE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(shutil, "which", lambda _name: str(fake_mvn))
    with pytest.raises(
        ReferenceJarsUnavailable,
        match=r"(?s)iceberg-spark-runtime-3\.5_2\.12:1\.10\.0.*exited with 1.*Could not",
    ):
        reference_jars()
    assert list((tmp_path / "cache" / "jars").iterdir()) == [], "a failed fetch leaves nothing behind"
