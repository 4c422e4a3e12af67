"""The optimizer application against the real task service over HTTP, with real Spark and tables.

Processes are planned on real Iceberg tables (see test_correctness), queued in the
service's group, run by in-process `Optimizer`s on conftest's Spark session, and
committed; the reference reader checks that the table's rows never change.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession
from synthetic import result
from test_correctness import CONFIG, build_table, rows_at

from floe.commit.rewrite import commit_rewrite
from floe.local.optimize import plan_table
from floe.local.reference_reader import ReferenceReader
from floe.optimizing.commit_request import commit_request
from floe.optimizing.specs import PlannedProcess, build_process
from floe.planning.plan import OptimizingType
from floe.protocol.assignment import TaskAssignment
from floe.protocol.rewrite_task import InputDataFile, RewriteTaskSpec
from floe.protocol.wire import PollRequest
from floe.scheduling.group_scheduler import GroupScheduler
from floe.scheduling.records import ProcessOutcome
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe_optimizer.app import Optimizer
from floe_optimizer.driver import ExecutorScaler
from floe_optimizer.runner import SparkTaskRunner, TaskRunner
from floe_optimizer.spark_runner import TaskOutcome

GROUP = "g"
TABLE_ID = "ns/t"
HEARTBEAT_TIMEOUT_S = 1.0
OPTIMIZER_BIN = Path(sys.executable).with_name("floe-optimizer")


class GatedRunner:
    """The Spark runner, holding each task at a gate so a test can act while it is "running"."""

    def __init__(self, spark: SparkSession) -> None:
        self.inner = SparkTaskRunner(spark)
        self.started = threading.Event()
        self.gate = threading.Event()
        self.cancelled = False
        self.outcomes: list[TaskOutcome] = []

    def run(self, spec: RewriteTaskSpec) -> TaskOutcome:
        self.started.set()
        self.gate.wait()
        if self.cancelled:
            return TaskOutcome(spec.task_id, None, "cancelled")
        outcome = self.inner.run(spec)
        self.outcomes.append(outcome)
        return outcome

    def cancel(self) -> None:
        self.cancelled = True
        self.gate.set()
        self.inner.cancel()


@pytest.fixture
def service() -> TaskService:
    service = TaskService(clock=time.time, heartbeat_interval_s=0.2)
    service.add_group(GROUP, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, ack_timeout_s=30, execute_timeout_s=600)
    service.group(GROUP).upsert_table(TABLE_ID, quota=1.0, last_optimized_s=None)
    return service


@pytest.fixture
def server(service: TaskService) -> Iterator[TaskServiceServer]:
    with TaskServiceServer(service, keeper_interval_s=0.1) as server:
        yield server


@pytest.fixture
def optimizers() -> Iterator[Callable[..., Optimizer]]:
    """Makes started optimizers, and kills whatever a test left running."""
    made: list[Optimizer] = []

    def make(
        url: str, threads: int, spark: SparkSession | None = None, runner: TaskRunner | None = None
    ) -> Optimizer:
        optimizer = Optimizer(
            url, GROUP, threads, spark=spark, runner=runner, poll_wait_s=2.0, name=f"test-{len(made)}"
        )
        made.append(optimizer)
        optimizer.start()
        return optimizer

    yield make
    for optimizer in made:
        optimizer.kill()
        optimizer.join(30)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


def queue_process(table: Table, service: TaskService) -> PlannedProcess:
    scanned, plan = plan_table(table, CONFIG, forced=OptimizingType.MINOR)
    process = build_process(table, "db.t", scanned, plan, CONFIG)
    assert len(process.specs) >= 2, "the tests need a process of several tasks"
    service.group(GROUP).add_process(
        TABLE_ID, process.process_id, process.specs, max_retries=0, allow_partial_commit=False
    )
    return process


def finished(scheduler: GroupScheduler, timeout: float = 120.0) -> ProcessOutcome:
    """The outcome of the one process queued, once it finished."""
    deadline = time.monotonic() + timeout
    while not (outcomes := scheduler.take_finished()):
        assert time.monotonic() < deadline, "timed out waiting for the process to finish"
        time.sleep(0.05)
    [outcome] = outcomes
    return outcome


def local_path(uri: str) -> Path:
    return Path(urlsplit(uri).path) if uri.startswith("file:") else Path(uri)


def synthetic_spec(task_id: str, data_files: list[InputDataFile] | None = None) -> RewriteTaskSpec:
    return RewriteTaskSpec(
        task_id=task_id,
        io_properties={},
        table_schema_json='{"type":"struct","schema-id":0,"fields":[]}',
        partition_spec_json='{"spec-id":0,"fields":[]}',
        output_dir="file:///nowhere",
        data_files=data_files or [],
        target_file_size_bytes=1024,
        delete_memory_limit_bytes=1024 * 1024,
        file_name_prefix=task_id,
    )


def commit_and_check_rows(
    table: Table,
    process: PlannedProcess,
    outcome: ProcessOutcome,
    reference: ReferenceReader,
    catalog: SqlCatalog,
) -> None:
    before = rows_at(reference, catalog, process.starting_snapshot_id)
    commit = commit_rewrite(table, commit_request(process, outcome.results, outcome.failures, False))
    assert commit.added_data_files > 0 and commit.removed_data_files > 0
    assert rows_at(reference, catalog) == before


def test_an_optimizer_runs_a_process_whose_results_commit(
    server: TaskServiceServer,
    service: TaskService,
    optimizers: Callable[..., Optimizer],
    spark: SparkSession,
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
) -> None:
    table, _ = build_table(sql_catalog, reference, "identity", evolve_schema=False)
    process = queue_process(table, service)

    optimizer = optimizers(server.url, threads=2, spark=spark)
    outcome = finished(service.group(GROUP))

    assert outcome.succeeded, outcome.failures
    assert sorted(r.task_id for r in outcome.results) == sorted(s.task_id for s in process.specs)
    written = [f.path for r in outcome.results for f in r.files]
    assert written and all(local_path(path).is_file() for path in written)
    optimizer.stop(grace_s=30)
    assert optimizer.join(30)
    assert service.optimizers(GROUP) == []
    commit_and_check_rows(table, process, outcome, reference, sql_catalog)


def test_stopping_mid_task_finishes_and_completes_it_then_unregisters(
    server: TaskServiceServer,
    service: TaskService,
    optimizers: Callable[..., Optimizer],
    spark: SparkSession,
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
) -> None:
    table, _ = build_table(sql_catalog, reference, "identity", evolve_schema=False)
    process = queue_process(table, service)
    scheduler = service.group(GROUP)
    runner = GatedRunner(spark)
    optimizer = optimizers(server.url, threads=1, runner=runner)
    assert runner.started.wait(60)

    stopper = threading.Thread(target=optimizer.stop, kwargs={"grace_s": 120})
    stopper.start()
    time.sleep(0.5)
    assert stopper.is_alive(), "stop() returned while a task was still running"
    assert [o.optimizer_id for o in service.optimizers(GROUP)] == [optimizer.optimizer_id]
    runner.gate.set()
    stopper.join(60)

    assert not stopper.is_alive() and optimizer.join(30)
    stats = scheduler.stats(time.time())[TABLE_ID]
    assert (stats.succeeded, stats.running, stats.planned) == (1, 0, len(process.specs) - 1)
    assert service.optimizers(GROUP) == []
    [outcome] = runner.outcomes
    assert outcome.result is not None and outcome.result.files
    assert all(local_path(f.path).is_file() for f in outcome.result.files)


def test_a_task_still_running_after_the_grace_period_goes_back_without_using_a_retry(
    server: TaskServiceServer, service: TaskService, optimizers: Callable[..., Optimizer], spark: SparkSession
) -> None:
    scheduler = service.group(GROUP)
    scheduler.add_process(TABLE_ID, "p", [synthetic_spec("p-t0")], max_retries=0, allow_partial_commit=False)
    runner = GatedRunner(spark)
    optimizer = optimizers(server.url, threads=1, runner=runner)
    assert runner.started.wait(60)

    optimizer.stop(grace_s=0.2)

    assert optimizer.join(30)
    assert runner.cancelled and runner.outcomes == []
    assert service.optimizers(GROUP) == []
    stats = scheduler.stats(time.time())[TABLE_ID]
    assert (stats.planned, stats.running, stats.failed, stats.retries) == (1, 0, 0, 0)


class LateStartRunner:
    """A thread that was between its ack and its job's start when the cancel came: its job
    starts after that cancel, and then runs (writing files) until it is cancelled."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.ended = threading.Event()
        self._cond = threading.Condition()
        self._cancels = 0

    def run(self, spec: RewriteTaskSpec) -> TaskOutcome:
        self.started.set()
        with self._cond:
            self._cond.wait_for(lambda: self._cancels >= 1)
            job_started_after = self._cancels
            self._cond.wait_for(lambda: self._cancels > job_started_after, timeout=30)
        self.ended.set()
        return TaskOutcome(spec.task_id, None, "cancelled")

    def cancel(self) -> None:
        with self._cond:
            self._cancels += 1
            self._cond.notify_all()


