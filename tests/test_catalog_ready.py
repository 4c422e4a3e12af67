"""The CatalogReady condition: catalog Secrets that cannot be read, catalogs that do or do not answer.

No API server here (tests/k8s/test_controller_lifecycle.py runs the same on a real one): a fake
Kube answers Secret reads and records status patches, and the engine refreshes real SQLite
catalogs.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kubernetes.client.exceptions import ApiException
from pyiceberg.catalog.sql import SqlCatalog
from test_metadata_probe import rename_sqlite_table

from floe.api.group import OptimizerGroup
from floe.api.models import OptimizedTable
from floe.controller.secrets import (
    SECRET_NOT_FOUND,
    SECRET_UNREADABLE,
    CatalogProblem,
    CatalogProblems,
    CatalogSecretError,
    read_catalog_properties,
)
from floe.controller.status import (
    BACKSTOP_FLUSH_PERIOD_S,
    PATCH_CONCURRENCY,
    TableStatusFlusher,
    catalog_condition,
    table_status,
)
from floe.kit.redaction import Redactor
from floe.maintenance.job import MaintenanceJob
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.table_state import TableRuntime, TableState
from floe.service.task_service import TaskService

SECRET_VALUE = "p4ssw0rd-never-shown"


class FakeKube:
    """Answers ``read_secret`` from ``secrets`` (or raises ``errors``), records status patches."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.errors: dict[tuple[str, str], Exception] = {}
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    def read_secret(self, name: str, namespace: str) -> dict[str, str]:
        if (namespace, name) in self.errors:
            raise self.errors[(namespace, name)]
        if (namespace, name) not in self.secrets:
            raise ApiException(status=404, reason="Not Found")
        return self.secrets[(namespace, name)]

    def patch_status(self, plural: str, name: str, namespace: str, status: dict[str, Any]) -> None:
        self.patches.append((namespace, name, status))


def _problem(kube: FakeKube, name: str = "catalog", namespace: str = "ns") -> CatalogProblem:
    with pytest.raises(CatalogSecretError) as info:
        read_catalog_properties(kube, name, namespace)  # type: ignore[arg-type]
    return info.value.problem


def test_a_missing_secret_is_secret_not_found_naming_it() -> None:
    problem = _problem(FakeKube())
    assert problem == CatalogProblem(
        "catalog", SECRET_NOT_FOUND, "catalog Secret 'catalog' in namespace 'ns' not found"
    )


@pytest.mark.parametrize(("status", "reason"), [(403, "Forbidden"), (500, "Internal Server Error")])
def test_a_secret_the_api_refuses_is_secret_unreadable(status: int, reason: str) -> None:
    kube = FakeKube()
    kube.errors[("ns", "catalog")] = ApiException(status=status, reason=reason)
    problem = _problem(kube)
    assert problem.reason == SECRET_UNREADABLE
    assert (
        problem.message == f"catalog Secret 'catalog' in namespace 'ns' cannot be read: {reason} ({status})"
    )


def test_a_secret_that_is_not_text_is_unreadable_without_its_contents() -> None:
    """The real Kube.read_secret decodes; a value that is not UTF-8 is named by its key only."""
    from floe.controller.kube import Kube

    class Core:
        def read_namespaced_secret(self, name: str, namespace: str) -> Any:
            raw = SECRET_VALUE.encode() + b"\xff\xfe"
            return type("Secret", (), {"data": {"token": base64.b64encode(raw).decode()}})()

    kube = Kube.__new__(Kube)
    kube.core = Core()  # type: ignore[assignment]
    with pytest.raises(CatalogSecretError) as info:
        read_catalog_properties(kube, "catalog", "ns")
    problem = info.value.problem
    assert problem.reason == SECRET_UNREADABLE
    where = "catalog Secret 'catalog' in namespace 'ns'"
    assert problem.message == f"{where} cannot be read: the value of key 'token' is not UTF-8 text"
    assert SECRET_VALUE not in problem.message and "\\xff" not in problem.message


