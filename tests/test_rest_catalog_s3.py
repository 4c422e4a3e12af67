"""floe against a real Iceberg REST catalog whose tables live on an S3-protocol object store.

Iceberg Java's REST catalog server (JDBC on SQLite behind it, S3FileIO) and moto's S3 server
run as subprocesses on loopback (tests/rest_s3.py). pyiceberg creates and fills a table
through the REST catalog, Iceberg Java (through Spark) adds position deletes through the same
catalog, floe optimizes it on local Spark and commits through the REST catalog, and Iceberg
Java's reader, also through the REST catalog and S3, checks that the rows are unchanged. A
writer that commits while floe commits checks that the catalog's conflict answer makes floe
redo its commit on the new head.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import V3_MOR
from pyspark.sql import SparkSession
from rest_s3 import RestS3Stack, client_properties, rest_s3_stack
from test_correctness import CONFIG, LAYOUTS, MOR, SCHEMA, Writer

from floe.commit import rewrite
from floe.local.optimize import optimize_once
from floe.local.reference_reader import (
    ReferenceReader,
    arrow_rows,
    java_catalog_properties,
    jdbc_catalog_properties,
    qualified_name,
)
from floe.planning.plan import OptimizingType
from floe.tables.scan import scan_table
from floe.tables.writer import conform

CATALOG = "rest_s3"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestS3Stack]:
    """moto and the REST catalog on loopback, for this module's tests."""
    with rest_s3_stack("127.0.0.1", tmp_path_factory.mktemp("rest-s3")) as running:
        yield running


def test_optimize_through_a_rest_catalog_on_s3(
    stack: RestS3Stack, reference: ReferenceReader, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = stack.client(CATALOG)
    reference.register_catalog(CATALOG, stack.properties)
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", SCHEMA, partition_spec=LAYOUTS["identity"], properties=MOR)
    assert table.metadata.location.startswith(f"s3://{stack.bucket}/warehouse/")

    writer = Writer(table)
    writer.append(300)
    for _ in range(3):
        writer.append(60)
    for _ in range(8):
        writer.append(5)  # fragments
    writer.upsert([3, 50, 301])  # equality deletes and their re-inserts, from floe's writer
    writer.delete_keys([7, 302])
    name = qualified_name(CATALOG, "db.t")
    reference.sql(f"DELETE FROM {name} WHERE id % 13 = 0")  # position deletes, by Iceberg Java
    table.refresh()

    before = reference.rows(CATALOG, "db.t")
    start = scan_table(table).files
    assert len(before) > 0 and start.delete_files, "the table should have rows and deletes to apply"

    # Another writer commits between floe's refresh and its commit, once: the REST catalog must
    # refuse floe's first commit (409 on assert-ref-snapshot-id) and floe redo it on the new head.
    late = writer.rows(5)
    late_appended: list[bool] = []
    validate = rewrite.validate_since_start

    def append_once_then_validate(*args: Any) -> None:
        if not late_appended:
            other = stack.client(CATALOG).load_table("db.t")
            other.append(conform(other, late))
            late_appended.append(True)
        validate(*args)

    monkeypatch.setattr(rewrite, "validate_since_start", append_once_then_validate)

    result = optimize_once(table, "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.FULL)

    assert result.commit is not None and result.commit.attempts == 2
    expected = before + arrow_rows(conform(table, late))
    fresh = stack.client(CATALOG).load_table("db.t")
    head = fresh.current_snapshot()
    assert head is not None and head.snapshot_id == result.commit.snapshot_id
    after = scan_table(fresh).files
    assert len(after.data_files) < len(start.data_files)
    assert after.delete_files == ()
    assert reference.rows(CATALOG, "db.t") == expected
    # pyiceberg cannot read equality deletes, but reads the optimized table, which has none.
    assert arrow_rows(fresh.scan().to_arrow()) == expected
    assert all(f.path.startswith("s3://") for f in after.data_files)


def test_a_v3_table_with_deletion_vectors_through_a_rest_catalog_on_s3(
    stack: RestS3Stack, reference: ReferenceReader, spark: SparkSession
) -> None:
    """Spark writes a format v3 table through the REST catalog (deletion vectors in Puffin files
    on S3); floe reads the vectors from S3 by offset, keeps row lineage, and the REST server
    writes the v3 metadata of floe's commit."""
    reference.register_catalog(CATALOG, stack.properties)
    name = qualified_name(CATALOG, "v3.t")
    stack.client(CATALOG).create_namespace_if_not_exists("v3")
    reference.sql(
        f"CREATE TABLE {name} (id bigint, cat string, v double) USING iceberg PARTITIONED BY (cat) "
        f"TBLPROPERTIES ({V3_MOR})"
    )
    for start in range(0, 300, 100):
        reference.sql(
            f"INSERT INTO {name} SELECT id, CAST(id % 2 AS string), id * 1.0 "
            f"FROM range({start}, {start + 100})"
        )
    reference.sql(f"DELETE FROM {name} WHERE id % 7 = 0")
    reference.sql(f"UPDATE {name} SET v = -1 WHERE id % 11 = 0")
    lineage = f"SELECT *, _row_id, _last_updated_sequence_number FROM {name} ORDER BY id"
    before = reference.sql(lineage)
    table = stack.client(CATALOG).load_table("v3.t")
    assert any(f.content_offset is not None for f in scan_table(table).files.delete_files)

    result = optimize_once(table, "v3.t", CONFIG, spark=lambda: spark, forced=OptimizingType.FULL)

    assert result.commit is not None
    fresh = stack.client(CATALOG).load_table("v3.t")
    assert fresh.metadata.format_version == 3 and scan_table(fresh).files.delete_files == ()
    snapshot = fresh.current_snapshot()
    assert snapshot is not None and fresh.metadata.next_row_id == (snapshot.first_row_id or 0) + (
        snapshot.added_rows or 0
    )
    reference.sql(f"REFRESH TABLE {name}")
    assert reference.sql(lineage) == before


def test_java_properties_of_a_rest_client_read_with_s3_file_io() -> None:
    java = java_catalog_properties(client_properties("http://10.0.0.1:8181", "http://10.0.0.1:9000"))
    assert java == {
        "type": "rest",
        "uri": "http://10.0.0.1:8181",
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "cache-enabled": "false",
        "s3.endpoint": "http://10.0.0.1:9000",
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
        "s3.path-style-access": "true",
        "client.region": "us-east-1",
    }
    virtual = java_catalog_properties({"type": "rest", "uri": "u", "s3.force-virtual-addressing": "True"})
    assert virtual["s3.path-style-access"] == "false" and "client.region" not in virtual


def test_java_properties_of_other_catalogs(tmp_path: Path) -> None:
    database = tmp_path / "c.db"
    sql = {"type": "sql", "uri": f"sqlite:///{database}", "warehouse": "file:///w"}
    assert java_catalog_properties(sql) == jdbc_catalog_properties(database, "file:///w")
    with pytest.raises(ValueError, match="'glue'"):
        java_catalog_properties({"type": "glue"})
    with pytest.raises(ValueError, match="uri"):
        java_catalog_properties({"type": "rest"})