def test_a_stop_past_its_grace_period_cancels_a_job_that_started_after_its_first_cancel(
    server: TaskServiceServer, service: TaskService, optimizers: Callable[..., Optimizer]
) -> None:
    # `floe run` deletes an interrupted process's files once the optimizer stopped: a job
    # still running then would write files after their deletion.
    service.group(GROUP).add_process(
        TABLE_ID, "p", [synthetic_spec("p-t0")], max_retries=0, allow_partial_commit=False
    )
    runner = LateStartRunner()
    optimizer = optimizers(server.url, threads=1, runner=runner)
    assert runner.started.wait(60)

    optimizer.stop(grace_s=0.2)

    assert runner.ended.is_set(), "stop() returned while a cancelled task still ran"
    assert optimizer.join(30)


def test_a_killed_optimizers_task_goes_back_and_a_new_optimizer_completes_it(
    server: TaskServiceServer,
    service: TaskService,
    optimizers: Callable[..., Optimizer],
    spark: SparkSession,
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
) -> None:
    table, _ = build_table(sql_catalog, reference, "identity", evolve_schema=False)
    process = queue_process(table, service)
    scheduler = service.group(GROUP)
    runner = GatedRunner(spark)
    doomed = optimizers(server.url, threads=1, runner=runner)
    assert runner.started.wait(60)
    assert scheduler.stats(time.time())[TABLE_ID].running == 1

    doomed.kill()

    assert doomed.join(30)
    # Nobody told the service: it only notices the silence after the heartbeat timeout.
    assert [o.optimizer_id for o in service.optimizers(GROUP)] == [doomed.optimizer_id]
    wait_until(lambda: service.optimizers(GROUP) == [], "the silent optimizer was dropped", timeout=30)
    stats = scheduler.stats(time.time())[TABLE_ID]
    assert (stats.running, stats.planned, stats.retries) == (0, len(process.specs), 0)

    optimizers(server.url, threads=2, spark=spark)
    outcome = finished(scheduler)

    assert outcome.succeeded, outcome.failures
    assert runner.outcomes == [], "the killed optimizer ran its task anyway"
    commit_and_check_rows(table, process, outcome, reference, sql_catalog)


