"""An idle table costs one row of one catalog query per refresh, not a load: the engine asks a SQL
catalog where all its tables' metadata is at once, and loads only the tables whose metadata moved.
Such a catalog is swept: one probe per refresh interval, and only the tables whose file moved are
looked at; its idle tables cost no visit."""

from __future__ import annotations

import math
import sqlite3
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
from floe.api.table import CatalogRef
from floe.optimizing.catalog_access import PROBE_REUSE_S, CatalogAccess, catalog_key
from floe.optimizing.catalog_sweeps import CatalogSweep
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.table_state import TableRuntime, TableState
from floe.optimizing.wakeups import next_visit_s
from floe.protocol.wire import RegisterRequest
from floe.service.metrics import ServiceMetrics
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
    """A swept catalog's idle tables are not looked at: its probe, every refresh interval, finds
    the one a writer moved, which alone is loaded."""
    tables = [catalog.create_table(f"sales.t{index}", ROWS.schema) for index in range(3)]
    for table in tables:
        table.append(ROWS)
    now = [1_000_000.0]
    engine = OptimizingEngine(TaskService(clock=time.time), clock=lambda: now[0], refresh_interval_s=20.0)
    try:
        engine.apply_group(_group())
        runtimes = [engine.apply_table(_table(catalog, f"sales.t{index}")) for index in range(3)]
        engine.tick()
        assert all(r.snapshot_id is not None for r in runtimes)
        assert (engine.visits, engine.table_loads, engine.catalog_probes) == (3, 3, 1)
        for _ in range(3):
            now[0] += 5
            engine.tick()
        assert (engine.visits, engine.catalog_probes) == (3, 1)  # no sweep due: nothing looked at
        tables[2].overwrite(ROWS)  # one file still: nothing to optimize, the table stays idle
        now[0] += 6
        engine.tick()
        # The sweep: one probe, and only the moved table loaded; the others are not even visited.
        assert (engine.visits, engine.table_loads, engine.catalog_probes) == (3, 4, 2)
        assert runtimes[2].snapshot_id == tables[2].refresh().metadata.current_snapshot_id
        # A changed manifest is looked at in the next round, alone, and read with its new settings.
        engine.apply_table(_table(catalog, "sales.t1", fragmentRatio=4))
        engine.tick()
        assert (engine.visits, engine.table_loads) == (4, 5)
        now[0] += 20
        engine.tick()
        assert (engine.visits, engine.table_loads, engine.catalog_probes) == (4, 5, 4)
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


def test_a_sweep_finds_the_identifiers_whose_file_moved_appeared_or_went() -> None:
    sweep = CatalogSweep(CatalogRef(name="lake"))
    assert sweep.due(0.0) and sweep.next_s == -math.inf  # never probed: at once
    assert sweep.swept(100.0, {"a": "a1", "b": "b1"}) == {"a", "b"}
    assert sweep.next_s == math.inf  # no table joined: it asks for no probe of its own
    sweep.join("ns/a", 30.0)
    sweep.join("ns/b", 10.0)
    assert (sweep.interval_s, sweep.next_s) == (10.0, 110.0)
    assert not sweep.due(109.0) and sweep.due(110.0)
    assert sweep.swept(110.0, {"a": "a1", "b": "b2", "c": "c1"}) == {"b", "c"}
    # b's tables could not be brought to b2: the next probe finds it again, however quiet.
    sweep.forget("b")
    assert sweep.swept(120.0, {"a": "a1", "b": "b2", "c": "c1"}) == {"b"}
    assert sweep.swept(130.0, {"b": "b2", "c": "c1"}) == {"a"}  # dropped from the catalog
    # The table that wanted 10 s leaves (or joins again wanting more): the probes slow to 30 s.
    sweep.join("ns/c", 10.0)
    sweep.leave("ns/b")
    assert sweep.interval_s == 10.0  # c still wants 10 s
    sweep.join("ns/c", 60.0)
    assert (sweep.interval_s, sweep.next_s) == (30.0, 160.0)
    sweep.leave("ns/a")
    sweep.leave("ns/a")  # leaving twice changes nothing
    assert sweep.interval_s == 60.0
    sweep.leave("ns/c")
    assert sweep.interval_s == math.inf and not sweep.members
    assert sweep.swept(140.0, {"b": "b2", "c": "c1"}) == set()


