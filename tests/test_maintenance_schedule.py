"""When maintenance jobs are due, and how they interlock with optimizing: plain values and a clock."""

from __future__ import annotations

from typing import Any

import pytest

from floe.api.group import SchedulingPolicy
from floe.api.table import OptimizedTableSpec
from floe.controller.status import maintenance_status, restore_maintenance
from floe.maintenance.job import MaintenanceJob, MaintenanceReport
from floe.optimizing.maintenance_schedule import (
    JOB_ORDER,
    due_jobs,
    job_intervals,
    next_due_s,
    spread_first_runs,
)
from floe.optimizing.table_state import IllegalTransition, MaintenanceRun, TableRuntime, TableState
from floe.planning.files import ContentFile, FileKind, PartitionKey, TableFiles
from floe.planning.plan import OptimizingPlan, OptimizingType, PlannedTask
from floe.scheduling.group_scheduler import GroupScheduler
from floe.scheduling.occupation import TaskTimeLedger

P = PartitionKey(0, ())
EXPIRE, ORPHANS, MANIFESTS, DANGLING, RETENTION = (
    MaintenanceJob.EXPIRE,
    MaintenanceJob.ORPHANS,
    MaintenanceJob.MANIFESTS,
    MaintenanceJob.DANGLING_DELETES,
    MaintenanceJob.RETENTION,
)


def _spec(**maintenance: Any) -> OptimizedTableSpec:
    return OptimizedTableSpec.model_validate(
        {"table": "db.t", "catalog": {"name": "c"}, "maintenance": maintenance}
    )


def _pending(runtime: TableRuntime, snapshot_id: int = 5) -> None:
    data = tuple(ContentFile(f"f{i}", FileKind.DATA, P, 10, 100, 1) for i in range(3))
    files = TableFiles(snapshot_id, 1, data, ())
    plan = OptimizingPlan(snapshot_id, 1, OptimizingType.MINOR, (), (PlannedTask(P, data, ()),))
    runtime.on_evaluated(files, plan, now_s=0)


def test_defaults_enable_every_job_but_retention_in_order() -> None:
    intervals = job_intervals(_spec().maintenance)
    assert list(intervals) == [DANGLING, MANIFESTS, EXPIRE, ORPHANS]
    assert intervals[EXPIRE] == 3600 and intervals[ORPHANS] == 86400
    with_ttl = job_intervals(
        _spec(dataRetention={"column": "ts", "olderThan": "30d", "interval": "2h"}).maintenance
    )
    assert list(with_ttl) == list(JOB_ORDER) and with_ttl[RETENTION] == 7200


def test_jobs_are_due_at_once_then_one_interval_after_their_last_run() -> None:
    spec = _spec(snapshotRetention={"interval": "10m"}).maintenance
    assert due_jobs(spec, {}, now_s=1000) == [DANGLING, MANIFESTS, EXPIRE, ORPHANS]
    last = {DANGLING: 1000.0, MANIFESTS: 1000.0, EXPIRE: 1000.0, ORPHANS: 1000.0}
    assert due_jobs(spec, last, now_s=1599) == []
    assert due_jobs(spec, last, now_s=1600) == [EXPIRE]
    assert due_jobs(spec, last, now_s=1000 + 86400) == [DANGLING, MANIFESTS, EXPIRE, ORPHANS]
    assert next_due_s(spec, EXPIRE, 1000.0, now_s=1200) == 1600
    assert next_due_s(spec, EXPIRE, None, now_s=1200) == 1200


def test_disabled_jobs_are_never_due() -> None:
    spec = _spec(
        snapshotRetention={"enabled": False},
        orphanFiles={"enabled": False},
        manifests={"enabled": False},
        danglingDeletes={"enabled": False},
    ).maintenance
    assert due_jobs(spec, {}, now_s=0) == []
    assert next_due_s(spec, EXPIRE, None, now_s=0) is None


