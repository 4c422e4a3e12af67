"""The engine under faults, on the real stack: a REST catalog on S3 behind `FaultProxy`, the
task service over HTTP, an optimizer on local Spark, ticks driven by the test.

Each test breaks one thing at one step of a process (a forged completion, the catalog gone
while planning or committing, a written file deleted before the commit), then checks that
no row was lost or duplicated (Iceberg Java's reader, on the catalog directly), that no
process committed twice, that the user heard of it (Events, the table's state and error),
and that the process's uncommitted files are gone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

import pytest
from fault_proxy import COMMIT_PATH, FaultProxy, fault_proxy
from pyarrow.fs import FileSelector
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyspark.sql import SparkSession
from rest_s3 import RestS3Stack, rest_s3_stack, s3_filesystem
from test_correctness import LAYOUTS, MOR, SCHEMA, Writer

from floe.api.group import OptimizerGroup
from floe.api.models import OptimizedTable
from floe.controller.status import degraded_reason
from floe.local.reference_reader import ReferenceReader
from floe.maintenance.reachable import referenced_files
from floe.optimizing.commit_runner import CommitRunner
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.registry import EngineEvent
from floe.optimizing.table_state import TableRuntime, TableState
from floe.protocol.client import RequestFailed, TaskServiceClient
from floe.protocol.wire import CompleteRequest, RegisterRequest
from floe.rewrite.task import run_task
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe.tables.history import SUMMARY_PROCESS_ID
from floe_optimizer.app import Optimizer

CATALOG = "fault_engine"
GROUP = "g"
TABLE_ID = "default/t"
_names = count()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestS3Stack]:
    with rest_s3_stack("127.0.0.1", tmp_path_factory.mktemp("fault-engine")) as running:
        yield running


@dataclass
class Stack:
    data: RestS3Stack
    proxy: FaultProxy
    service: TaskService
    server: TaskServiceServer
    engine: OptimizingEngine
    committer: CommitRunner
    events: list[EngineEvent]
    optimizers: list[Optimizer]
    table_name: str = ""

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]

    def table(self) -> Table:
        """The table as the catalog holds it now, read directly (not through the proxy)."""
        return self.data.client(CATALOG).load_table(self.table_name)


@pytest.fixture
def stack(data: RestS3Stack, reference: ReferenceReader) -> Iterator[Stack]:
    reference.register_catalog(CATALOG, data.properties)
    with fault_proxy(data.catalog.uri) as proxy:
        service = TaskService(clock=time.time, heartbeat_interval_s=0.5)
        server = TaskServiceServer(service)
        server.start()
        # No refresh between the test's steps unless it asks: faults hit the step they aim at.
        committer = CommitRunner()
        engine = OptimizingEngine(service, refresh_interval_s=3600, committer=committer)
        events: list[EngineEvent] = []
        engine.subscribe(events.append)
        built = Stack(data, proxy, service, server, engine, committer, events, [])
        yield built
        for optimizer in built.optimizers:
            optimizer.stop(grace_s=10)
        server.stop()
        engine.close()


def _make_table(stack: Stack) -> Table:
    """Small files, equality deletes and re-inserts: a minor optimizing of two or more tasks."""
    catalog = stack.data.client(CATALOG)
    if ("db",) not in catalog.list_namespaces():
        catalog.create_namespace("db")
    stack.table_name = f"db.e{next(_names)}"
    table = catalog.create_table(stack.table_name, SCHEMA, partition_spec=LAYOUTS["identity"], properties=MOR)
    writer = Writer(table)
    for _ in range(14):
        writer.append(12)
    writer.upsert([3, 40, 100])
    return table


def _register(stack: Stack) -> TableRuntime:
    group = OptimizerGroup.model_validate(
        {"apiVersion": "floe.dev/v1alpha1", "kind": "OptimizerGroup", "metadata": {"name": GROUP}, "spec": {}}
    )
    stack.engine.apply_group(group)
    properties = {**stack.data.properties, "uri": stack.proxy.url}
    resource = OptimizedTable.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": "t"},
            "spec": {
                "table": stack.table_name,
                "catalog": {"name": CATALOG, "properties": properties},
                "group": GROUP,
                "targetSize": "16Ki",
                "maxTaskSize": "16Ki",
                "minPlanInterval": "0s",
                "execute": {"numRetries": 2},
            },
        }
    )
    return stack.engine.apply_table(resource)


def _start_optimizer(stack: Stack, spark: SparkSession) -> None:
    optimizer = Optimizer(
        stack.server.url, group=GROUP, threads=2, spark=spark, name="fault-test", poll_wait_s=1
    )
    optimizer.start()
    stack.optimizers.append(optimizer)
    _wait(lambda: stack.service.group(GROUP).threads == 2, "the optimizer registered")


def _wait(done: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def _tick_until(stack: Stack, done: Callable[[], bool], what: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}: {stack.engine.table_views()}"
        stack.engine.tick()
        time.sleep(0.2)


def _committed(runtime: TableRuntime) -> bool:
    return runtime.state == TableState.IDLE and "committed snapshot" in runtime.last_result


def _process_snapshots(table: Table) -> dict[str, int]:
    """Process id → how many snapshots carry it."""
    seen: dict[str, int] = {}
    for snapshot in table.metadata.snapshots:
        process = (snapshot.summary or {}).get(SUMMARY_PROCESS_ID) if snapshot.summary else None
        if process:
            seen[process] = seen.get(process, 0) + 1
    return seen


def _data_files(stack: Stack, table: Table) -> list[str]:
    """Every file stored under the table's data directory."""
    root = f"{table.metadata.location.removeprefix('s3://')}/data"
    infos = s3_filesystem(stack.data.moto.endpoint).get_file_info(FileSelector(root, recursive=True))
    return sorted(f"s3://{info.path}" for info in infos if info.is_file)