def _swept_engine(now: list[float]) -> OptimizingEngine:
    engine = OptimizingEngine(TaskService(clock=time.time), clock=lambda: now[0], refresh_interval_s=10.0)
    engine.apply_group(_group())
    return engine


def _idle_swept_tables(
    catalog: SqlCatalog, now: list[float], count: int
) -> tuple[OptimizingEngine, list[TableRuntime]]:
    """An engine with `count` tables of one catalog, read by its first round and swept since."""
    for index in range(count):
        catalog.create_table(f"sales.t{index}", ROWS.schema).append(ROWS)
    engine = _swept_engine(now)
    runtimes = [engine.apply_table(_table(catalog, f"sales.t{index}")) for index in range(count)]
    engine.tick()
    engine.take_looked_at()
    return engine, runtimes


def test_a_swept_idle_table_has_no_visit_of_its_own_and_is_not_looked_at(catalog: SqlCatalog) -> None:
    now = [1_000_000.0]
    engine, runtimes = _idle_swept_tables(catalog, now, 4)
    try:
        sweep = runtimes[0].refresh.sweep
        assert sweep is not None and all(r.refresh.sweep is sweep for r in runtimes)
        assert set(sweep.members) == {r.table_id for r in runtimes}
        # Nothing brings an idle swept table back by itself (no interval trigger, no job on).
        assert all(next_visit_s(r, now[0]) == math.inf for r in runtimes)
        for _ in range(5):
            now[0] += 10
            engine.tick()
        assert (engine.visits, engine.catalog_probes, engine.table_loads) == (4, 6, 4)
        assert engine.take_looked_at() == set()  # the status flush compares none of them
        # Its detail says when the catalog was last and is next asked.
        detail = engine.table_detail(runtimes[0].table_id)
        assert detail is not None and (detail.last_refresh_s, detail.next_refresh_s) == (now[0], now[0] + 10)
    finally:
        engine.close()


def test_the_backstop_visits_each_idle_table_once_a_minute_a_share_each_round(catalog: SqlCatalog) -> None:
    """Idle swept tables ask for no visit; a backstop for a touch the engine missed still looks at
    each once a minute from the second minute on, one table a round here, never all in one."""
    now = [1_000_000.0]
    engine, runtimes = _idle_swept_tables(catalog, now, 4)
    try:
        rounds: list[set[str]] = []
        for _ in range(18):  # three minutes, a round every 10 s
            now[0] += 10
            before = engine.visits
            engine.tick()
            looked_at = engine.take_looked_at()
            assert engine.visits - before == len(looked_at) <= 1
            rounds.append(looked_at)
        assert set().union(*rounds[:6]) == set()  # the first minute: all were just read
        every_table = {r.table_id for r in runtimes}
        assert set().union(*rounds[6:12]) == every_table == set().union(*rounds[12:18])
        assert engine.catalog_probes == 19 and engine.table_loads == 4  # the backstop loads nothing
    finally:
        engine.close()


