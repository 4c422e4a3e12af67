"""A catalog's request budget: the rate, the concurrency, commits before refreshes, 429/503 with
Retry-After; on plain values with a clock, then the engine on Iceberg's REST catalog server behind
a proxy that throttles like a managed catalog."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from fault_proxy import FaultProxy, fault_proxy
from prometheus_client import generate_latest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from rest_s3 import RestS3Stack, rest_s3_stack
from test_metadata_probe import idle_refresh_engine, table_without_maintenance
from test_task_service import Clock

from floe.tables.budgeted_http import retry_after_s
from floe.tables.request_budget import (
    BudgetExhausted,
    BudgetSettings,
    Priority,
    RequestBudget,
    budget_settings,
    calls_for,
    current_priority,
)

ROWS = pa.table({"id": pa.array(range(10), pa.int64())})


def _budget(rate: float = 2.0, concurrency: int = 2) -> tuple[RequestBudget, Clock]:
    clock = Clock()
    return RequestBudget(BudgetSettings(rate, concurrency), clock), clock


def test_calls_go_at_the_rate_after_a_seconds_burst() -> None:
    budget, clock = _budget(rate=2.0, concurrency=10)
    assert [budget.wait_s(Priority.PLAN) for _ in range(2)] == [0.0, 0.0]  # a second's worth saved up
    assert budget.wait_s(Priority.PLAN) == pytest.approx(0.5)
    clock.now += 0.5
    assert budget.wait_s(Priority.PLAN) == 0.0
    assert budget.stats().requests == 3 and budget.stats().in_flight == 3


def test_no_more_calls_in_flight_than_the_concurrency() -> None:
    budget, _ = _budget(rate=100.0, concurrency=2)
    assert budget.wait_s(Priority.PLAN) == budget.wait_s(Priority.PLAN) == 0.0
    assert budget.wait_s(Priority.PLAN) > 0.0
    budget.release()
    assert budget.wait_s(Priority.PLAN) == 0.0


def test_a_refresh_never_waits_and_never_goes_before_a_waiting_commit() -> None:
    budget = RequestBudget(BudgetSettings(rate=1.0, concurrency=1))
    budget.acquire(Priority.PLAN)
    # The one slot is taken: a refresh gives up at once and is counted held back.
    with pytest.raises(BudgetExhausted):
        budget.acquire(Priority.REFRESH)
    # A commit waits for the slot; while it waits, a refresh does not get in before it.
    got: list[str] = []
    committer = threading.Thread(target=lambda: (budget.acquire(Priority.COMMIT), got.append("commit")))
    committer.start()
    while budget.stats().waiting == 0:
        time.sleep(0.01)
    budget.release()
    with pytest.raises(BudgetExhausted):
        budget.acquire(Priority.REFRESH)
    committer.join(timeout=10)
    assert got == ["commit"]
    stats = budget.stats()
    assert (
        stats.refreshes_held_back == 2
        and stats.pressure()
        and "2 table refreshes held back" in stats.pressure()
    )


def test_a_429_pauses_every_call_for_its_retry_after_or_a_doubling_backoff() -> None:
    budget, clock = _budget(rate=100.0, concurrency=10)
    assert budget.answered(429, 5.0) == 5.0
    assert budget.wait_s(Priority.COMMIT) == pytest.approx(5.0)  # commits wait too: the catalog said so
    assert "paused for 5s more after 1 429/503 answers" in (budget.stats().pressure() or "")
    clock.now += 5.0
    assert budget.wait_s(Priority.COMMIT) == 0.0
    # No Retry-After: 1 s, then 2, 4, ... up to a minute; an answer that is neither resets it.
    assert budget.answered(200, None) == 0.0
    assert [budget.answered(503, None) for _ in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert budget.answered(200, None) == 0.0 and budget.answered(429, None) == 1.0
    assert budget.stats().throttled == 10


def test_429s_halve_the_rate_once_a_second_down_to_a_floor_and_it_grows_back() -> None:
    budget, clock = _budget(rate=20.0, concurrency=100)
    budget.answered(429, 0.0)
    budget.answered(429, 0.0)  # the answers to one burst of calls: slowed once
    assert budget.stats().rate_now == pytest.approx(10.0)
    assert "slowed to 10 of 20 requests a second" in (budget.stats().pressure() or "")
    # Calls go at the lowered rate: its second's worth, then one every 0.1 s.
    assert [budget.wait_s(Priority.PLAN) for _ in range(10)] == [0.0] * 10
    assert budget.wait_s(Priority.PLAN) == pytest.approx(0.1, rel=0.01)
    for _ in range(10):
        clock.now += 1.0
        budget.answered(429, 0.0)
    assert budget.stats().rate_now == pytest.approx(20 / 64, rel=0.2)  # the floor, and a little growth
    # Each second gives back a 120th of the setting, up to the setting.
    clock.now += 60.0
    assert budget.stats().rate_now == pytest.approx(20 / 64 + 10.0, rel=0.05)
    clock.now += 600.0
    assert budget.stats().rate_now == 20.0 and budget.stats().pressure() is None


def test_retry_after_as_seconds_or_a_date() -> None:
    assert retry_after_s({"Retry-After": "7"}) == 7.0
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= (retry_after_s({"Retry-After": later}) or 0) <= 31
    assert retry_after_s({}) is None and retry_after_s({"Retry-After": "soon"}) is None


def test_the_budget_is_set_by_catalog_properties_and_bad_ones_are_named() -> None:
    assert budget_settings({}) == BudgetSettings(20.0, 4)
    assert budget_settings({"floe.requests-per-second": "2.5", "floe.max-concurrent-requests": "1"}) == (
        BudgetSettings(2.5, 1)
    )
    for key, value in (("floe.requests-per-second", "0"), ("floe.max-concurrent-requests", "1.5")):
        with pytest.raises(ValueError, match=f"catalog property {key} must be a positive"):
            budget_settings({key: value})


def test_a_bad_budget_property_makes_its_tables_catalog_unavailable_naming_it(tmp_path: Path) -> None:
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh").as_uri())
    catalog.create_namespace("sales")
    catalog.create_table("sales.orders", ROWS.schema)
    properties = {"type": "sql", **{k: str(v) for k, v in catalog.properties.items()}}
    engine = idle_refresh_engine()
    try:
        spec = table_without_maintenance(
            "lake", {**properties, "floe.requests-per-second": "fast"}, "sales.orders"
        )
        runtime = engine.apply_table(spec)
        engine.tick()
        assert runtime.catalog_error and "floe.requests-per-second must be a positive number, not 'fast'" in (
            runtime.catalog_error
        )
    finally:
        engine.close()
        catalog.engine.dispose()


def test_a_calls_priority_follows_the_block_it_is_made_in() -> None:
    assert current_priority() == Priority.PLAN
    with calls_for(Priority.COMMIT):
        assert current_priority() == Priority.COMMIT
    assert current_priority() == Priority.PLAN


# -- the engine on a REST catalog that throttles ------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestS3Stack]:
    with rest_s3_stack("127.0.0.1", tmp_path_factory.mktemp("rest-s3")) as running:
        yield running


@pytest.fixture
def proxy(stack: RestS3Stack) -> Iterator[FaultProxy]:
    with fault_proxy(stack.catalog.uri) as running:
        yield running


def test_a_throttling_catalog_loses_nothing_and_shows_its_pressure(
    stack: RestS3Stack, proxy: FaultProxy
) -> None:
    """20 tables refreshed every round through a catalog that answers 429 above 4 requests a
    second: every table is read, a commit to one is seen, no table shows an error, and the
    budget says it was throttled, in metrics and in words."""
    catalog: RestCatalog = stack.client("lake")
    catalog.create_namespace("throttled")
    tables = []
    for i in range(20):
        table = catalog.create_table(f"throttled.t{i}", ROWS.schema)
        table.append(ROWS)
        tables.append(table)
    properties = {**stack.properties, "uri": proxy.url, "floe.requests-per-second": "40"}
    engine = idle_refresh_engine()
    try:
        runtimes = [
            engine.apply_table(table_without_maintenance("lake", properties, f"throttled.t{i}"))
            for i in range(20)
        ]
        proxy.limit_rate(4.0, retry_after_s=1.0)
        deadline = time.monotonic() + 60
        while any(r.snapshot_id is None for r in runtimes):
            assert time.monotonic() < deadline, [r.table_id for r in runtimes if r.snapshot_id is None]
            engine.tick()
        tables[7].append(ROWS)
        wanted = tables[7].refresh().metadata.current_snapshot_id
        while runtimes[7].snapshot_id != wanted:
            assert time.monotonic() < deadline, "the commit was not seen"
            engine.tick()
        # However slowly the machine runs the rounds, they go on until the catalog said 429 and
        # the budget held a refresh back for it; no table may show an error on the way.
        while not (proxy.throttled and engine.catalog_budgets()["lake"].throttled):
            assert time.monotonic() < deadline, "the catalog never answered 429"
            engine.tick()
        while not engine.catalog_budgets()["lake"].refreshes_held_back:
            assert time.monotonic() < deadline, "no refresh was held back after the catalog's 429"
            engine.tick()
        assert not [r.last_error for r in runtimes if r.last_error]
        assert "held back" in (engine.catalog_pressure("default").get("lake") or "")
        scrape = generate_latest(engine.service.metrics.registry).decode()
        assert 'floe_catalog_throttled_total{catalog="lake"}' in scrape
        assert 'floe_catalog_refreshes_held_back_total{catalog="lake"}' in scrape
        assert 'floe_catalog_request_rate{catalog="lake"}' in scrape
    finally:
        engine.close()


def test_a_catalog_is_asked_no_faster_than_its_budget(stack: RestS3Stack, proxy: FaultProxy) -> None:
    """Tables refreshed every round, as fast as the engine goes, at a budget of 5 requests a
    second: over 4 s the catalog gets no more than the budget's 5 a second and its burst."""
    catalog: RestCatalog = stack.client("lake")
    catalog.create_namespace("budgeted")
    for i in range(10):
        catalog.create_table(f"budgeted.t{i}", ROWS.schema).append(ROWS)
    properties = {**stack.properties, "uri": proxy.url, "floe.requests-per-second": "5"}
    engine = idle_refresh_engine()
    try:
        for i in range(10):
            engine.apply_table(table_without_maintenance("lake", properties, f"budgeted.t{i}"))
        engine.tick()  # the first call (the catalog's config) is made before the budget is in place
        sent = len(proxy.forwarded)
        started = time.monotonic()
        while time.monotonic() - started < 4.0:
            engine.tick()
        elapsed = time.monotonic() - started
        assert len(proxy.forwarded) - sent <= 5 * elapsed + 5 + 1
        assert engine.catalog_budgets()["lake"].refreshes_held_back > 0
    finally:
        engine.close()