def _unreferenced_data_files(stack: Stack, table: Table) -> list[str]:
    """Files under the table's data directory that no snapshot references: leftovers."""
    referenced = referenced_files(table.io, table.snapshots(), live_only=False).content_files
    return sorted(set(_data_files(stack, table)) - set(referenced))


def _settle(stack: Stack, runtime: TableRuntime, reference: ReferenceReader, before: Any) -> Table:
    """Commit, then check: rows kept, one snapshot per process, no leftover files."""
    _tick_until(stack, lambda: _committed(runtime), "the table committed")
    table = stack.table()
    assert reference.rows(CATALOG, stack.table_name) == before
    assert all(n == 1 for n in _process_snapshots(table).values()), _process_snapshots(table)
    assert _unreferenced_data_files(stack, table) == []
    return table


def _run_to_the_commit(
    stack: Stack, reference: ReferenceReader, spark: SparkSession
) -> tuple[Any, Snapshot | None, TableRuntime, str, threading.Event]:
    """A new table, planned and its tasks all done, its commit held behind a gate on the commit
    thread (it starts as the last result is accepted): its rows at the start, its starting
    snapshot, its runtime, the process id and the gate, for the test to set once it set up its
    fault (and before its next tick, which waits for the commit thread)."""
    _make_table(stack)
    before = reference.rows(CATALOG, stack.table_name)
    start = stack.table().current_snapshot()
    runtime = _register(stack)
    _start_optimizer(stack, spark)
    gate = threading.Event()
    deadline = time.monotonic() + 180
    while runtime.process_id is None:
        assert time.monotonic() < deadline, "the table was never planned"
        time.sleep(0.2)
        stack.engine.tick()
    # At once, before its tasks (on Spark) can end: the commit queues behind the gate.
    stack.committer.submit(gate.wait)
    _wait(lambda: _tasks_done(stack), "every task succeeded")
    return before, start, runtime, runtime.process_id, gate


def _tasks_done(stack: Stack) -> bool:
    """Every task of the table's process succeeded; its commit has not taken the outcome yet."""
    stats = stack.service.group(GROUP).stats(time.time()).get(TABLE_ID)
    return stats is not None and stats.process_id is not None and stats.running == stats.planned == 0


def test_forged_completions_are_refused_and_the_process_commits_honest_results(
    stack: Stack, reference: ReferenceReader, spark: SparkSession
) -> None:
    _make_table(stack)
    before = reference.rows(CATALOG, stack.table_name)
    runtime = _register(stack)
    forger = TaskServiceClient(stack.server.url)
    session = forger.register(RegisterRequest(group=GROUP, threads=2, memory_bytes=0, name="forger"))
    _tick_until(stack, lambda: runtime.process_id is not None, "the table was planned")

    outside = f"{stack.data.bucket}/precious.parquet"
    fs = s3_filesystem(stack.data.moto.endpoint)
    with fs.open_output_stream(outside) as out:
        out.write(b"not floe's")
    forgeries = [
        lambda r: r.model_copy(update={"rows_read": r.rows_read + 1, "rows_deleted": r.rows_deleted + 1}),
        lambda r: r.model_copy(
            update={"files": [r.files[0].model_copy(update={"path": f"s3://{outside}"}), *r.files[1:]]}
        ),
    ]
    for thread, forge in enumerate(forgeries):
        assignment = forger.poll(session.token, thread, wait_s=5)
        assert assignment is not None
        forger.ack(session.token, assignment.attempt_id)
        honest = run_task(assignment.spec)
        with pytest.raises(RequestFailed, match="result_refused"):
            forger.complete(session.token, assignment.attempt_id, CompleteRequest(result=forge(honest)))
    forger.unregister(session.token)
    forger.close()

    _start_optimizer(stack, spark)
    table = _settle(stack, runtime, reference, before)

    refused = [e for e in stack.events if e.reason == "TaskResultRefused"]
    assert len(refused) == 2 and all(e.kind == "Warning" for e in refused)
    assert "rows read" in refused[0].message and "precious.parquet" in refused[1].message
    assert fs.get_file_info(outside).size == len(b"not floe's"), "a file outside the table was touched"
    assert len(_process_snapshots(table)) == 1