def test_a_catalog_that_stops_answering_has_its_tables_checked_on_their_own_until_it_answers(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    catalog.create_table("sales.orders", ROWS.schema).append(ROWS)
    now = [1_000_000.0]
    engine = _swept_engine(now)
    try:
        runtime = engine.apply_table(_table(catalog, "sales.orders"))
        engine.tick()
        assert runtime.refresh.sweep is not None and not runtime.last_error
        database = tmp_path / "catalog.db"
        rename_sqlite_table(database, "iceberg_tables", "away")  # every call to the catalog fails now
        now[0] += 10
        engine.tick()  # the sweep's probe fails: the sweep ends and its table is checked at once
        assert runtime.refresh.sweep is None and runtime.refresh.next_s is None
        engine.tick()
        assert runtime.last_error and runtime.catalog_error
        # Back: the table's own check, backed off to 20 s (±10 %) from the failed one, finds it,
        # and the catalog is swept again.
        rename_sqlite_table(database, "away", "iceberg_tables")
        assert runtime.refresh.interval_s == 20
        now[0] += 23
        engine.tick()
        assert not runtime.last_error and runtime.refresh.sweep is not None
    finally:
        engine.close()


def rename_sqlite_table(database: Path, old: str, new: str) -> None:
    """Rename a table of a SQLite database: renaming a SQL catalog's own table breaks every call to it."""
    with sqlite3.connect(database) as connection:
        connection.execute(f"ALTER TABLE {old} RENAME TO {new}")


def test_a_removed_table_leaves_its_sweep_and_an_empty_sweep_probes_no_more(catalog: SqlCatalog) -> None:
    for identifier in ("sales.a", "sales.b"):
        catalog.create_table(identifier, ROWS.schema).append(ROWS)
    now = [1_000_000.0]
    engine = _swept_engine(now)
    try:
        a, b = (engine.apply_table(_table(catalog, f"sales.{name}")) for name in ("a", "b"))
        engine.tick()
        sweep = a.refresh.sweep
        assert sweep is not None and set(sweep.members) == {a.table_id, b.table_id}
        engine.remove_table(a.table_id)
        assert set(sweep.members) == {b.table_id}
        now[0] += 10
        engine.tick()
        assert engine.catalog_probes == 2
        engine.remove_table(b.table_id)
        for _ in range(3):
            now[0] += 10
            engine.tick()
        # No member wants a probe: none after the last left.
        assert engine.catalog_probes == 2 and sweep.interval_s == math.inf
    finally:
        engine.close()


def test_an_orphan_check_takes_the_refreshs_probe_while_it_is_younger_than_the_reuse_age(
    catalog: SqlCatalog,
) -> None:
    for identifier in ("sales.orders", "sales.returns"):
        catalog.create_table(identifier, ROWS.schema)
    access = CatalogAccess(ServiceMetrics())
    ref = CatalogRef(name=catalog.name, properties={"type": "sql", **catalog.properties})
    key = catalog_key(ref)
    swept_s = 1_000.0
    assert set(access.probe({key: ref}, swept_s)[key]) == {"sales.orders", "sales.returns"}
    index = access.catalog_locations(ref)
    orders = catalog.load_table("sales.orders")
    uuid = str(orders.metadata.table_uuid)
    # A table made after the refresh's probe is not in a check that takes that probe: its files
    # are younger than the probe, which orphan cleanup's olderThan (an hour at least) keeps.
    catalog.create_table("sales.refunds", ROWS.schema)
    within = index.others("sales.orders", uuid, swept_s + PROBE_REUSE_S - 1, 3600.0)
    assert set(within.locations) == {"sales.returns"} and access.catalog_probes == 1
    # What the check read is known current as of the probe, not the check: once returns moves
    # (its data path into orders' location), a check an hour after the probe, though less than
    # an hour after the check that read it, reads it again.
    returns = catalog.load_table("sales.returns")
    returns.transaction().set_properties(
        {"write.data.path": f"{orders.location()}/data/r"}
    ).commit_transaction()
    later_s = swept_s + PROBE_REUSE_S - 1 + 3600.0 - 1
    later = index.others("sales.orders", uuid, later_s, 3600.0)
    assert later.locations["sales.returns"].write_paths == (f"{orders.location()}/data/r",)
    assert set(later.locations) == {"sales.returns", "sales.refunds"}
    assert (access.catalog_probes, index.reads) == (2, 3)
    # Within the reuse age, a check takes the last check's own probe; past it, it probes again.
    index.others("sales.orders", uuid, later_s + PROBE_REUSE_S - 1, 3600.0)
    assert access.catalog_probes == 2
    index.others("sales.orders", uuid, later_s + PROBE_REUSE_S, 3600.0)
    assert access.catalog_probes == 3
    # A probe older than the latest is not kept as the latest.
    access.probe({key: ref}, swept_s)
    index.others("sales.orders", uuid, later_s + PROBE_REUSE_S + 1, 3600.0)
    assert access.catalog_probes == 4