def test_catalog_problems_say_when_a_problem_is_new() -> None:
    problems = CatalogProblems()
    first = CatalogProblem("s", SECRET_NOT_FOUND, "gone")
    assert problems.record("ns/t", first) and not problems.record("ns/t", first)
    assert problems.record("ns/t", CatalogProblem("s", SECRET_UNREADABLE, "forbidden"))
    assert problems.tables() == ["ns/t"] and problems.clear("ns/t") is not None
    assert problems.get("ns/t") is None and problems.clear("ns/t") is None


# --------------------------------------------------------------------------------------------------
# The engine's view of the catalog


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[SqlCatalog]:
    catalog = SqlCatalog("ready", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    yield catalog
    catalog.engine.dispose()


@pytest.fixture
def engine() -> Iterator[OptimizingEngine]:
    engine = OptimizingEngine(TaskService(clock=time.time, registration_token="t"), refresh_interval_s=0.0)
    yield engine
    engine.close()


def _table(catalog: SqlCatalog, identifier: str = "db.t", **catalog_spec: Any) -> OptimizedTable:
    properties = {"type": "sql", **{k: str(v) for k, v in catalog.properties.items()}}
    return OptimizedTable.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {
                "table": identifier,
                "catalog": {"name": catalog.name, "properties": properties, **catalog_spec},
            },
        }
    )


def _condition(runtime: TableRuntime, problem: CatalogProblem | None = None) -> tuple[str, str, str]:
    found = catalog_condition(runtime, problem, redact=lambda text: text)
    return found["status"], found["reason"], found["message"]


def test_catalog_ready_follows_the_engine(engine: OptimizingEngine, catalog: SqlCatalog) -> None:
    runtime = engine.apply_table(_table(catalog, secretRef="catalog"))
    assert _condition(runtime) == ("Unknown", "NotChecked", "catalog 'ready' not contacted yet")
    engine.tick()
    assert _condition(runtime) == (
        "True",
        "CatalogAvailable",
        "catalog 'ready' answered, with the properties of Secret 'catalog'",
    )
    # A Secret problem wins over what the engine last saw (the engine keeps the old properties).
    problem = CatalogProblem(
        "catalog", SECRET_NOT_FOUND, "catalog Secret 'catalog' in namespace 'ns' not found"
    )
    assert _condition(runtime, problem) == ("False", SECRET_NOT_FOUND, problem.message)


def test_a_catalog_that_does_not_answer_is_not_ready(
    engine: OptimizingEngine, catalog: SqlCatalog, tmp_path: Path
) -> None:
    resource = _table(catalog)
    good = resource.spec.catalog.properties
    broken = {**good, "uri": f"sqlite:///{tmp_path / 'missing' / 'catalog.db'}"}
    spec = resource.spec.model_copy(
        update={"catalog": resource.spec.catalog.model_copy(update={"properties": broken})}
    )
    runtime = engine.apply_table(resource.model_copy(update={"spec": spec}))
    engine.tick()
    status, reason, message = _condition(runtime)
    assert (status, reason) == ("False", "CatalogUnavailable") and "catalog 'ready' is unreachable" in message
    # Fixed properties: not contacted yet, then ready, and no longer Degraded.
    runtime = engine.apply_table(resource)
    assert _condition(runtime)[:2] == ("Unknown", "NotChecked")
    engine.tick()
    assert _condition(runtime)[:2] == ("True", "CatalogAvailable") and runtime.last_error == ""


def test_a_missing_table_is_degraded_but_its_catalog_answered(
    engine: OptimizingEngine, catalog: SqlCatalog
) -> None:
    runtime = engine.apply_table(_table(catalog, identifier="db.missing"))
    engine.tick()
    assert _condition(runtime)[:2] == ("True", "CatalogAvailable")
    conditions = {c["type"]: c for c in table_status(runtime, 0.0, redact=lambda text: text)["conditions"]}
    assert (
        conditions["Degraded"]["status"] == "True" and conditions["Degraded"]["reason"] == "TableUnavailable"
    )


