"""Run history: what the engine records of each process it commits or fails, against the
snapshot the commit made and a clock the test moves, so every phase and figure is known."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from test_correctness import build_table
from test_engine import TOKEN, _group, _table

from floe.api.history import STATUS_HISTORY, RunRecord
from floe.api.status import OptimizedTableStatus
from floe.controller.status import restore_history, table_status
from floe.local.reference_reader import ReferenceReader
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.history_sink import RunHistorySink
from floe.optimizing.table_state import TableRuntime, TableState
from floe.protocol.wire import CompleteRequest, PollRequest, RegisterRequest
from floe.rewrite.task import run_task
from floe.service.task_service import TaskService


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(1_700_000_000.0)


def _unreachable_history() -> Table:
    raise ConnectionError("history catalog unreachable")


@pytest.fixture
def sink() -> Iterator[RunHistorySink]:
    """A history sink whose table cannot be written: nothing the engine does may wait for it."""
    problems: list[str | None] = []
    history = RunHistorySink(_unreachable_history, problems.append, flush_interval_s=3600)
    yield history
    history.close()


@pytest.fixture
def engine_and_service(clock: Clock, sink: RunHistorySink) -> Iterator[tuple[OptimizingEngine, TaskService]]:
    service = TaskService(clock=clock, registration_token=TOKEN)
    engine = OptimizingEngine(service, clock=clock, history=sink)
    yield engine, service
    engine.close()


def _tick_until_optimizing(engine: OptimizingEngine, runtime: TableRuntime) -> None:
    deadline = time.monotonic() + 60
    while not runtime.state.endswith("_OPTIMIZING"):
        assert time.monotonic() < deadline, f"not planned: {runtime.state} {runtime.pending_reason}"
        engine.tick()
        time.sleep(0.05)


def _process_runs(runtime: TableRuntime) -> list[RunRecord]:
    return [run for run in runtime.runs if run.kind in ("minor", "major", "full")]


def _wait_idle(runtime: TableRuntime) -> None:
    deadline = time.monotonic() + 60
    while runtime.state != TableState.IDLE:
        assert time.monotonic() < deadline, f"no commit: {runtime.state}"
        time.sleep(0.05)


def test_a_committed_process_records_its_phases_figures_and_snapshot(
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
    engine_and_service: tuple[OptimizingEngine, TaskService],
    clock: Clock,
    sink: RunHistorySink,
) -> None:
    engine, service = engine_and_service
    build_table(sql_catalog, reference, "unpartitioned", evolve_schema=False)
    engine.apply_group(_group("g1"))
    runtime = engine.apply_table(_table(sql_catalog, "g1"))
    engine.tick()  # due, but no optimizer: it waits in the group's queue
    assert runtime.state == TableState.PENDING
    due_at = clock.now

    clock.now += 10
    session = service.register(RegisterRequest(group="g1", threads=1, memory_bytes=0, name="by-hand"), TOKEN)
    # Planned once the maintenance job the first round started ends (the clock stands still).
    _tick_until_optimizing(engine, runtime)
    planned_at = clock.now

    clock.now += 5
    first_start = clock.now
    tasks = 0
    while (assignment := service.poll(session.token, PollRequest(thread=0))) is not None:
        service.ack(session.token, assignment.attempt_id)
        result = run_task(assignment.spec)
        clock.now += 7  # each task runs 7 s by the clock
        tasks += 1
        service.complete(session.token, assignment.attempt_id, CompleteRequest(result=result))
    _wait_idle(runtime)

    [run] = _process_runs(runtime)
    head = sql_catalog.load_table("db.t").current_snapshot()
    assert head is not None and head.summary is not None
    summary = head.summary
    assert run.outcome == "committed" and run.error == ""
    assert run.snapshot_id == head.snapshot_id
    assert run.kind == engine.table_views()[0].last_result.split()[0]  # "minor committed ..." etc.
    assert ">=" in run.trigger or "elapsed" in run.trigger  # the trigger names its threshold
    assert run.table == "default/t" and run.run_id.startswith("db.t-")
    assert run.files_out == int(summary.get("added-data-files") or 0) + int(
        summary.get("added-delete-files") or 0
    )
    assert run.bytes_out == int(summary["added-files-size"])
    assert run.rows_out == int(summary.get("added-records") or 0)
    assert run.delete_files_retired == int(summary.get("removed-delete-files") or 0)
    removed_files = int(summary.get("deleted-data-files") or 0) + int(
        summary.get("removed-delete-files") or 0
    )
    assert run.files_in >= removed_files > 0
    assert run.bytes_in >= int(summary["removed-files-size"]) > 0
    assert run.rows_in > 0
    assert run.phases.queued == pytest.approx(planned_at - due_at)
    assert run.phases.planning == 0.0  # the clock stood still during the tick
    assert run.phases.waiting == pytest.approx(first_start - planned_at)
    assert run.phases.running == pytest.approx(7.0 * tasks)
    assert run.phases.committing == 0.0
    assert run.executor_seconds == pytest.approx(7.0 * tasks)
    assert run.task_attempts == tasks and run.commit_attempts == 1
    counted = service.metrics.registry.get_sample_value(
        "floe_executor_seconds_total", {"group": "g1", "kind": run.kind}
    )
    assert counted == pytest.approx(run.executor_seconds)  # the group's cost, by kind

    # The history table could not be written, and the commit did not wait for it: the runs wait.
    assert not sink.flush() and sink.problem is not None and "history catalog unreachable" in sink.problem
    assert "runs wait)" in sink.problem

    # The maintenance jobs the rounds started are in the history too, each with what it removed.
    jobs = [r for r in runtime.runs if r not in (run,)]
    assert jobs and all(j.outcome == "done" and j.kind not in ("minor", "major", "full") for j in jobs)
    assert all(j.trigger.startswith("first run") for j in jobs)

    # Status carries them, and a restarted operator reads them back from there.
    status = table_status(runtime, 0.0, redact=lambda text: text)
    assert status["history"] == [r.model_dump(by_alias=True, mode="json") for r in runtime.runs]
    assert OptimizedTableStatus.model_validate(status).history == list(runtime.runs)
    restored = TableRuntime(runtime.table_id, runtime.spec)
    restore_history(restored, status)
    assert list(restored.runs) == list(runtime.runs)


def test_a_failed_process_records_why_and_what_its_attempts_took(
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
    engine_and_service: tuple[OptimizingEngine, TaskService],
    clock: Clock,
) -> None:
    engine, service = engine_and_service
    build_table(sql_catalog, reference, "unpartitioned", evolve_schema=False)
    engine.apply_group(_group("g1"))
    session = service.register(RegisterRequest(group="g1", threads=1, memory_bytes=0, name="by-hand"), TOKEN)
    runtime = engine.apply_table(_table(sql_catalog, "g1", execute={"numRetries": 1}))
    _tick_until_optimizing(engine, runtime)
    before = sql_catalog.load_table("db.t").current_snapshot()

    attempts = 0
    while (assignment := service.poll(session.token, PollRequest(thread=0))) is not None:
        service.ack(session.token, assignment.attempt_id)
        clock.now += 3
        attempts += 1
        service.complete(
            session.token, assignment.attempt_id, CompleteRequest(error="disk full on executor 1")
        )
        if runtime.process_id is None or attempts > 10:
            break
    _wait_idle(runtime)

    [run] = _process_runs(runtime)
    assert run.outcome == "failed" and "disk full on executor 1" in run.error
    assert run.snapshot_id is None and run.files_out == run.bytes_out == run.rows_out == 0
    assert run.task_attempts == attempts == 2  # the first and its one retry
    assert run.executor_seconds == pytest.approx(3.0 * attempts)
    assert run.commit_attempts == 0  # it failed before a commit was tried
    assert sql_catalog.load_table("db.t").current_snapshot() == before


def test_status_keeps_the_last_runs_and_redacts_their_texts(
    sql_catalog: SqlCatalog, engine_and_service: tuple[OptimizingEngine, TaskService]
) -> None:
    engine, _ = engine_and_service
    engine.apply_group(_group("g1"))
    runtime = engine.apply_table(_table(sql_catalog, "g1"))
    for n in range(STATUS_HISTORY + 2):
        runtime.runs.record(
            RunRecord(
                table="default/t",
                run_id=f"expire-{n}",
                kind="expire",
                started="2026-11-30T00:00:00Z",
                finished="2026-11-30T00:00:01Z",
                outcome="failed",
                error=f"s3://bucket?secret=hunter2 unreachable ({n})",
            )
        )
    status = table_status(runtime, 0.0, redact=lambda text: text.replace("hunter2", "***"))
    assert [r["runId"] for r in status["history"]] == [f"expire-{n}" for n in range(2, STATUS_HISTORY + 2)]
    assert all("hunter2" not in r["error"] and "***" in r["error"] for r in status["history"])
    # A record a later version wrote, or a hand edit, that this one cannot read is left out.
    restored = TableRuntime(runtime.table_id, runtime.spec)
    restore_history(restored, {"history": [{"kind": "vacuum"}, *status["history"]]})
    assert [r.run_id for r in restored.runs] == [r["runId"] for r in status["history"]]
