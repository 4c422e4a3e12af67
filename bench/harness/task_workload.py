"""The scheduling benchmark's input: a task service full of tables, each with a queued process of
synthetic task specs, kept full by a simulated engine as processes finish.

Nothing here runs a task: the specs are realistic in size (6 data and 2 delete files
each) but name files that do not exist, and a completion is a small fake result the
service accepts without checking it against storage.
"""

from __future__ import annotations

import threading
import time

from floe.api.group import SchedulingPolicy
from floe.local.workload import CLICKS_SCHEMA, CLICKS_SPEC
from floe.protocol.rewrite_task import (
    InputDataFile,
    InputDeleteFile,
    RewriteTaskResult,
    RewriteTaskSpec,
    WrittenFile,
)
from floe.protocol.wire import CompleteRequest
from floe.service.results import ResultChecker
from floe.service.task_service import TaskService

REFILL_INTERVAL_S = 0.1


def table_id(index: int) -> str:
    """The id of the index-th synthetic table, ``default/t0042``-style like the engine's."""
    return f"default/t{index:04d}"


def group_name(index: int) -> str:
    """The name of the index-th optimizer group."""
    return f"group-{index}"


def synthetic_specs(table: str, tasks: int) -> list[RewriteTaskSpec]:
    """A process's worth of realistic task specs for ``table``: 6 data and 2 delete files each."""
    base = f"file:///warehouse/bench/{table.replace('/', '_')}"
    schema_json = CLICKS_SCHEMA.model_dump_json()
    spec_json = CLICKS_SPEC.model_dump_json()
    specs = []
    for task in range(tasks):
        partition = f"{base}/data/ts_day=2024-03-{task % 28 + 1:02d}"
        specs.append(
            RewriteTaskSpec(
                task_id=f"{table}-task-{task}",
                io_properties={},
                table_schema_json=schema_json,
                partition_spec_json=spec_json,
                output_dir=partition,
                data_files=[
                    InputDataFile(
                        path=f"{partition}/00000-{task}-{n}-0f3c9a2e-6d1b-4c55-9a7e-{n:012d}.parquet",
                        record_count=20_000 + n,
                        size_bytes=2_000_000 + n,
                        data_sequence_number=n + 1,
                    )
                    for n in range(6)
                ],
                delete_files=[
                    InputDeleteFile(
                        path=f"{partition}/00001-{task}-{n}-deletes-{n:012d}.parquet",
                        kind=2,
                        record_count=500,
                        size_bytes=8_000,
                        data_sequence_number=10 + n,
                        equality_ids=[1],
                    )
                    for n in range(2)
                ],
                target_file_size_bytes=128 * 1024 * 1024,
                delete_memory_limit_bytes=512 * 1024 * 1024,
                file_name_prefix=f"proc-{table.replace('/', '_')}-{task}",
            )
        )
    return specs


def fake_completion(task_id: str) -> CompleteRequest:
    """A small successful outcome: one written file with metrics for the 4 columns."""
    columns = range(1, 5)
    return CompleteRequest(
        result=RewriteTaskResult(
            task_id=task_id,
            files=[
                WrittenFile(
                    path=f"file:///warehouse/bench/out/{task_id}.parquet",
                    record_count=120_000,
                    size_bytes=12_000_000,
                    column_sizes={c: 3_000_000 for c in columns},
                    value_counts={c: 120_000 for c in columns},
                    null_value_counts={c: 0 for c in columns},
                    nan_value_counts={},
                    lower_bounds={c: "0000000000000000" for c in columns},
                    upper_bounds={c: "ffffffffffffff7f" for c in columns},
                    split_offsets=[4],
                )
            ],
            rows_read=121_000,
            rows_deleted=1_000,
            bytes_read=12_016_000,
        )
    )


class Completions:
    """Fake completions, built once per task id and shared by the threads."""

    def __init__(self) -> None:
        self._cache: dict[str, CompleteRequest] = {}

    def get(self, task_id: str) -> CompleteRequest:
        """The completion for ``task_id``."""
        request = self._cache.get(task_id)
        if request is None:
            request = self._cache.setdefault(task_id, fake_completion(task_id))
        return request


class AcceptEveryResult(ResultChecker):
    """Accepts every result without reading storage: the fake completions name files that do not exist.

    The service checks real results against storage before accepting them; what that costs
    depends on the storage, not on scheduling, and the rewrite benchmark reports it.
    """

    def check(self, spec: RewriteTaskSpec, result: RewriteTaskResult, process_id: str = "") -> None:
        """Accept."""


class Refiller:
    """The engine's part in the steady state: requeue a process for every table whose process finished."""

    def __init__(
        self, service: TaskService, groups: list[str], specs: dict[str, list[RewriteTaskSpec]]
    ) -> None:
        self.service = service
        self.groups = groups
        self.specs = specs
        self.processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-refiller", daemon=True)

    def start(self) -> None:
        """Start requeueing in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop requeueing and wait for the thread."""
        self._stop.set()
        self._thread.join()

    def refill(self) -> None:
        """Queue a new process for every table whose process finished since the last call."""
        for name in self.groups:
            scheduler = self.service.group(name)
            for outcome in scheduler.take_finished():
                self.processes += 1
                scheduler.add_process(
                    outcome.table_id,
                    f"process-{self.processes}",
                    self.specs[outcome.table_id],
                    max_retries=5,
                    allow_partial_commit=False,
                )

    def _run(self) -> None:
        while not self._stop.wait(REFILL_INTERVAL_S):
            self.refill()


def build_service(tables: int, groups: int, tasks_per_table: int, policy: SchedulingPolicy) -> Refiller:
    """The simulated engine over a new TaskService: ``tables`` tables spread over ``groups`` groups,
    one process of ``tasks_per_table`` tasks queued for each.

    Table specs are built once and reused by every later process of the table (task ids
    only need to be unique within a process), so refilling costs no pydantic work.
    """
    service = TaskService(clock=time.time, result_checker=AcceptEveryResult())
    names = [group_name(g) for g in range(groups)]
    for name in names:
        service.add_group(name, policy)
    specs: dict[str, list[RewriteTaskSpec]] = {}
    refiller = Refiller(service, names, specs)
    for index in range(tables):
        tid = table_id(index)
        specs[tid] = synthetic_specs(tid, tasks_per_table)
        scheduler = service.group(names[index % groups])
        scheduler.upsert_table(tid, quota=0.5, last_optimized_s=None)
        refiller.processes += 1
        scheduler.add_process(tid, f"process-{refiller.processes}", specs[tid], 5, False)
    return refiller