def test_a_disabled_table_never_contacts_its_catalog(engine: OptimizingEngine, catalog: SqlCatalog) -> None:
    resource = _table(catalog)
    runtime = engine.apply_table(
        resource.model_copy(update={"spec": resource.spec.model_copy(update={"enabled": False})})
    )
    engine.tick()
    assert _condition(runtime) == ("Unknown", "Disabled", "the catalog of a disabled table is not contacted")


def test_recovering_on_the_same_snapshot_clears_the_error(
    engine: OptimizingEngine, catalog: SqlCatalog, tmp_path: Path
) -> None:
    """A catalog that fails and then answers with the same snapshot leaves the table healthy again
    (the last evaluation is forgotten on failure, so the table is evaluated again)."""
    runtime = engine.apply_table(_table(catalog))
    engine.tick()
    assert runtime.evaluated_snapshot_id is not None and runtime.last_error == ""
    rename_sqlite_table(tmp_path / "catalog.db", "iceberg_tables", "away")
    engine.tick()  # the sweep's probe fails: its table is checked on its own from the next round
    engine.tick()
    assert runtime.catalog_error and runtime.evaluated_snapshot_id is None
    rename_sqlite_table(tmp_path / "catalog.db", "away", "iceberg_tables")
    engine.tick()
    assert runtime.last_error == "" and runtime.catalog_error == ""
    assert runtime.evaluated_snapshot_id == catalog.load_table("db.t").metadata.current_snapshot_id


# --------------------------------------------------------------------------------------------------
# The status flush writes tables the engine does not know


def test_a_table_waiting_for_its_secret_gets_a_status(engine: OptimizingEngine, catalog: SqlCatalog) -> None:
    kube, problems = FakeKube(), CatalogProblems()
    flusher = TableStatusFlusher(kube, engine, lambda text: text, time.time, problems)  # type: ignore[arg-type]
    problem = CatalogProblem(
        "catalog", SECRET_NOT_FOUND, "catalog Secret 'catalog' in namespace 'ns' not found"
    )
    problems.record("ns/waiting", problem)
    engine.apply_table(_table(catalog))
    assert flusher.flush(only={"ns/waiting"}) == 1
    namespace, name, status = kube.patches[-1]
    assert (namespace, name) == ("ns", "waiting") and set(status) == {"conditions"}
    conditions = {c["type"]: c for c in status["conditions"]}
    for type_ in ("CatalogReady", "Degraded"):
        expected = "False" if type_ == "CatalogReady" else "True"
        assert conditions[type_]["status"] == expected
        assert (
            conditions[type_]["reason"] == SECRET_NOT_FOUND
            and conditions[type_]["message"] == problem.message
        )
        assert conditions[type_]["lastTransitionTime"]
    assert flusher.flush(only={"ns/waiting"}) == 0  # unchanged: not sent again
    assert flusher.flush() == 1 and kube.patches[-1][1] == "t"  # the engine's table, with CatalogReady
    assert {c["type"] for c in kube.patches[-1][2]["conditions"]} >= {"CatalogReady", "Degraded"}
    problems.clear("ns/waiting")
    flusher.forget("ns/waiting")
    assert flusher.flush() == 0


