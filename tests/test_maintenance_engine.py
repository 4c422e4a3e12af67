"""Maintenance jobs driven by the engine on real tables: their schedule, status, quota and protections."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import generate_latest
from pyiceberg.catalog.sql import SqlCatalog
from test_correctness import build_table, rows_at
from test_engine import TOKEN, Stack, _group, _table, _tick_until, stack

from floe.controller.status import table_status
from floe.local.reference_reader import ReferenceReader
from floe.maintenance.job import MaintenanceJob
from floe.protocol.wire import RegisterRequest

DAY = 86400.0
__all__ = ["stack"]  # the real-stack fixture of test_engine, used here as is


def _old_file(directory: Path, name: str, age_s: float) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(b"not referenced by any metadata")
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def test_due_jobs_run_on_their_own_schedule_show_in_status_and_count_toward_quota(
    stack: Stack, sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, _ = build_table(sql_catalog, reference, "identity", evolve_schema=False)
    before = rows_at(reference, sql_catalog)
    assert len(table.metadata.snapshots) > 3
    data = _local(table.location()) / "data"
    stale = _old_file(data, "stale-orphan.parquet", 4 * DAY)
    fresh = _old_file(data, "fresh-orphan.parquet", 60)
    stack.engine.apply_group(_group("g1"))
    # No optimizer: the table stays PENDING, and maintenance runs all the same.
    runtime = stack.engine.apply_table(
        _table(sql_catalog, "g1", maintenance={"snapshotRetention": {"maxAge": "1ms", "interval": "1h"}})
    )

    _tick_until(stack, lambda: len(runtime.maintenance_runs) == 3 and runtime.maintaining is None)

    runs = runtime.maintenance_runs
    assert set(runs) == {MaintenanceJob.DANGLING_DELETES, MaintenanceJob.EXPIRE, MaintenanceJob.ORPHANS}
    # A handful of manifests, far below the rewrite's trigger: the evaluation settled it.
    assert MaintenanceJob.MANIFESTS in runtime.settled_jobs
    assert not any(run.failed for run in runs.values()), runs
    table = sql_catalog.load_table("db.t")
    assert len(table.metadata.snapshots) == 1  # expired down to minSnapshots
    assert runs[MaintenanceJob.EXPIRE].files_removed > 0
    assert not stale.exists() and fresh.exists()
    assert runs[MaintenanceJob.ORPHANS].files_removed >= 1
    assert rows_at(reference, sql_catalog) == before
    reasons = {(e.reason, e.message.split(":")[0]) for e in stack.events}
    assert {("MaintenanceDone", "expire"), ("MaintenanceDone", "orphans")} <= reasons

    # Each job is due again one interval after its own last run, not before; expiry left one
    # snapshot, which never ages out: once the table is evaluated again, it waits for a change.
    _tick_until(stack, lambda: runtime.next_maintenance_s(MaintenanceJob.EXPIRE, time.time()) is None)
    assert runtime.settled_jobs[MaintenanceJob.EXPIRE] == sql_catalog.load_table("db.t").metadata_location
    assert runtime.next_maintenance_s(MaintenanceJob.ORPHANS, time.time()) == (
        runs[MaintenanceJob.ORPHANS].finished_s + DAY
    )
    assert runtime.due_maintenance(time.time()) is None

    # The jobs' time counts toward the table's quota (measured once the group has threads to share).
    stack.service.register(RegisterRequest(group="g1", threads=2, memory_bytes=1 << 30), TOKEN)
    assert stack.service.group("g1").stats(time.time())["default/t"].occupation > 0
    scrape = generate_latest(stack.service.metrics.registry).decode()
    assert 'floe_maintenance_runs_total{job="expire",result="done"} 1.0' in scrape
    reclaimed = runs[MaintenanceJob.ORPHANS].files_removed
    assert f'floe_maintenance_files_reclaimed_total{{job="orphans"}} {float(reclaimed)}' in scrape
    status = table_status(runtime, 0.0, redact=lambda text: text)["maintenance"]
    assert set(status) == {"dangling-deletes", "expire", "orphans"}
    assert status["orphans"]["filesReclaimed"] >= 1 and status["orphans"]["nextDue"] is not None


def test_in_flight_process_is_protected_from_expiry_and_orphan_cleanup(
    stack: Stack, sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, writer = build_table(sql_catalog, reference, "unpartitioned", evolve_schema=False)
    stack.engine.apply_group(_group("g1"))
    off = {"enabled": False}
    runtime = stack.engine.apply_table(
        _table(
            sql_catalog,
            "g1",
            maintenance={
                "snapshotRetention": {"enabled": False, "maxAge": "1ms"},
                "orphanFiles": off,
                "manifests": off,
                "danglingDeletes": off,
            },
        )
    )
    # A registered optimizer that never polls: the process is planned and stays in flight.
    stack.service.register(RegisterRequest(group="g1", threads=2, memory_bytes=1 << 30), TOKEN)
    _tick_until(stack, lambda: runtime.process_id is not None)
    assert runtime.busy and runtime.maintenance_runs == {}  # every job disabled: none ran
    process_id = runtime.process_id
    start = sql_catalog.load_table("db.t").metadata.current_snapshot_id
    writer.append(5)
    writer.append(5)  # the process's starting snapshot is now neither current nor young
    chain = {start, *(s.snapshot_id for s in sql_catalog.load_table("db.t").metadata.snapshots[-2:])}
    data = _local(table.location()) / "data"
    ours = _old_file(data, f"{process_id}-t0000-deadbeef-0.parquet", 4 * DAY)
    stray = _old_file(data, "stray-0.parquet", 4 * DAY)

    stack.engine.run_maintenance_now("default/t", MaintenanceJob.EXPIRE).result(timeout=120)
    stack.engine.run_maintenance_now("default/t", MaintenanceJob.ORPHANS).result(timeout=120)

    # Everything older than the process's start expired; the start and the snapshots from it to
    # the head stay (its commit validates by walking back to the start).
    snapshots = {s.snapshot_id for s in sql_catalog.load_table("db.t").metadata.snapshots}
    assert snapshots == chain and len(table.metadata.snapshots) > 3
    assert ours.exists() and not stray.exists()
    assert runtime.process_id == process_id and runtime.busy  # the process itself is untouched
    # A committing job waits for the process.
    with pytest.raises(Exception, match="while"):
        stack.engine.run_maintenance_now("default/t", MaintenanceJob.MANIFESTS)


def test_jobs_an_evaluation_shows_have_nothing_to_do_wait_for_the_table_to_change(
    stack: Stack, sql_catalog: SqlCatalog
) -> None:
    """A table of one snapshot, one manifest and no delete file: its evaluation settles expiry,
    manifests and dangling deletes, which then neither run nor load the table; orphan cleanup,
    which depends on the time, runs. A writer's second snapshot gives expiry something that can
    age out: it runs again."""
    rows = pa.table({"id": pa.array(range(10), pa.int64())})
    table = sql_catalog.create_table("db.t", rows.schema)
    table.append(rows)
    stack.engine.apply_group(_group("g1"))
    runtime = stack.engine.apply_table(_table(sql_catalog, "g1"))
    _tick_until(
        stack, lambda: MaintenanceJob.ORPHANS in runtime.maintenance_runs and runtime.maintaining is None
    )
    for _ in range(5):
        stack.engine.tick()
    assert set(runtime.maintenance_runs) == {MaintenanceJob.ORPHANS}
    settled = {MaintenanceJob.EXPIRE, MaintenanceJob.MANIFESTS, MaintenanceJob.DANGLING_DELETES}
    assert set(runtime.settled_jobs) == settled
    assert runtime.next_maintenance_s(MaintenanceJob.EXPIRE, time.time()) is None
    assert table_status(runtime, 0.0, redact=str)["maintenance"]["orphans"]["nextDue"] is not None

    table.append(rows)
    _tick_until(
        stack, lambda: MaintenanceJob.EXPIRE in runtime.maintenance_runs and runtime.maintaining is None
    )
    assert runtime.maintenance_runs[MaintenanceJob.EXPIRE].result.startswith("no snapshot to expire")
    assert MaintenanceJob.EXPIRE not in runtime.settled_jobs  # the older snapshot will age out
    assert {MaintenanceJob.MANIFESTS, MaintenanceJob.DANGLING_DELETES} <= set(runtime.settled_jobs)
    assert runtime.next_maintenance_s(MaintenanceJob.EXPIRE, time.time()) is not None