def test_one_job_at_a_time_and_committing_jobs_wait_for_optimizing() -> None:
    r = TableRuntime("ns/t", _spec())
    assert r.due_maintenance(0) == DANGLING
    r.on_maintenance_started(DANGLING)
    assert r.due_maintenance(0) is None  # one job at a time
    _pending(r)
    assert not r.may_plan(0)  # dangling-delete removal commits: no planning meanwhile
    with pytest.raises(IllegalTransition):
        r.on_maintenance_started(EXPIRE)
    r.on_maintenance_done(MaintenanceReport(DANGLING, "removed 2 delete files", 2, 300, snapshot_id=9), 10)
    assert r.maintaining is None and r.needs_evaluation(5)  # the committed snapshot is re-evaluated
    assert r.may_plan(10)
    r.on_planning(10)
    r.on_planned(OptimizingPlan(5, 1, OptimizingType.MINOR, (), (PlannedTask(P, (), ()),)), "p1")
    # While the process is in flight, manifests (commits) waits; expiry (no data change) may run.
    assert r.due_maintenance(20) == EXPIRE
    r.on_maintenance_started(EXPIRE)
    r.on_maintenance_failed(EXPIRE, "catalog down", 30)
    assert r.maintenance_runs[EXPIRE].failed and r.maintenance_runs[EXPIRE].result == "failed: catalog down"
    assert r.due_maintenance(31) == ORPHANS
    with pytest.raises(IllegalTransition):
        r.on_maintenance_started(MANIFESTS)


def test_disabled_table_runs_no_maintenance() -> None:
    r = TableRuntime("ns/t", _spec())
    r.update_spec(_spec().model_copy(update={"enabled": False}))
    assert r.state == TableState.DISABLED and r.due_maintenance(0) is None


def test_status_shows_each_run_and_a_restart_restores_the_schedule() -> None:
    r = TableRuntime("ns/t", _spec())
    r.on_maintenance_started(DANGLING)
    r.on_maintenance_done(MaintenanceReport(DANGLING, "removed 2 delete files", 2, 300), 1_700_000_000)
    status = maintenance_status(r, redact=lambda text: text)
    assert status == {
        "dangling-deletes": {
            "lastRun": "2023-11-14T22:13:20Z",
            "nextDue": "2023-11-14T23:13:20Z",
            "lastResult": "removed 2 delete files",
            "filesReclaimed": 2,
            "bytesReclaimed": 300,
        }
    }
    restarted = TableRuntime("ns/t", _spec())
    restore_maintenance(restarted, {"maintenance": {**status, "vacuum": {"lastRun": "2023-11-14T22:13:20Z"}}})
    assert restarted.maintenance_runs == {
        DANGLING: MaintenanceRun(1_700_000_000, "removed 2 delete files", 2, 300)
    }
    assert restarted.due_maintenance(1_700_000_000 + 10) == MANIFESTS  # dangling-deletes is not due again


def test_maintenance_time_counts_toward_quota() -> None:
    scheduler = GroupScheduler("g", SchedulingPolicy.QUOTA, ack_timeout_s=30, execute_timeout_s=3600)
    scheduler.threads = 2
    scheduler.upsert_table("ns/t", 0.5, None)
    scheduler.start_maintenance("ns/t", "run-1", 1000)
    scheduler.end_maintenance("run-1", 1360)
    scheduler.end_maintenance("run-1", 1400)  # ended twice (or after its table left): ignored
    assert scheduler.stats(1360)["ns/t"].occupation == pytest.approx(360 / 3600 / 1)
    scheduler.start_maintenance("ns/gone", "run-2", 1000)  # a table the group does not serve: not counted
    scheduler.end_maintenance("run-2", 1100)
    assert "ns/gone" not in scheduler.stats(1100)


def test_ledger_knows_which_runs_are_running() -> None:
    ledger = TaskTimeLedger()
    ledger.start("ns/t", "run-1", 0)
    assert ledger.running("run-1")
    ledger.stop("run-1", 10)
    assert not ledger.running("run-1") and ledger.task_seconds("ns/t", 10) == 10


