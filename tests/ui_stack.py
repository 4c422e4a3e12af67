"""A real floe serving its web UI, and a headless Chromium to look at it: what
`tests/test_ui_browser.py` checks and `scripts/docs/ui_screenshots.py` photographs.

The lightest real setup: the engine and task service of `floe run` in this process, on a SQLite
catalog; tables written by pyiceberg (no Spark), their tasks polled, run (`floe.rewrite.task`, as
an executor runs them) and completed over the task service's own calls, each process committed by
the engine. One group has an optimizer thread (registered by hand); the other has none, so its
tables wait in its queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

from floe.api.group import OptimizerGroup
from floe.api.models import OptimizedTable
from floe.kit.redaction import Redactor
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.table_state import TableRuntime, TableState
from floe.protocol.wire import CompleteRequest, PollRequest, RegisterRequest
from floe.rewrite.task import run_task
from floe.service.task_service import TaskService
from floe.ui.model import UiSource
from floe.ui.server import UiServer

TOKEN = "ui-test-registration-token"
SECRET = "ui-test-secret-key-value"
"""A credential in the catalog's properties: no page may show it."""
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "note", StringType()))
TABLES = {"events": "batch", "orders": "batch", "clicks": "backfill", "audit": "backfill"}
"""Each table's group: batch has an optimizer thread, backfill none."""
TASK_S = 0.2
BUSY_TABLE = "analytics/events"
"""The table optimized three times: its page charts three runs."""


@dataclass
class ServedFloe:
    """The engine, its UI's address and the tables by id."""

    engine: OptimizingEngine
    url: str
    catalog: SqlCatalog


def _group(name: str, threads: int) -> OptimizerGroup:
    return OptimizerGroup.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizerGroup",
            "metadata": {"name": name, "namespace": "analytics"},
            "spec": {"executors": 1, "executorCores": threads},
        }
    )


def _table(catalog: SqlCatalog, name: str, group: str) -> OptimizedTable:
    properties = {"type": "sql", **{k: str(v) for k, v in catalog.properties.items()}}
    properties["s3.secret-access-key"] = SECRET
    return OptimizedTable.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": name, "namespace": "analytics"},
            "spec": {
                "table": f"db.{name}",
                "catalog": {"name": catalog.name, "properties": properties},
                "group": group,
                "targetSize": "64Ki",
                "maxTaskSize": "64Ki",
                "minPlanInterval": "0s",
            },
        }
    )


def _append_small_files(table: Table, files: int, start: int) -> None:
    """`files` appends of a few rows each: as many fragments."""
    for n in range(files):
        ids = list(range(start + n * 50, start + (n + 1) * 50))
        table.append(pa.table({"id": ids, "note": [f"row {i}" for i in ids]}, schema=SCHEMA.as_arrow()))


def _wait(what: str, done: object, engine: OptimizingEngine, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not callable(done) or not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"floe did not {what} within {timeout_s:.0f} s")
        engine.tick()
        time.sleep(0.05)


def _optimize_once(engine: OptimizingEngine, service: TaskService, token: str, runtime: TableRuntime) -> None:
    """Tick until the table is planned, run its tasks as an executor would, wait for the commit."""
    _wait("plan " + runtime.table_id, lambda: runtime.state.endswith("_OPTIMIZING"), engine)
    while (assignment := service.poll(token, PollRequest(thread=0))) is not None:
        service.ack(token, assignment.attempt_id)
        time.sleep(TASK_S)  # held as an executor would: the run's cost is more than nothing
        service.complete(token, assignment.attempt_id, CompleteRequest(result=run_task(assignment.spec)))
    _wait("commit " + runtime.table_id, lambda: runtime.state == TableState.IDLE, engine)


@contextmanager
def served_floe(workdir: Path) -> Iterator[ServedFloe]:
    """A floe with three optimizing runs committed on one table, other tables idle or queued, and
    its UI served on a free port of 127.0.0.1."""
    catalog = SqlCatalog(
        "lake", uri=f"sqlite:///{workdir / 'catalog.db'}", warehouse=(workdir / "warehouse").as_uri()
    )
    catalog.create_namespace("db")
    redact = Redactor()
    service = TaskService(clock=time.time, registration_token=TOKEN)
    engine = OptimizingEngine(service, refresh_interval_s=0.2, namespaced_groups=True)
    stop = threading.Event()
    try:
        engine.apply_group(_group("batch", 1))
        engine.apply_group(_group("backfill", 2))
        session = service.register(
            RegisterRequest(group="analytics/batch", threads=1, memory_bytes=0, name="by-hand"), TOKEN
        )
        tables = {}
        for name, group in (
            ("events", "batch"),
            ("orders", "batch"),
            ("clicks", "backfill"),
            ("audit", "backfill"),
        ):
            catalog.create_table(f"db.{name}", SCHEMA)
            resource = _table(catalog, name, group)
            redact.add(resource.spec.catalog.properties)
            tables[name] = engine.apply_table(resource)
        events = catalog.load_table("db.events")
        for cycle in range(3):
            _append_small_files(events, 12 + 6 * cycle, start=cycle * 10_000)
            _optimize_once(engine, service, session.token, tables["events"])
        _append_small_files(catalog.load_table("db.orders"), 3, start=0)
        for name in ("clicks", "audit"):
            _append_small_files(catalog.load_table(f"db.{name}"), 14, start=0)
        _wait(
            "queue the backfill tables",
            lambda: all(tables[n].state == TableState.PENDING for n in ("clicks", "audit")),
            engine,
        )
        # A failure whose message carries the catalog's secret and markup: shown masked and escaped.
        tables["orders"].last_error = f"commit failed: s3.secret-access-key={SECRET} <img src=x>"
        ticking = threading.Thread(target=engine.run, args=(stop, 0.2), name="ui-test-engine", daemon=True)
        ticking.start()
        with UiServer(UiSource(engine, redact, title="floe run")) as server:
            yield ServedFloe(engine, server.url, catalog)
    finally:
        stop.set()
        engine.close()
        catalog.engine.dispose()


def browser_missing() -> str:
    """Why no browser test can run here, or empty when Chromium and its driver are installed."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).exists()]
    if missing:
        return (
            f"{' and '.join(missing)} missing: `make host-env` installs Debian's chromium and chromium-driver"
        )
    return ""


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[WebDriver]:
    """A headless Chromium driven by Selenium through Debian's chromedriver, with the browser's
    console kept (`driver.get_log("browser")`)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