def test_status_writes_are_rate_limited_and_every_table_gets_its_turn(engine: OptimizingEngine) -> None:
    """Thousands of tables changing at once are written at the configured rate, not in one burst;
    those left over go first next time; a handler's flush of one table is never held back."""
    kube, problems, clock = FakeKube(), CatalogProblems(), [1000.0]
    flusher = TableStatusFlusher(
        kube,  # type: ignore[arg-type]
        engine,
        lambda text: text,
        lambda: clock[0],
        problems,
        max_writes_per_s=2.0,
        burst_s=5.0,
    )
    problem = CatalogProblem(
        "catalog", SECRET_NOT_FOUND, "catalog Secret 'catalog' in namespace 'ns' not found"
    )
    tables = [f"ns/t{index:02d}" for index in range(25)]
    for table_id in tables:
        problems.record(table_id, problem)
    assert flusher.flush() == 10  # the bucket holds 5 s at 2 writes/s
    assert flusher.flush() == 0  # none left until time passes
    clock[0] += 2.0
    assert flusher.flush() == 4
    problems.record("ns/t00", CatalogProblem("other", SECRET_NOT_FOUND, "catalog Secret 'other' not found"))
    assert flusher.flush(only={"ns/t00"}) == 1  # at once, whatever the budget
    clock[0] += 10.0
    assert flusher.flush() == 10
    clock[0] += 10.0
    assert flusher.flush() == 1
    written = [f"{namespace}/{name}" for namespace, name, _ in kube.patches]
    assert sorted(set(written)) == tables and len(written) == 26
    clock[0] += 10.0
    assert flusher.flush() == 0  # nothing changed


def test_without_a_rate_every_changed_table_is_written_at_once(engine: OptimizingEngine) -> None:
    kube, problems = FakeKube(), CatalogProblems()
    flusher = TableStatusFlusher(kube, engine, lambda text: text, time.time, problems)  # type: ignore[arg-type]
    problem = CatalogProblem(
        "catalog", SECRET_NOT_FOUND, "catalog Secret 'catalog' in namespace 'ns' not found"
    )
    for index in range(300):
        problems.record(f"ns/t{index:03d}", problem)
    assert flusher.flush() == 300


def test_a_flush_skips_unchanged_tables_and_writes_each_kind_of_change(
    engine: OptimizingEngine, catalog: SqlCatalog
) -> None:
    """An idle table's status is not computed again (what it is made of is compared first); each
    thing it is made of still gets written when it changes."""
    kube, redactor, settings = FakeKube(), Redactor(), {}  # type: ignore[var-annotated]
    # The flush's clock stands still: only its first flush looks at every table.
    flusher = TableStatusFlusher(kube, engine, redactor, lambda: 1000.0, CatalogProblems(), settings)  # type: ignore[arg-type]
    runtime = _converged(engine, catalog)
    assert flusher.flush() == 1 and flusher.flush() == 0

    def last_patch() -> dict[str, Any]:
        return kube.patches[-1][2]

    # A maintenance job failing, with a credential in its message the redaction learns later.
    runtime.on_maintenance_started(MaintenanceJob.EXPIRE)
    runtime.on_maintenance_failed(MaintenanceJob.EXPIRE, f"denied for key {SECRET_VALUE}", time.time())
    assert flusher.flush() == 0  # nothing told the flush: the engine's touch at a job's end does
    flusher.look_at(["ns/t"])
    assert flusher.flush() == 1 and SECRET_VALUE in last_patch()["maintenance"]["expire"]["lastResult"]
    redactor.add({"s3.secret-access-key": SECRET_VALUE})
    assert flusher.flush() == 1 and SECRET_VALUE not in str(last_patch())
    # Settings resolved again (a group's defaults edited).
    settings["ns/t"] = {"effectiveSpec": {"quota": 2.0}, "specSources": {"quota": "OptimizerGroup/g"}}
    flusher.look_at(["ns/t"])  # as the controller does when it resolves them
    assert flusher.flush() == 1 and last_patch()["specSources"] == {"quota": "OptimizerGroup/g"}
    # A new spec (the catalog's Secret named now): the CatalogReady message says so.
    engine.apply_table(_table(catalog, secretRef="ready-catalog"))
    engine.tick()
    assert flusher.flush() == 1
    ready = {c["type"]: c for c in last_patch()["conditions"]}["CatalogReady"]
    assert "ready-catalog" in ready["message"]
    assert flusher.flush() == 0