def test_a_refused_completion_deletes_the_files_the_task_wrote(
    server: TaskServiceServer,
    service: TaskService,
    optimizers: Callable[..., Optimizer],
    spark: SparkSession,
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
) -> None:
    table, _ = build_table(sql_catalog, reference, "identity", evolve_schema=False)
    process = queue_process(table, service)
    runner = GatedRunner(spark)
    optimizer = optimizers(server.url, threads=1, runner=runner)
    assert runner.started.wait(60)

    service.group(GROUP).cancel_process(process.process_id, time.time())  # the attempt is now stale
    runner.gate.set()
    optimizer.stop(grace_s=120)

    [outcome] = runner.outcomes
    assert outcome.result is not None and outcome.result.files
    assert not any(local_path(f.path).exists() for f in outcome.result.files)


def test_a_failing_task_is_completed_with_its_error(
    server: TaskServiceServer,
    service: TaskService,
    optimizers: Callable[..., Optimizer],
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    missing = tmp_path / "missing.parquet"
    spec = synthetic_spec(
        "broken-t0", [InputDataFile(path=str(missing), record_count=1, size_bytes=10, data_sequence_number=1)]
    )
    scheduler = service.group(GROUP)
    scheduler.add_process(TABLE_ID, "broken", [spec], max_retries=0, allow_partial_commit=False)

    optimizers(server.url, threads=1, spark=spark)
    outcome = finished(scheduler)

    assert not outcome.succeeded
    assert "missing.parquet" in outcome.failures["broken-t0"]


def test_an_optimizer_outlives_a_service_restart_and_registers_again(
    optimizers: Callable[..., Optimizer], spark: SparkSession
) -> None:
    def fresh_service() -> TaskService:
        service = TaskService(clock=time.time, heartbeat_interval_s=0.1)
        service.add_group(GROUP)
        return service

    before = fresh_service()
    with TaskServiceServer(before) as server:
        url, port = server.url, server.port
        optimizer = optimizers(url, threads=1, spark=spark)
        wait_until(lambda: optimizer.optimizer_id is not None, "it registered", timeout=30)
        first = optimizer.optimizer_id

    after = fresh_service()  # knows nothing of the old token: calls with it are 401
    with TaskServiceServer(after, port=port):
        wait_until(lambda: len(after.optimizers(GROUP)) == 1, "it registered again", timeout=60)
        [again] = after.optimizers(GROUP)
        assert again.optimizer_id == optimizer.optimizer_id != first
        optimizer.stop(grace_s=10)
        assert after.optimizers(GROUP) == []


def test_floe_optimizer_help() -> None:
    done = subprocess.run([OPTIMIZER_BIN, "--help"], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0
    for option in ("--service", "--group", "--threads", "--memory", "--master", "--grace-period"):
        assert option in done.stdout


def test_floe_optimizer_keeps_retrying_an_unreachable_service_and_exits_143_on_sigterm() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    process = subprocess.Popen(
        [
            OPTIMIZER_BIN,
            "--service",
            f"http://127.0.0.1:{closed_port}",
            "--group",
            GROUP,
            "--threads",
            "1",
            "--master",
            "local[1]",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stderr or ()], daemon=True)
    reader.start()
    try:
        seen = ""
        deadline = time.monotonic() + 180
        while "task service unreachable" not in seen:
            assert process.poll() is None, f"floe-optimizer exited early:\n{seen}"
            try:
                seen += lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no 'unreachable' message:\n{seen}") from None
        time.sleep(2)
        assert process.poll() is None, f"floe-optimizer gave up:\n{seen}"

        process.send_signal(signal.SIGTERM)

        assert process.wait(timeout=60) == 143
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


class CountingService(TaskService):
    """A task service that counts the polls it answers."""

    def __init__(self) -> None:
        super().__init__(clock=time.time, heartbeat_interval_s=0.2)
        self.polls = 0

    def poll(self, token: str, request: PollRequest) -> TaskAssignment | None:
        self.polls += 1
        return super().poll(token, request)


class InstantRunner:
    """Succeeds at once, writing nothing."""

    def run(self, spec: RewriteTaskSpec) -> TaskOutcome:
        return TaskOutcome(spec.task_id, result(spec.task_id), None)

    def cancel(self) -> None:
        pass


def test_each_completion_brings_the_threads_next_task_so_queued_work_needs_one_poll(
    optimizers: Callable[..., Optimizer],
) -> None:
    service = CountingService()
    service.add_group(GROUP, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, ack_timeout_s=30, execute_timeout_s=600)
    scheduler = service.group(GROUP)
    scheduler.upsert_table(TABLE_ID, quota=1.0, last_optimized_s=None)
    specs = [synthetic_spec(f"t{index}") for index in range(5)]
    scheduler.add_process(TABLE_ID, "p", specs, max_retries=0, allow_partial_commit=False)
    with TaskServiceServer(service, keeper_interval_s=0.1) as server:
        optimizer = optimizers(server.url, threads=1, runner=InstantRunner())
        outcome = finished(scheduler)
        assert outcome.succeeded and [r.task_id for r in outcome.results] == [s.task_id for s in specs]
        # The first poll got t0; each completion brought the next task; the last brought none.
        assert service.polls <= 2
        optimizer.stop(grace_s=10)
        assert optimizer.join(30)


def test_the_drivers_scaler_adds_and_drains_registrations_without_stopping_running_ones(
    server: TaskServiceServer, service: TaskService, spark: SparkSession
) -> None:
    """Up, another registration beside the running one (whose tasks go on); down, the newest
    registrations stop first, and the difference is registered again when more stopped."""
    scaler = ExecutorScaler(
        spark, server.url, GROUP, executor_cores=2, executor_memory=1 << 30, name="driver", grace_s=5.0,
        poll_wait_s=1.0,
    )  # fmt: skip

    def registered() -> list[tuple[str, int]]:
        return [(o.name, o.threads) for o in service.optimizers(GROUP)]

    def wait_for(expected: list[tuple[str, int]]) -> None:
        deadline = time.monotonic() + 30
        while registered() != expected:
            assert time.monotonic() < deadline, registered()
            time.sleep(0.05)

    try:
        scaler.scale(1)
        wait_for([("driver", 2)])
        first = service.optimizers(GROUP)[0].optimizer_id
        scaler.scale(3)
        wait_for([("driver", 2), ("driver+1", 4)])
        assert service.optimizers(GROUP)[0].optimizer_id == first, "the running registration stays"
        scaler.scale(2)  # the newest (2 executors) stops; 1 executor is registered again
        wait_for([("driver", 2), ("driver+1", 2)])
        assert service.optimizers(GROUP)[0].optimizer_id == first
        scaler.scale(0)
        wait_for([])
        assert scaler.executors == 0 and scaler.optimizers == []
    finally:
        scaler.stop()
