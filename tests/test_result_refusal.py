"""Forged completions from a registered optimizer are refused over real HTTP, and cost nothing.

Each test queues a real rewrite task on files in a temporary directory, takes it as a
registered optimizer would (register, poll), runs the real rewrite, then completes it with
a forged result. The service must refuse it with 422 ``result_refused``, count the attempt as
failed (using a retry), delete the files the attempt wrote and nothing else, count the
refusal in its metrics and tell its listeners (the engine posts an Event from that).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from test_service_http import Clock, scrape

from floe.protocol.assignment import TaskAssignment
from floe.protocol.client import RequestFailed, ServiceUnavailable, TaskServiceClient
from floe.protocol.rewrite_task import InputDataFile, RewriteTaskResult, RewriteTaskSpec
from floe.protocol.wire import CompleteRequest, RegisterRequest, RegisterResponse
from floe.rewrite.task import run_rewrite_task
from floe.scheduling.group_scheduler import GroupScheduler
from floe.service.http import TaskServiceServer
from floe.service.task_service import RefusedResult, TaskService

GROUP = "g"
TABLE = "ns/t"
PROCESS = "db.t-20260101T000000-abcdef"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()))


class Stack:
    """Service, server and a registered client, with the refusals the service reported."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.clock = Clock()
        self.service = TaskService(self.clock)
        self.scheduler: GroupScheduler = self.service.add_group(GROUP, execute_timeout_s=600)
        self.scheduler.upsert_table(TABLE, quota=2.0, last_optimized_s=None)
        self.refused: list[RefusedResult] = []
        self.service.on_refused(self.refused.append)
        self.server = TaskServiceServer(self.service, keeper_interval_s=60)
        self.server.start()
        self.client = TaskServiceClient(self.server.url, timeout=30)
        self.session: RegisterResponse = self.client.register(
            RegisterRequest(group=GROUP, threads=2, memory_bytes=0, name="forger")
        )

    def queue(self, tasks: int = 1, output_dir: str | None = None, io: dict[str, str] | None = None) -> None:
        specs = [self._spec(i, output_dir, io or {}) for i in range(tasks)]
        self.scheduler.add_process(TABLE, PROCESS, specs, max_retries=1, allow_partial_commit=False)

    def _spec(self, index: int, output_dir: str | None, io: dict[str, str]) -> RewriteTaskSpec:
        inputs = []
        for n in range(2):
            path = self.tmp_path / f"in-{index}-{n}.parquet"
            ids = list(range(n * 10, n * 10 + 10))
            rows = pa.table({"id": ids, "v": [str(i) for i in ids]}, schema=schema_to_pyarrow(SCHEMA))
            pq.write_table(rows, path)
            inputs.append(
                InputDataFile(
                    path=str(path), record_count=10, size_bytes=path.stat().st_size, data_sequence_number=1
                )
            )
        return RewriteTaskSpec(
            task_id=f"{PROCESS}-t{index:04d}",
            io_properties=io,
            table_schema_json=SCHEMA.model_dump_json(),
            partition_spec_json=UNPARTITIONED_PARTITION_SPEC.model_dump_json(),
            output_dir=output_dir or str(self.tmp_path / "table" / "data"),
            data_files=inputs,
            target_file_size_bytes=1 << 27,
            delete_memory_limit_bytes=1 << 26,
            file_name_prefix=f"{PROCESS}-t{index:04d}-0a1b2c3d",
        )

    def take(self, thread: int = 0) -> tuple[TaskAssignment, RewriteTaskResult]:
        """Poll and ack a task and run its real rewrite."""
        assignment = self.client.poll(self.session.token, thread, wait_s=0)
        assert assignment is not None
        self.client.ack(self.session.token, assignment.attempt_id)
        return assignment, run_rewrite_task(assignment.spec)

    def complete(self, assignment: TaskAssignment, result: RewriteTaskResult) -> None:
        self.client.complete(self.session.token, assignment.attempt_id, CompleteRequest(result=result))

    def refuse(self, assignment: TaskAssignment, result: RewriteTaskResult, check: str) -> str:
        """Complete with `result`, expect 422 result_refused naming `check`; return the message."""
        with pytest.raises(RequestFailed) as refused:
            self.complete(assignment, result)
        message = str(refused.value)
        assert refused.value.status == 422 and "result_refused" in message, message
        assert self.refused[-1].check == check and self.refused[-1].attempt_id == assignment.attempt_id
        assert self.refused[-1].table_id == TABLE and self.refused[-1].process_id == PROCESS
        return message

    def close(self) -> None:
        self.client.close()
        self.server.stop()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    built = Stack(tmp_path)
    yield built
    built.close()


