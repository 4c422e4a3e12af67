"""The engine on the real stack: task service over HTTP, an in-process optimizer on Spark,
real tables. Ticks are driven by the test, so each table-runtime rule can be checked."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession
from test_cdc_positions import cdc_table, deletes_of, segments
from test_correctness import build_table, rows_at
from test_service_http import scrape
from v3_lineage import lineage

from floe.api.group import OptimizerGroup
from floe.api.models import OptimizedTable
from floe.local.reference_reader import ReferenceReader
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.registry import EngineEvent
from floe.optimizing.table_state import TableState
from floe.planning.files import FileKind
from floe.protocol.wire import CompleteRequest, PollRequest, RegisterRequest
from floe.rewrite.task import run_task
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe.tables.history import SUMMARY_PROCESS_ID
from floe.tables.scan import scan_table
from floe_optimizer.app import Optimizer

TOKEN = "engine-test-registration-token"


@dataclass
class Stack:
    service: TaskService
    server: TaskServiceServer
    engine: OptimizingEngine
    events: list[EngineEvent]
    optimizers: list[Optimizer]


@pytest.fixture
def stack() -> Iterator[Stack]:
    service = TaskService(clock=time.time, registration_token=TOKEN)
    server = TaskServiceServer(service)
    server.start()
    engine = OptimizingEngine(service, refresh_interval_s=0.2)
    events: list[EngineEvent] = []
    engine.subscribe(events.append)
    built = Stack(service, server, engine, events, [])
    yield built
    for optimizer in built.optimizers:
        optimizer.stop(grace_s=10)
    server.stop()
    engine.close()


def _group(name: str, threads: int = 2) -> OptimizerGroup:
    return OptimizerGroup.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizerGroup",
            "metadata": {"name": name},
            "spec": {"executors": 1, "executorCores": threads},
        }
    )


def _table(catalog: SqlCatalog, group: str, **spec: object) -> OptimizedTable:
    properties = {"type": "sql", **{k: str(v) for k, v in catalog.properties.items()}}
    return OptimizedTable.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": "t"},
            "spec": {
                "table": "db.t",
                "catalog": {"name": catalog.name, "properties": properties},
                "group": group,
                "targetSize": "16Ki",
                "maxTaskSize": "16Ki",
                "minPlanInterval": "0s",
                **spec,
            },
        }
    )


def _start_optimizer(stack: Stack, spark: SparkSession, group: str) -> None:
    optimizer = Optimizer(
        stack.server.url, group=group, threads=2, spark=spark, name=f"test-{group}", registration_token=TOKEN
    )
    optimizer.start()
    stack.optimizers.append(optimizer)


def _tick_until(stack: Stack, done: Callable[[], bool], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, [v for v in stack.engine.table_views()]
        stack.engine.tick()
        time.sleep(0.2)


def test_pending_without_optimizer_is_explained_then_served(
    stack: Stack, sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    build_table(sql_catalog, reference, "identity", evolve_schema=False)
    before = rows_at(reference, sql_catalog)
    stack.engine.apply_group(_group("g1"))
    runtime = stack.engine.apply_table(_table(sql_catalog, "g1"))

    _tick_until(
        stack, lambda: runtime.state == TableState.PENDING and "no ready optimizer" in runtime.pending_reason
    )
    assert any(e.reason == "NoOptimizer" for e in stack.events)
    assert stack.engine.stuck_tables() == {"default/t": "group 'g1' has no ready optimizer"}

    _start_optimizer(stack, spark, "g1")
    # Until the optimizer has registered the table still counts as stuck, so wait for the commit.
    _tick_until(stack, lambda: "committed" in runtime.last_result and stack.engine.converged())
    assert runtime.state == TableState.IDLE and "committed snapshot" in runtime.last_result
    assert {e.reason for e in stack.events} >= {"OptimizingStarted", "Committed"}
    assert rows_at(reference, sql_catalog) == before
    metrics = scrape(stack.server)
    commits = sum(e.reason == "Committed" for e in stack.events)
    assert metrics[("floe_commits_total", (("group", "g1"), ("result", "committed")))] == commits
    table = (("group", "g1"), ("table", "default/t"))
    assert metrics[("floe_table_state", (table[0], ("state", "IDLE"), table[1]))] == 1
    assert metrics[("floe_table_quota_occupation", table)] > 0  # its tasks ran within the hour
    assert metrics[("floe_table_running_tasks", table)] == 0
    assert metrics[("floe_group_optimizers", (("group", "g1"),))] == 1
    completed = metrics[("floe_tasks_completed_total", (("group", "g1"), ("outcome", "success")))]
    assert completed >= 1


def test_a_process_commits_as_its_last_result_is_accepted_without_another_round(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    now = 1_000_000.0  # frozen: nothing comes due by itself, and no round follows the results
    service = TaskService(clock=lambda: now, registration_token=TOKEN)
    engine = OptimizingEngine(service, clock=lambda: now)
    try:
        build_table(sql_catalog, reference, "unpartitioned", evolve_schema=False)
        before = rows_at(reference, sql_catalog)
        engine.apply_group(_group("g1"))
        hand = RegisterRequest(group="g1", threads=1, memory_bytes=0, name="by-hand")
        session = service.register(hand, TOKEN)
        runtime = engine.apply_table(_table(sql_catalog, "g1"))
        engine.tick()  # refreshed and planned
        process_id = runtime.process_id
        assert runtime.state.endswith("_OPTIMIZING") and process_id is not None

        tasks = 0
        while (assignment := service.poll(session.token, PollRequest(thread=0))) is not None:
            service.ack(session.token, assignment.attempt_id)
            result = run_task(assignment.spec)
            service.complete(session.token, assignment.attempt_id, CompleteRequest(result=result))
            tasks += 1

        deadline = time.monotonic() + 60
        while runtime.state != TableState.IDLE:
            assert time.monotonic() < deadline, f"no commit without a round: {runtime.state}"
            time.sleep(0.05)
        assert tasks > 0 and "committed snapshot" in runtime.last_result
        head = sql_catalog.load_table("db.t").current_snapshot()
        assert head is not None and head.summary is not None
        assert head.summary.get(SUMMARY_PROCESS_ID) == process_id
        assert rows_at(reference, sql_catalog) == before
    finally:
        engine.close()


def test_disabled_table_is_never_planned(
    stack: Stack, sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    build_table(sql_catalog, reference, "unpartitioned", evolve_schema=False)
    stack.engine.apply_group(_group("g1"))
    _start_optimizer(stack, spark, "g1")
    runtime = stack.engine.apply_table(_table(sql_catalog, "g1", enabled=False))
    snapshot = sql_catalog.load_table("db.t").current_snapshot()
    for _ in range(10):
        stack.engine.tick()
        time.sleep(0.1)
    assert runtime.state == TableState.DISABLED and stack.engine.converged()
    assert sql_catalog.load_table("db.t").current_snapshot() == snapshot

    stack.engine.apply_table(_table(sql_catalog, "g1", enabled=True))
    _tick_until(stack, lambda: "committed" in runtime.last_result and stack.engine.converged())


def test_min_plan_interval_holds_planning_back(
    stack: Stack, sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    build_table(sql_catalog, reference, "unpartitioned", evolve_schema=False)
    stack.engine.apply_group(_group("g1"))
    _start_optimizer(stack, spark, "g1")
    runtime = stack.engine.apply_table(_table(sql_catalog, "g1", minPlanInterval="1h"))
    runtime.last_plan_s = time.time()  # as if it had just planned
    for _ in range(10):
        stack.engine.tick()
        time.sleep(0.1)
    assert runtime.state == TableState.PENDING and runtime.process_id is None

    stack.engine.apply_table(_table(sql_catalog, "g1", minPlanInterval="0s"))
    _tick_until(stack, lambda: "committed" in runtime.last_result)


def test_table_moves_to_another_group(
    stack: Stack, sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    build_table(sql_catalog, reference, "bucket", evolve_schema=False)
    before = rows_at(reference, sql_catalog)
    stack.engine.apply_group(_group("idle-group"))  # no optimizer: the table would wait forever
    stack.engine.apply_group(_group("served"))
    _start_optimizer(stack, spark, "served")
    runtime = stack.engine.apply_table(_table(sql_catalog, "idle-group"))
    _tick_until(stack, lambda: runtime.state == TableState.PENDING and bool(runtime.pending_reason))

    stack.engine.apply_table(_table(sql_catalog, "served"))
    _tick_until(stack, lambda: "committed" in runtime.last_result and stack.engine.converged())
    assert "default/t" not in stack.service.group("idle-group").stats(time.time())
    assert "default/t" in stack.service.group("served").stats(time.time())
    assert rows_at(reference, sql_catalog) == before


def test_unreachable_catalog_is_reported_not_fatal(stack: Stack, sql_catalog: SqlCatalog) -> None:
    stack.engine.apply_group(_group("g1"))
    broken = _table(sql_catalog, "g1")
    broken = broken.model_copy(update={"spec": broken.spec.model_copy(update={"table": "db.missing"})})
    runtime = stack.engine.apply_table(broken)
    _tick_until(stack, lambda: bool(runtime.last_error))
    assert "table 'db.missing' not found" in runtime.last_error
    assert any(e.reason == "TableUnavailable" for e in stack.events)
    assert stack.engine.converged() and "default/t" in stack.engine.stuck_tables()


def test_cdc_segments_are_converted_through_the_task_service(
    stack: Stack, sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, _ = cdc_table(sql_catalog)
    start = scan_table(table).files
    before = rows_at(reference, sql_catalog)
    stack.engine.apply_group(_group("g1"))
    runtime = stack.engine.apply_table(_table(sql_catalog, "g1"))
    _start_optimizer(stack, spark, "g1")

    # The positions tasks' results pass the service's checks (read back from storage) and commit.
    _tick_until(stack, lambda: "committed" in runtime.last_result and stack.engine.converged())
    assert "position-delete files" in runtime.last_result, runtime.last_result
    assert not any(e.reason == "TaskResultRefused" for e in stack.events)
    assert rows_at(reference, sql_catalog) == before
    table.refresh()
    after = scan_table(table).files
    assert segments(after) == segments(start)
    assert deletes_of(after, FileKind.EQUALITY_DELETES) == []


def test_a_v3_table_through_the_task_service(stack: Stack, v3_table: SqlCatalog, spark: SparkSession) -> None:
    """Deletion vectors and row lineage travel in the task specs over HTTP to the optimizer
    and back: the table settles with Spark's rows and lineage, and no vector left."""
    before = lineage(spark, v3_table)
    stack.engine.apply_group(_group("g1"))
    _start_optimizer(stack, spark, "g1")
    runtime = stack.engine.apply_table(_table(v3_table, "g1", minor={"triggerFileCount": 2}))

    _tick_until(stack, lambda: "committed" in runtime.last_result and stack.engine.converged())

    assert runtime.refusal == "" and runtime.state == TableState.IDLE
    assert lineage(spark, v3_table) == before
    files = scan_table(v3_table.load_table("db.t")).files
    assert files.format_version == 3 and files.delete_files == ()
