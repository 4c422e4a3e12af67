"""An idle table costs one row of one catalog query per refresh, not a load: the engine asks a SQL
catalog where all its tables' metadata is at once, and loads only the tables whose metadata moved."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import generate_latest
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.catalog.sql import SqlCatalog

from floe.api.group import OptimizerGroup
from floe.api.models import OptimizedTable
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.table_state import TableState
from floe.protocol.wire import RegisterRequest
from floe.service.task_service import TaskService
from floe.tables.metadata_probe import metadata_locations

MAINTENANCE_JOBS = ("snapshotRetention", "orphanFiles", "manifests", "danglingDeletes")
ROWS = pa.table({"id": pa.array(range(10), pa.int64())})


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[SqlCatalog]:
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh").as_uri())
    for namespace in (("sales",), ("sales", "eu")):
        catalog.create_namespace(namespace)
    yield catalog
    catalog.engine.dispose()


def test_a_sql_catalog_tells_every_tables_metadata_location_at_once(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    for identifier in ("sales.orders", "sales.eu.orders"):
        catalog.create_table(identifier, ROWS.schema)
    catalog.load_table("sales.orders").append(ROWS)
    # Another catalog in the same database is not this one.
    other = SqlCatalog("other", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh2").as_uri())
    other.create_namespace("sales")
    other.create_table("sales.returns", ROWS.schema)
    assert metadata_locations(catalog) == {
        identifier: catalog.load_table(identifier).metadata_location
        for identifier in ("sales.orders", "sales.eu.orders")
    }
    # A catalog that answers one table per call is not probed: its tables are loaded.
    assert metadata_locations(NoopCatalog("rest-like")) is None


def _group(name: str = "default") -> OptimizerGroup:
    return OptimizerGroup.model_validate(
        {"apiVersion": "floe.dev/v1alpha1", "kind": "OptimizerGroup", "metadata": {"name": name}}
    )


def idle_refresh_engine() -> OptimizingEngine:
    """An engine that refreshes every table at every round, with the group ``default``."""
    engine = OptimizingEngine(TaskService(clock=time.time), refresh_interval_s=0.0)
    engine.apply_group(_group())
    return engine


def _table(catalog: SqlCatalog, identifier: str, **spec: object) -> OptimizedTable:
    properties = {"type": "sql", **{k: str(v) for k, v in catalog.properties.items()}}
    return table_without_maintenance(catalog.name, properties, identifier, **spec)


def table_without_maintenance(
    catalog: str, properties: dict[str, str], identifier: str, **spec: object
) -> OptimizedTable:
    """The OptimizedTable of `identifier` in the catalog `catalog` (`properties`), no job on."""
    return OptimizedTable.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": identifier.replace(".", "-")},
            "spec": {
                "table": identifier,
                "catalog": {"name": catalog, "properties": properties},
                # No maintenance job: each loads the table when it runs, which is not a refresh.
                "maintenance": {job: {"enabled": False} for job in MAINTENANCE_JOBS},
                **spec,
            },
        }
    )


def test_an_idle_table_is_loaded_again_only_when_its_metadata_moves(catalog: SqlCatalog) -> None:
    table = catalog.create_table("sales.orders", ROWS.schema)
    table.append(ROWS)
    engine = idle_refresh_engine()
    try:
        runtime = engine.apply_table(_table(catalog, "sales.orders"))
        engine.tick()
        assert (engine.table_loads, runtime.snapshot_id) == (1, table.metadata.current_snapshot_id)
        for _ in range(3):
            engine.tick()
        # Refreshed three more times (one probe each), never loaded: nothing moved.
        assert (engine.table_loads, engine.catalog_probes) == (1, 4)
        assert runtime.last_refresh_s is not None and not runtime.last_error

        # A writer's commit moves the metadata: the table is loaded and its new snapshot seen.
        table.append(ROWS)
        engine.tick()
        assert engine.table_loads == 2 and runtime.snapshot_id == table.refresh().metadata.current_snapshot_id
        engine.tick()
        assert engine.table_loads == 2

        # A changed spec is evaluated again, on a load, even with the metadata where it was.
        engine.apply_table(_table(catalog, "sales.orders", fragmentRatio=4))
        engine.tick()
        assert engine.table_loads == 3

        # A table gone from the catalog is loaded, which says so.
        catalog.drop_table("sales.orders")
        engine.tick()
        assert engine.table_loads == 4 and "not found" in runtime.last_error
        scrape = generate_latest(engine.service.metrics.registry).decode()
        assert 'floe_catalog_calls_total{kind="load"} 4.0' in scrape
        assert f'floe_catalog_calls_total{{kind="probe"}} {float(engine.catalog_probes)}' in scrape
    finally:
        engine.close()


def test_a_table_never_evaluated_is_loaded_whatever_the_probe_says(catalog: SqlCatalog) -> None:
    catalog.create_table("sales.orders", ROWS.schema)  # no snapshot: nothing was ever evaluated
    engine = idle_refresh_engine()
    try:
        engine.apply_table(_table(catalog, "sales.orders"))
        engine.tick()
        engine.tick()
        assert engine.table_loads == 2
    finally:
        engine.close()


def test_a_round_loads_what_fits_in_its_budget_and_the_next_rounds_the_rest(catalog: SqlCatalog) -> None:
    """Thousands of new tables do not hold the engine loop for one long round: a round loads
    tables while its budget lasts (a batch at least), the longest unrefreshed first."""
    for index in range(30):
        catalog.create_table(f"sales.t{index:02d}", ROWS.schema).append(ROWS)
    engine = OptimizingEngine(
        TaskService(clock=time.time), refresh_interval_s=60.0, io_threads=1, refresh_budget_s=0.0
    )
    try:
        engine.apply_group(_group())
        runtimes = [engine.apply_table(_table(catalog, f"sales.t{index:02d}")) for index in range(30)]
        loads = []
        while any(r.snapshot_id is None for r in runtimes):
            before = engine.table_loads
            engine.tick()
            loads.append(engine.table_loads - before)
            assert len(loads) <= 10
        assert loads == [4] * 7 + [2]  # one batch (4 per refresh thread) a round
    finally:
        engine.close()


def test_a_round_looks_only_at_the_tables_whose_time_has_come_or_that_changed(catalog: SqlCatalog) -> None:
    for index in range(3):
        catalog.create_table(f"sales.t{index}", ROWS.schema).append(ROWS)
    now = [1_000_000.0]
    engine = OptimizingEngine(TaskService(clock=time.time), clock=lambda: now[0], refresh_interval_s=30.0)
    try:
        engine.apply_group(_group())
        runtimes = [engine.apply_table(_table(catalog, f"sales.t{index}")) for index in range(3)]
        engine.tick()
        assert all(r.snapshot_id is not None for r in runtimes) and engine.visits == 3
        for _ in range(5):
            now[0] += 5
            engine.tick()
        assert engine.visits == 3  # idle and no refresh due (30 s, less a tenth at most): none looked at
        now[0] += 8
        engine.tick()
        assert (engine.visits, engine.table_loads) == (6, 3)  # every refresh due: one probe
        # A changed manifest is looked at in the next round, alone, and read with its new settings.
        engine.apply_table(_table(catalog, "sales.t1", fragmentRatio=4))
        engine.tick()
        assert (engine.visits, engine.table_loads) == (7, 4)
        now[0] += 33
        engine.tick()
        assert (engine.visits, engine.table_loads) == (10, 4)
    finally:
        engine.close()


def test_a_table_refreshed_then_planned_is_loaded_once(catalog: SqlCatalog) -> None:
    """Planning takes the refresh's load and plan while they are younger than a refresh interval;
    an older evaluation is loaded and planned again."""
    for identifier in ("sales.orders", "sales.returns"):
        table = catalog.create_table(identifier, ROWS.schema)
        for _ in range(12):
            table.append(ROWS)  # twelve fragments: a minor optimizing is due
    now = [1_000_000.0]
    engine = OptimizingEngine(TaskService(clock=time.time), clock=lambda: now[0], refresh_interval_s=30.0)
    try:
        engine.apply_group(_group())
        engine.apply_group(_group("later"))
        orders = engine.apply_table(_table(catalog, "sales.orders"))
        returns = engine.apply_table(_table(catalog, "sales.returns", group="later"))
        engine.service.register(RegisterRequest(group="default", threads=2, memory_bytes=1 << 30))
        engine.tick()
        # Both refreshed, one load each; the served table's process started with no load of its own.
        assert orders.process_id is not None and returns.state == TableState.PENDING
        assert engine.table_loads == 2

        now[0] += 31
        engine.tick()  # the waiting table's refresh: the probe finds its metadata where it was
        assert (engine.table_loads, returns.state) == (2, TableState.PENDING)
        engine.service.register(RegisterRequest(group="later", threads=2, memory_bytes=1 << 30))
        engine.tick()
        # Its evaluation is older than a refresh interval: planning loads the table again.
        assert returns.process_id is not None and engine.table_loads == 3
    finally:
        engine.close()