def test_a_catalog_gone_while_planning_leaves_the_table_pending_until_it_answers(
    stack: Stack, reference: ReferenceReader, spark: SparkSession
) -> None:
    _make_table(stack)
    before = reference.rows(CATALOG, stack.table_name)
    runtime = _register(stack)
    stack.engine.tick()  # evaluated: pending, but no optimizer yet to plan for
    assert runtime.state == TableState.PENDING
    # Planning takes a fresh refresh's load and plan, calling no catalog. The manifest applied
    # again makes the runtime forget that evaluation (`update_spec`): planning loads the table.
    _register(stack)
    _start_optimizer(stack, spark)

    stack.proxy.down()
    _tick_until(stack, lambda: "PlanningFailed" in stack.reasons(), "planning failed")

    assert runtime.state == TableState.PENDING and runtime.process_id is None
    assert runtime.last_error.startswith("planning failed") and degraded_reason(runtime) == "PlanningFailed"
    stack.proxy.up()
    _settle(stack, runtime, reference, before)
    assert runtime.last_error == "" and degraded_reason(runtime) == "Healthy"


def test_a_catalog_gone_at_commit_time_delays_the_commit_and_loses_nothing(
    stack: Stack, reference: ReferenceReader, spark: SparkSession
) -> None:
    before, start, runtime, process, gate = _run_to_the_commit(stack, reference, spark)

    stack.proxy.down()
    gate.set()
    stack.engine.tick()
    stack.engine.tick()

    assert runtime.state == TableState.COMMITTING and degraded_reason(runtime) == "CommitDelayed"
    assert stack.reasons().count("CommitDelayed") == 1
    assert stack.table().current_snapshot() == start
    stack.proxy.up()
    table = _settle(stack, runtime, reference, before)
    assert _process_snapshots(table) == {process: 1}


def test_a_written_file_deleted_before_the_commit_fails_the_process_cleanly_and_the_next_commits(
    stack: Stack, reference: ReferenceReader, spark: SparkSession
) -> None:
    before, start, runtime, first, gate = _run_to_the_commit(stack, reference, spark)
    written = [path for path in _data_files(stack, stack.table()) if f"/{first}-t" in path]
    assert written
    s3_filesystem(stack.data.moto.endpoint).delete_file(written[0].removeprefix("s3://"))
    gate.set()

    _tick_until(stack, lambda: "OptimizingFailed" in stack.reasons(), "the process failed")

    failure = next(e for e in stack.events if e.reason == "OptimizingFailed")
    assert "gone from storage" in failure.message
    assert stack.table().current_snapshot() == start
    assert reference.rows(CATALOG, stack.table_name) == before
    table = _settle(stack, runtime, reference, before)
    assert first not in _process_snapshots(table) and len(_process_snapshots(table)) == 1


@pytest.mark.filterwarnings("ignore:Merge on read is not yet supported")
def test_a_commit_that_landed_unseen_keeps_its_files_when_a_later_try_fails(
    stack: Stack, reference: ReferenceReader, spark: SparkSession
) -> None:
    before, start, runtime, process, gate = _run_to_the_commit(stack, reference, spark)
    assert start is not None
    stack.proxy.rule("POST", COMMIT_PATH, "drop_answer", down_after=True)
    gate.set()
    stack.engine.tick()  # the catalog applies the commit, its answer is lost, then it is gone

    assert runtime.state == TableState.COMMITTING and "CommitDelayed" in stack.reasons()
    table = stack.table()
    landed = [
        s for s in table.metadata.snapshots if s.summary and s.summary.get(SUMMARY_PROCESS_ID) == process
    ]
    assert landed, "the catalog applied the commit whose answer was lost"
    referenced = referenced_files(table.io, landed, live_only=False).content_files
    # Another engine rolls main back past it, then drops a partition the process rewrote:
    # floe's next try finds no snapshot of the process on main, and conflicts.
    written = next(path for path in referenced if f"/{process}-t" in path)
    partition = written.split("/cat=")[1].split("/")[0]
    table.manage_snapshots().rollback_to_snapshot(start.snapshot_id).commit()
    table.delete(f"cat == '{partition}'")
    stack.proxy.up()
    _tick_until(stack, lambda: "OptimizingFailed" in stack.reasons(), "the retried commit failed")

    failure = next(e for e in stack.events if e.reason == "OptimizingFailed")
    assert "was removed" in failure.message and "kept for orphan cleanup" in failure.message
    gone = sorted(set(referenced) - set(_data_files(stack, stack.table())))
    assert gone == [], "files the landed snapshot references were deleted"
    assert reference.rows(CATALOG, stack.table_name, landed[-1].snapshot_id) == before