def test_first_runs_of_many_tables_spread_over_each_jobs_interval() -> None:
    """Tables registered together (an operator starting, a set listing a catalog) do not all
    start their first jobs at once: each job of each table gets a point of its own within the
    job's interval, the same point every time."""
    spec = _spec().maintenance  # hourly, orphans daily
    firsts = [spread_first_runs(f"ns/t{index}", spec, since_s=1000.0) for index in range(2000)]
    assert all(set(first) == {DANGLING, MANIFESTS, EXPIRE, ORPHANS} for first in firsts)
    expiries = [first[EXPIRE] for first in firsts]
    assert all(1000.0 <= when < 1000.0 + 3600 for when in expiries)
    per_quarter = [sum(1000 + 900 * q <= when < 1000 + 900 * (q + 1) for when in expiries) for q in range(4)]
    assert all(400 < count < 600 for count in per_quarter), per_quarter
    assert max(first[ORPHANS] for first in firsts) > 1000.0 + 3600  # over its day
    assert sum(first[EXPIRE] == first[MANIFESTS] for first in firsts) == 0  # a point per job
    assert spread_first_runs("ns/t7", spec, since_s=1000.0) == firsts[7]

    runtime = TableRuntime(table_id="ns/t7", spec=_spec(), maintenance_since_s=1000.0)
    first = min(firsts[7].values())
    job = min(firsts[7], key=lambda j: firsts[7][j])
    assert runtime.due_maintenance(first - 1) is None
    assert runtime.next_maintenance_s(job, 1000.0) == first
    assert runtime.due_maintenance(first) == job
    assert due_jobs(spec, {}, now_s=first - 1, first_runs=firsts[7]) == []
    assert due_jobs(spec, {}, now_s=1000.0 + 86400, first_runs=firsts[7]) == list(job_intervals(spec))


def test_a_settled_job_waits_for_the_table_to_change() -> None:
    """A job that left nothing to do on the table's metadata file (manifests, dangling deletes,
    an expiry with only snapshots kept at any age) is not due again until the file moves, or its
    settings change; the status shows no next run meanwhile."""
    runtime = TableRuntime(table_id="ns/t", spec=_spec())
    runtime.evaluated_metadata = "s3://wh/t/metadata/00001.json"
    runtime.on_maintenance_started(DANGLING)
    runtime.on_maintenance_done(
        MaintenanceReport(DANGLING, "nothing dangling", settled_at="s3://wh/t/metadata/00001.json"), now_s=0
    )
    for job in (MANIFESTS, EXPIRE):
        runtime.on_maintenance_started(job)
        runtime.on_maintenance_done(MaintenanceReport(job, "nothing to do"), now_s=0)
    runtime.on_maintenance_started(ORPHANS)
    runtime.on_maintenance_done(MaintenanceReport(ORPHANS, "none"), now_s=0)
    assert runtime.due_maintenance(3600) == MANIFESTS  # unsettled: one interval later
    assert runtime.next_maintenance_s(DANGLING, 3600) is None
    assert maintenance_status(runtime, str)["dangling-deletes"]["nextDue"] is None
    runtime.on_maintenance_started(MANIFESTS)
    runtime.on_maintenance_done(
        MaintenanceReport(MANIFESTS, "nothing", settled_at="s3://wh/t/metadata/00001.json"), now_s=3600
    )
    assert runtime.due_maintenance(3600) == EXPIRE
    runtime.on_maintenance_started(EXPIRE)
    runtime.on_maintenance_done(
        MaintenanceReport(EXPIRE, "nothing", settled_at="s3://wh/t/metadata/00001.json"), now_s=3600
    )
    assert runtime.due_maintenance(80000) is None  # every hourly job settled, orphans not yet due
    assert runtime.due_maintenance(86400) == ORPHANS  # orphans are never settled: they depend on time
    runtime.evaluated_metadata = "s3://wh/t/metadata/00002.json"  # a writer committed
    assert runtime.due_maintenance(10000) == DANGLING
    runtime.evaluated_metadata = "s3://wh/t/metadata/00001.json"
    assert runtime.due_maintenance(10000) is None
    runtime.update_spec(_spec(snapshotRetention={"minSnapshots": 2}))
    assert runtime.due_maintenance(10000) == DANGLING  # new settings: every job looks again