def _converged(engine: OptimizingEngine, catalog: SqlCatalog) -> TableRuntime:
    """The table ``ns/t`` applied, read and through its first maintenance runs."""
    runtime = engine.apply_table(_table(catalog))
    deadline = time.monotonic() + 60
    engine.tick()
    while not engine.converged():  # its first maintenance runs, one job after the other
        assert time.monotonic() < deadline
        time.sleep(0.05)
        engine.tick()
    return runtime


def test_a_periodic_flush_looks_at_the_tables_the_engine_looked_at_and_at_all_once_a_minute(
    engine: OptimizingEngine, catalog: SqlCatalog
) -> None:
    """At 10,000 idle tables a flush every 5 s must not compare every table: it looks at those the
    engine's rounds looked at or something touched, and at each table once a minute, a backstop
    for a change nothing told the engine of (from the second minute: the first flush looked at
    every table)."""
    kube, clock = FakeKube(), [1000.0]
    flusher = TableStatusFlusher(kube, engine, lambda text: text, lambda: clock[0])  # type: ignore[arg-type]
    runtime = _converged(engine, catalog)
    assert flusher.flush() == 1 and flusher.flush() == 0
    runtime.last_result = "changed behind the engine's back"
    clock[0] += BACKSTOP_FLUSH_PERIOD_S
    assert flusher.flush() == 0  # the first minute's pass ends empty, the pass of every table starts
    clock[0] += BACKSTOP_FLUSH_PERIOD_S - 1
    assert flusher.flush() == 0
    clock[0] += 1
    assert flusher.flush() == 1 and kube.patches[-1][2]["lastResult"] == "changed behind the engine's back"
    runtime.last_result = "changed again behind its back"
    clock[0] += BACKSTOP_FLUSH_PERIOD_S - 1
    assert flusher.flush() == 0
    clock[0] += 1
    assert flusher.flush() == 1 and kube.patches[-1][2]["lastResult"] == "changed again behind its back"
    runtime.last_result = "changed, and the engine told"
    assert engine.table_changed("db.t") == ["ns/t"]  # a change notice touches the table
    assert flusher.flush() == 1 and kube.patches[-1][2]["lastResult"] == "changed, and the engine told"