def _table_files(stack: Stack) -> list[Path]:
    return sorted((stack.tmp_path / "table").rglob("*.parquet"))


def _retried_then_accepted(stack: Stack) -> None:
    """The refused attempt used a retry; the next attempt, honest, is accepted and finishes the process."""
    stats = stack.scheduler.stats(stack.clock())[TABLE]
    assert (stats.running, stats.planned) == (0, 1)
    assignment, result = stack.take()
    # The attempt's random tag may itself begin with "a": match the whole prefix.
    assert assignment.attempt_id.startswith(f"{assignment.task_id}-a2-")
    stack.complete(assignment, result)
    (outcome,) = stack.scheduler.take_finished()
    assert outcome.succeeded and outcome.results == [result]


def test_a_wrong_row_count_is_refused_and_its_files_deleted(stack: Stack) -> None:
    stack.queue()
    assignment, result = stack.take()
    written = Path(result.files[0].path)
    assert written.exists()

    message = stack.refuse(assignment, result.model_copy(update={"rows_read": 19}), "rows")

    assert "19 rows read, but its 2 data files hold 20 rows" in message
    assert not written.exists() and stack.refused[-1].files_deleted == 1
    assert _table_files(stack) == []
    metrics = scrape(stack.server)
    assert metrics[("floe_task_results_refused_total", (("check", "rows"), ("group", GROUP)))] == 1
    assert metrics[("floe_tasks_completed_total", (("group", GROUP), ("outcome", "failure")))] == 1
    _retried_then_accepted(stack)


def test_a_path_outside_the_table_is_refused_and_never_deleted(stack: Stack) -> None:
    precious = stack.tmp_path / "precious.parquet"
    stack.queue()
    assignment, result = stack.take()
    Path(result.files[0].path).rename(precious)
    forged = result.model_copy(update={"files": [result.files[0].model_copy(update={"path": str(precious)})]})

    message = stack.refuse(assignment, forged, "location")

    assert str(precious) in message
    assert precious.exists(), "a file the attempt may not have written was deleted"
    assert stack.refused[-1].files_deleted == 0
    _retried_then_accepted(stack)


def test_a_file_that_does_not_exist_is_refused(stack: Stack) -> None:
    stack.queue()
    assignment, result = stack.take()
    Path(result.files[0].path).unlink()
    message = stack.refuse(assignment, result, "missing")
    assert "does not exist" in message
    _retried_then_accepted(stack)


def test_a_result_for_another_tasks_attempt_changes_nothing(stack: Stack) -> None:
    stack.queue(tasks=2)
    first, first_result = stack.take(thread=0)
    second, second_result = stack.take(thread=1)

    with pytest.raises(RequestFailed) as refused:
        stack.complete(first, second_result)

    assert refused.value.status == 422 and "invalid_request" in str(refused.value)
    assert stack.refused == []
    # Both attempts are still current and running: nothing was recorded.
    assert stack.scheduler.stats(stack.clock())[TABLE].running == 2
    stack.complete(first, first_result)
    stack.complete(second, second_result)
    (outcome,) = stack.scheduler.take_finished()
    assert outcome.succeeded


def test_a_result_whose_storage_does_not_answer_changes_nothing(stack: Stack) -> None:
    unreachable = {
        "s3.endpoint": "http://127.0.0.1:9",
        "s3.access-key-id": "k",
        "s3.secret-access-key": "s",
        "s3.region": "us-east-1",
        "s3.connect-timeout": "1",
    }
    stack.queue(output_dir="s3://bucket/table/data", io=unreachable)
    assignment = stack.client.poll(stack.session.token, 0, wait_s=0)
    assert assignment is not None
    stack.client.ack(stack.session.token, assignment.attempt_id)
    # The task is not run (its storage is down); its result names a file it would have written.
    local = run_rewrite_task(
        assignment.spec.model_copy(update={"io_properties": {}, "output_dir": str(stack.tmp_path / "out")})
    )
    name = Path(local.files[0].path).name
    claimed = local.model_copy(
        update={"files": [local.files[0].model_copy(update={"path": f"s3://bucket/table/data/{name}"})]}
    )

    with pytest.raises(ServiceUnavailable, match="result_unverifiable"):
        stack.complete(assignment, claimed)

    assert stack.refused == []
    stats = stack.scheduler.stats(stack.clock())[TABLE]
    assert (stats.running, stats.planned) == (1, 0), "the attempt is still current"
