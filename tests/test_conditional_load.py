"""An idle table in a REST catalog costs a 304, not a load: the engine sends the ETag of the
metadata file it last evaluated, and Iceberg's REST server (1.11) answers Not Modified while
that file is current."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import generate_latest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from rest_s3 import RestS3Stack, rest_s3_stack
from test_metadata_probe import idle_refresh_engine, table_without_maintenance

from floe.tables.catalog import NotAnIcebergTable, TableNotFound
from floe.tables.conditional_load import load_table_if_changed

ROWS = pa.table({"id": pa.array(range(10), pa.int64())})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestS3Stack]:
    """moto and the REST catalog on loopback, for this module's tests."""
    with rest_s3_stack("127.0.0.1", tmp_path_factory.mktemp("rest-s3")) as running:
        yield running


@pytest.fixture(scope="module")
def catalog(stack: RestS3Stack) -> RestCatalog:
    client = stack.client("lake")
    client.create_namespace("sales")
    return client


def test_a_rest_load_carries_an_etag_that_gets_not_modified_until_the_table_moves(
    catalog: RestCatalog,
) -> None:
    table = catalog.create_table("sales.tagged", ROWS.schema)
    table.append(ROWS)
    first = load_table_if_changed(catalog, "sales.tagged", None)
    assert first.table is not None and first.etag
    assert first.table.metadata_location == table.metadata_location

    same = load_table_if_changed(catalog, "sales.tagged", first.etag)
    assert same.table is None and same.etag == first.etag

    table.append(ROWS)
    moved = load_table_if_changed(catalog, "sales.tagged", first.etag)
    assert moved.table is not None and moved.etag and moved.etag != first.etag
    assert moved.table.metadata.current_snapshot_id == table.metadata.current_snapshot_id
    # An ETag from elsewhere is no match either.
    assert load_table_if_changed(catalog, "sales.tagged", '"not-a-tag"').table is not None

    with pytest.raises(TableNotFound, match=r"sales\.missing"):
        load_table_if_changed(catalog, "sales.missing", first.etag)


def test_a_catalog_without_etags_is_loaded_in_full(tmp_path: Path) -> None:
    sql = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh").as_uri())
    try:
        sql.create_namespace("sales")
        sql.create_table("sales.orders", ROWS.schema).append(ROWS)
        loaded = load_table_if_changed(sql, "sales.orders", "anything")
        assert loaded.table is not None and loaded.etag is None
        # What is not a table identifier is said so, before any call.
        with pytest.raises(TableNotFound, match=r"expected namespace\.table"):
            load_table_if_changed(sql, "orders", None)
        with pytest.raises(NotAnIcebergTable, match="not an Iceberg table"):
            load_table_if_changed(sql, str(tmp_path / "nowhere"), None)
    finally:
        sql.engine.dispose()


def test_an_idle_rest_table_is_refreshed_with_not_modified_and_loaded_when_it_moves(
    stack: RestS3Stack, catalog: RestCatalog
) -> None:
    table = catalog.create_table("sales.orders", ROWS.schema)
    table.append(ROWS)
    engine = idle_refresh_engine()
    try:
        runtime = engine.apply_table(table_without_maintenance("lake", stack.properties, "sales.orders"))
        engine.tick()
        assert (engine.table_loads, runtime.snapshot_id) == (1, table.metadata.current_snapshot_id)
        for _ in range(3):
            engine.tick()
        # Refreshed three more times, each a 304: nothing moved, nothing loaded.
        assert (engine.table_loads, engine.not_modified_loads) == (1, 3)
        assert runtime.last_refresh_s is not None and not runtime.last_error

        # A writer's commit moves the metadata: the table is loaded and its new snapshot seen.
        table.append(ROWS)
        engine.tick()
        assert engine.table_loads == 2 and runtime.snapshot_id == table.refresh().metadata.current_snapshot_id
        engine.tick()
        assert (engine.table_loads, engine.not_modified_loads) == (2, 4)

        # A changed spec is evaluated again, on a full load, even with the metadata where it was.
        engine.apply_table(
            table_without_maintenance("lake", stack.properties, "sales.orders", fragmentRatio=4)
        )
        engine.tick()
        assert (engine.table_loads, engine.not_modified_loads) == (3, 4)

        # A table gone from the catalog is no 304: the load says so.
        catalog.drop_table("sales.orders")
        engine.tick()
        assert engine.table_loads == 4 and "not found" in runtime.last_error
        scrape = generate_latest(engine.service.metrics.registry).decode()
        assert 'floe_catalog_calls_total{kind="load"} 4.0' in scrape
        assert 'floe_catalog_calls_total{kind="not-modified"} 4.0' in scrape
    finally:
        engine.close()