def test_a_flush_asks_what_a_table_waits_for_only_when_that_may_have_changed(
    engine: OptimizingEngine, catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle catalog's probe has the engine look at every table every few seconds: a table that is
    not pending and is made of what it was made of waits for what it waited for, so the flush does
    not ask again; a pending table's wait (its place in its group's queue) is asked every time."""
    kube = FakeKube()
    flusher = TableStatusFlusher(kube, engine, lambda text: text, lambda: 1000.0)  # type: ignore[arg-type]
    runtime = _converged(engine, catalog)
    asked: list[list[str]] = []
    waits = engine.waits

    def counted(occupations: Any, only: Any = None) -> Any:
        asked.append(sorted(only or []))
        return waits(occupations, only)

    monkeypatch.setattr(engine, "waits", counted)
    assert flusher.flush() == 1 and asked == [["ns/t"]]
    assert kube.patches[-1][2]["waiting"]["reason"] == "NothingDue"
    flusher.look_at(["ns/t"])
    assert flusher.flush() == 0 and asked[-1] == []
    runtime.state, runtime.pending_reason = TableState.PENDING, "minor optimizing is due"
    for patches in (1, 0):  # the wait is asked again; written once, as it is the same
        flusher.look_at(["ns/t"])
        assert flusher.flush() == patches and asked[-1] == ["ns/t"]
        assert kube.patches[-1][2]["waiting"]["reason"] == "GroupMissing"
    runtime.state, runtime.refusal = TableState.IDLE, "a format floe does not write"
    flusher.look_at(["ns/t"])
    assert flusher.flush() == 1 and asked[-1] == ["ns/t"]
    assert kube.patches[-1][2]["waiting"]["reason"] == "Refused"


def test_a_secret_readable_again_is_shown_at_the_next_flush(
    engine: OptimizingEngine, catalog: SqlCatalog
) -> None:
    """A table the engine has keeps running while its Secret cannot be read; once it is read
    again, the next flush says so, though nothing in the engine changed."""
    kube, problems = FakeKube(), CatalogProblems()
    flusher = TableStatusFlusher(kube, engine, lambda text: text, lambda: 1000.0, problems)  # type: ignore[arg-type]
    _converged(engine, catalog)
    assert flusher.flush() == 1

    def ready() -> str:
        return str({c["type"]: c for c in kube.patches[-1][2]["conditions"]}["CatalogReady"]["status"])

    problems.record("ns/t", CatalogProblem("catalog", SECRET_NOT_FOUND, "catalog Secret 'catalog' not found"))
    assert flusher.flush() == 1 and ready() == "False"
    problems.clear("ns/t")
    assert flusher.flush() == 1 and ready() == "True"
    assert flusher.flush() == 0


def test_a_tables_quota_occupation_is_written_as_it_falls_to_zero(catalog: SqlCatalog) -> None:
    """Occupation changes with time alone, with nothing looking at the table: the tables with
    task time in the window are looked at each flush, and once more when it has left it."""
    clock = [10_000.0]
    engine = OptimizingEngine(
        TaskService(clock=lambda: clock[0], registration_token="t"),
        clock=lambda: clock[0],
        refresh_interval_s=0.0,
    )
    try:
        group = {"apiVersion": "floe.dev/v1alpha1", "kind": "OptimizerGroup", "metadata": {"name": "default"}}
        engine.apply_group(OptimizerGroup.model_validate(group))
        engine.apply_table(_table(catalog))
        scheduler = engine.service.group(engine.group_key("default"))
        scheduler.threads = 1
        scheduler.start_maintenance("ns/t", "run-1", clock[0])
        clock[0] += 1800
        scheduler.end_maintenance("run-1", clock[0])
        kube = FakeKube()
        flusher = TableStatusFlusher(kube, engine, lambda text: text, lambda: 1000.0)  # type: ignore[arg-type]

        def occupation() -> float:
            return float(kube.patches[-1][2]["quotaOccupation"])

        assert flusher.flush() == 1 and occupation() == 0.5  # half an hour of one thread's hour
        clock[0] += 2400
        assert flusher.flush() == 1 and occupation() == pytest.approx(1200 / 3600, abs=1e-4)
        clock[0] += 3600
        assert flusher.flush() == 1 and occupation() == 0.0
        assert flusher.flush() == 0
    finally:
        engine.close()


class SlowKube(FakeKube):
    """A FakeKube whose status patches wait on the API server, counting how many are in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()

    def patch_status(self, plural: str, name: str, namespace: str, status: dict[str, Any]) -> None:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.02)
        with self._lock:
            self.in_flight -= 1
        if name == "t013":
            raise ApiException(status=404, reason="Not Found")
        super().patch_status(plural, name, namespace, status)


def test_a_flush_sends_its_patches_concurrently_and_retries_only_those_refused(
    engine: OptimizingEngine,
) -> None:
    """A flush's patches go out a few at a time (an API server's round trip each); one the API
    server refused is not remembered as written, so the next flush sends it again."""
    kube, problems = SlowKube(), CatalogProblems()
    flusher = TableStatusFlusher(kube, engine, lambda text: text, time.time, problems)  # type: ignore[arg-type]
    problem = CatalogProblem("catalog", SECRET_NOT_FOUND, "catalog Secret 'catalog' not found")
    for index in range(40):
        problems.record(f"ns/t{index:03d}", problem)
    try:
        assert flusher.flush() == 39
        assert 1 < kube.most_in_flight <= PATCH_CONCURRENCY
        assert len({name for _, name, _ in kube.patches}) == 39
        assert flusher.flush() == 0 and flusher.patches == 39  # t013 was tried again, and refused again
    finally:
        flusher.close()
