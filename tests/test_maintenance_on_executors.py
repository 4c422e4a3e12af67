"""Orphan cleanup of a big table on the group's executors: the scan, the check of what commits
made meanwhile, the deletes, and the refusal of a scan that names a file the table uses."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from maintenance_tables import InProcessExecutors, build_history, missing_files, read
from prometheus_client import generate_latest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table
from pyspark.sql import SparkSession
from test_correctness import build_table, rows_at
from test_engine import Stack, _group, _start_optimizer, _table, _tick_until, stack

from floe.api.table import MaintenanceSpec
from floe.local.reference_reader import ReferenceReader
from floe.maintenance.executor import run_file_task
from floe.maintenance.job import MaintenanceJob
from floe.maintenance.jobs import run_maintenance_job
from floe.maintenance.orphans_on_executors import (
    ExecutorPool,
    OrphanScanRefused,
    remove_orphan_files_on_executors,
)
from floe.protocol.assignment import TaskAssignment
from floe.protocol.file_tasks import (
    DeleteFilesResult,
    DeleteFilesSpec,
    FileTaskResult,
    FileTaskSpec,
    OrphanFile,
    OrphanScanResult,
    OrphanScanSpec,
)
from floe.protocol.wire import CompleteRequest
from floe.scheduling.group_scheduler import GroupScheduler
from floe.service.file_tasks import FileTaskDispatcher, FileTasksFailed
from floe.service.task_service import TaskService
from floe.tables.listing import fs_path
from floe.tables.scan import scan_table

DAY = 86400.0
__all__ = ["stack"]  # the real-stack fixture of test_engine, used here as is


def _aged(path: Path, age_s: float) -> Path:
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def _old_file(directory: Path, name: str, age_s: float) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(b"not referenced by any metadata")
    return _aged(path, age_s)


def _data_dir(table: Table) -> Path:
    return Path(table.location().removeprefix("file://")) / "data"


def test_orphan_cleanup_of_a_big_table_runs_on_the_groups_executors(
    stack: Stack, sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, _ = build_table(sql_catalog, reference, "identity", evolve_schema=False)
    before = rows_at(reference, sql_catalog)
    data = _data_dir(table)
    stale = _old_file(data, "stale-orphan.parquet", 4 * DAY)
    checksum = _old_file(data, ".stale-orphan.parquet.crc", 4 * DAY)
    fresh = _old_file(data, "fresh-orphan.parquet", 60)
    stack.engine.apply_group(_group("g1"))
    _start_optimizer(stack, spark, "g1")
    _tick_until(stack, lambda: bool(stack.service.optimizers("g1")))
    off = {"enabled": False}
    runtime = stack.engine.apply_table(
        _table(
            sql_catalog,
            "g1",
            maintenance={
                "executorsAtFiles": 0,
                "snapshotRetention": {"maxAge": "1ms", "interval": "1h"},
                "manifests": off,
                "danglingDeletes": off,
            },
        )
    )

    _tick_until(
        stack,
        lambda: (
            {MaintenanceJob.ORPHANS, MaintenanceJob.EXPIRE} <= set(runtime.maintenance_runs)
            and runtime.maintaining is None
        ),
    )

    runs = runtime.maintenance_runs
    assert not any(run.failed for run in runs.values()), runs
    assert "listed on the group's executors" in runs[MaintenanceJob.ORPHANS].result
    assert runs[MaintenanceJob.ORPHANS].files_removed == 2
    assert not stale.exists() and not checksum.exists() and fresh.exists()
    assert runs[MaintenanceJob.EXPIRE].files_removed > 0
    _tick_until(stack, stack.engine.converged)
    assert rows_at(reference, sql_catalog) == before
    sent = _file_tasks_sent(stack)
    # One scan, and a delete task each for the orphans and for what expiry left unreferenced.
    assert sent == {"orphan-scan": 1.0, "delete-files": 2.0}, sent


def _file_tasks_sent(stack: Stack) -> dict[str, float]:
    scrape = generate_latest(stack.service.metrics.registry).decode()
    found = re.findall(r'floe_maintenance_file_tasks_total\{group="g1",kind="([^"]+)"\} (\S+)', scrape)
    return {kind: float(count) for kind, count in found}


def test_a_file_a_commit_references_during_the_scan_is_kept(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, writer = build_table(sql_catalog, reference, "unpartitioned", evolve_schema=False)
    data = _data_dir(table)
    stray = _old_file(data, "stray.parquet", 4 * DAY)
    # A file written days ago and committed only now (an import, a slow writer): old enough,
    # and no metadata the scan read names it. Without field ids, as add_files wants.
    rows = writer.rows(3)
    late = data / "late-commit.parquet"
    without_ids = pa.schema([field.remove_metadata() for field in table.schema().as_arrow()])
    pq.write_table(
        pa.Table.from_pylist(rows.to_pylist(), schema=without_ids),
        late,
    )
    _aged(late, 4 * DAY)
    before = rows_at(reference, sql_catalog)

    def commit_the_old_file() -> None:
        sql_catalog.load_table("db.t").add_files([f"file://{late}"])

    executors = InProcessExecutors(during_scan=commit_the_old_file)
    report = remove_orphan_files_on_executors(
        table, executors.executors(table), older_than_s=3 * DAY, now_s=time.time()
    )

    [scan, *deletes] = executors.specs
    assert isinstance(scan, OrphanScanSpec)
    scanned = run_file_task(scan, scan.io_properties)  # the scan alone still calls it an orphan
    assert isinstance(scanned, OrphanScanResult) and str(late) in {o.path for o in scanned.orphans}
    assert [spec.paths for spec in deletes if isinstance(spec, DeleteFilesSpec)] == [[str(stray)]]
    assert report.files_removed == 1 and report.paths == (str(stray),)
    assert late.exists() and not stray.exists()
    after = rows_at(reference, sql_catalog)
    assert sum(after.values()) == sum(before.values()) + 3


@pytest.mark.parametrize(
    ("lie", "problem"),
    [
        ("metadata file", "the table uses it"),
        ("live data file", "the table uses it"),
        ("outside the table", "outside the table's locations"),
    ],
)
def test_a_scan_that_names_a_file_the_table_uses_is_refused_and_nothing_is_deleted(
    sql_catalog: SqlCatalog, reference: ReferenceReader, tmp_path: Path, lie: str, problem: str
) -> None:
    table, _ = build_table(sql_catalog, reference, "unpartitioned", evolve_schema=False)
    stray = _old_file(_data_dir(table), "stray.parquet", 4 * DAY)
    assert isinstance(table.io, PyArrowFileIO)
    live = scan_table(table)  # what the engine's last evaluation of the table holds
    named = {
        "metadata file": fs_path(table.io, table.metadata_location),
        "live data file": fs_path(table.io, live.files.data_files[0].path),
        "outside the table": str(_old_file(tmp_path / "elsewhere", "precious.parquet", 4 * DAY)),
    }[lie]
    deleted: list[FileTaskSpec] = []

    def lying_scan(specs: Sequence[FileTaskSpec]) -> list[FileTaskResult]:
        deleted.extend(s for s in specs if isinstance(s, DeleteFilesSpec))
        orphans = [
            OrphanFile(location=str(stray), path=str(stray), size=1),
            OrphanFile(location=named, path=named, size=1),
        ]
        return [OrphanScanResult(task_id=specs[0].task_id, orphans=orphans, old_files=2)]

    executors = ExecutorPool(run=lying_scan, io_properties=dict(table.io.properties), storage_secret=None)
    with pytest.raises(OrphanScanRefused, match=problem):
        remove_orphan_files_on_executors(
            table, executors, older_than_s=3 * DAY, now_s=time.time(), known_live=live.files
        )
    assert deleted == [] and stray.exists() and Path(named).exists()


def test_file_tasks_and_their_results_travel_as_what_they_are() -> None:
    scan = OrphanScanSpec(
        task_id="orphan-scan",
        io_properties={},
        roots={"/t": "/t"},
        metadata_location="/t/m.json",
        cutoff_ns=1,
    )
    assignment = TaskAssignment(attempt_id="a", task_id=scan.task_id, process_id="p", table="t", spec=scan)
    assert TaskAssignment.model_validate_json(assignment.model_dump_json()).spec == scan
    done = CompleteRequest(result=DeleteFilesResult(task_id="delete-00000", deleted=3))
    assert isinstance(CompleteRequest.model_validate_json(done.model_dump_json()).result, DeleteFilesResult)
    with pytest.raises(ValueError, match="paths"):
        DeleteFilesSpec(task_id="d", io_properties={}, paths=[])


def test_a_waiting_job_fails_when_the_engine_stops_and_its_tasks_are_cancelled() -> None:
    service = TaskService(clock=time.time)
    scheduler: GroupScheduler = service.add_group("g")
    scheduler.upsert_table("t", 1.0, None)
    dispatcher = FileTaskDispatcher(service, time.time)
    failures: list[BaseException] = []
    spec = DeleteFilesSpec(task_id="delete-00000", io_properties={}, paths=["/t/x"])

    def wait() -> None:
        try:
            dispatcher.run(scheduler, "t", "t/orphans-1", [spec])
        except FileTasksFailed as exc:
            failures.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    _wait_for(lambda: scheduler.group_stats(time.time()).pending_tasks == 1)
    dispatcher.close()
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert [str(f) for f in failures] == ["t/orphans-1: cancelled, the engine stops"]
    assert scheduler.group_stats(time.time()).pending_tasks == 0


def test_expiry_deletes_here_what_the_executors_cannot_once_it_committed(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    """The table left its group while expiry ran (its manifest removed from `floe run`): the group
    refuses its delete tasks, but the expiry has committed and nothing references those files any
    more, so they are deleted here; before, they stayed in storage for good."""
    table, ids = build_history(sql_catalog, reference)
    before = read(reference, sql_catalog)
    service = TaskService(clock=time.time)
    scheduler: GroupScheduler = service.add_group("g")  # the table is no longer in it
    dispatcher = FileTaskDispatcher(service, time.time)
    executors = ExecutorPool(
        run=lambda specs: dispatcher.run(scheduler, "db.t", "db.t/expire-1", specs),
        io_properties={},
        storage_secret=None,
    )
    spec = MaintenanceSpec.model_validate({"snapshotRetention": {"maxAge": "1ms"}})

    report = run_maintenance_job(table, MaintenanceJob.EXPIRE, spec, now_s=time.time(), executors=executors)

    assert report.files_removed > 0, report
    assert not [path for path in report.paths if table.io.new_input(path).exists()]
    assert missing_files(table) == []
    assert [s.snapshot_id for s in table.metadata.snapshots] == ids[-1:]
    assert read(reference, sql_catalog) == before


def _wait_for(done: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (callable(done) and done()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
