"""The table runtime's state machine, driven with plain values and a clock."""

from __future__ import annotations

import pytest

from floe.api.table import OptimizedTableSpec
from floe.maintenance.job import MaintenanceJob, MaintenanceReport
from floe.optimizing.table_state import IllegalTransition, TableRuntime, TableState
from floe.planning.files import ContentFile, FileKind, PartitionKey, TableFiles
from floe.planning.plan import OptimizingPlan, OptimizingType, PlannedTask
from floe.tables.history import OptimizingHistory

P = PartitionKey(0, ())


def _spec(**changes: object) -> OptimizedTableSpec:
    return OptimizedTableSpec.model_validate(
        {"table": "db.t", "catalog": {"name": "c"}, "minPlanInterval": "60s", **changes}
    )


def _files(snapshot_id: int, n: int = 3) -> TableFiles:
    data = tuple(ContentFile(f"f{i}", FileKind.DATA, P, 10, 100, 1) for i in range(n))
    return TableFiles(snapshot_id, 1, data, ())


def _plan(snapshot_id: int, kind: OptimizingType | None) -> OptimizingPlan:
    files = _files(snapshot_id)
    tasks = (PlannedTask(P, files.data_files, ()),) if kind else ()
    return OptimizingPlan(snapshot_id, 1, kind, (), tasks)


def test_metadata_that_moved_without_a_snapshot_is_evaluated_again() -> None:
    """A new table property (target file size) or schema makes a metadata file, not a snapshot."""
    r = TableRuntime("ns/t", _spec())
    r.on_evaluated(_files(5), _plan(5, None), now_s=0, metadata_location="s3://w/t/metadata/1.json")
    assert not r.needs_evaluation(5, "s3://w/t/metadata/1.json")
    assert r.needs_evaluation(5, "s3://w/t/metadata/2.json")
    assert r.needs_evaluation(6, "s3://w/t/metadata/1.json")


def test_full_cycle() -> None:
    r = TableRuntime("ns/t", _spec())
    assert r.needs_evaluation(5)
    r.on_evaluated(_files(5), _plan(5, OptimizingType.MINOR), now_s=100)
    assert r.state == TableState.PENDING and "minor" in r.pending_reason
    assert not r.needs_evaluation(5)  # unchanged snapshot is not rescanned
    assert r.may_plan(100)
    r.on_planning(100)
    assert r.state == TableState.PLANNING and r.busy
    r.on_planned(_plan(5, OptimizingType.MAJOR), "p1")
    assert r.state == TableState.MAJOR_OPTIMIZING and r.process_id == "p1"
    r.on_committing()
    r.on_committed(OptimizingType.MAJOR, 6, "3 → 1", now_s=130)
    assert (
        r.state == TableState.IDLE and r.last_minor_s is None and r.last_major_s == 130
    )  # own type only, as in Amoro
    assert r.last_full_s is None and "major committed snapshot 6" in r.last_result
    assert r.needs_evaluation(6) and r.last_refresh_s is None and not r.settled


def test_min_plan_interval() -> None:
    r = TableRuntime("ns/t", _spec())
    r.on_evaluated(_files(5), _plan(5, OptimizingType.MINOR), now_s=0)
    r.on_planning(0)
    r.on_planning_failed("catalog timeout")
    assert r.state == TableState.PENDING and "planning failed: catalog timeout" in r.last_error
    assert not r.may_plan(59)
    assert r.may_plan(60)


def test_empty_plan_goes_idle() -> None:
    r = TableRuntime("ns/t", _spec())
    r.on_evaluated(_files(5), _plan(5, OptimizingType.MINOR), now_s=0)
    r.on_planning(0)
    r.on_planned(_plan(5, None), "")
    assert r.state == TableState.IDLE


def test_nothing_due_is_idle_and_settled() -> None:
    r = TableRuntime("ns/t", _spec())
    r.on_evaluated(_files(5), _plan(5, None), now_s=0)
    assert r.state == TableState.IDLE and r.settled


def test_disable_and_enable() -> None:
    r = TableRuntime("ns/t", _spec())
    r.update_spec(_spec(enabled=False))
    assert r.state == TableState.DISABLED and r.settled
    assert not r.needs_evaluation(9)
    r.update_spec(_spec(enabled=True))
    assert r.state == TableState.IDLE and r.needs_evaluation(9)


def test_disable_while_busy_takes_effect_after_the_process() -> None:
    r = TableRuntime("ns/t", _spec())
    r.on_evaluated(_files(5), _plan(5, OptimizingType.MINOR), now_s=0)
    r.on_planning(0)
    r.on_planned(_plan(5, OptimizingType.MINOR), "p1")
    r.update_spec(_spec(enabled=False))
    assert r.state == TableState.MINOR_OPTIMIZING
    r.on_committing()
    r.on_process_failed("boom")
    assert r.state == TableState.DISABLED and r.last_result == "failed: boom"


def test_changed_thresholds_force_reevaluation() -> None:
    r = TableRuntime("ns/t", _spec())
    r.on_evaluated(_files(5), _plan(5, None), now_s=0)
    assert not r.needs_evaluation(5)
    r.update_spec(_spec(quota=2))
    assert r.needs_evaluation(5)


def test_history_keeps_the_latest_times() -> None:
    r = TableRuntime("ns/t", _spec())
    r.on_history(OptimizingHistory(last_minor_s=50, last_major_s=None, last_full_s=10))
    r.on_history(OptimizingHistory(last_minor_s=40, last_major_s=30, last_full_s=None))
    assert (r.last_minor_s, r.last_major_s, r.last_full_s) == (50, 30, 10)
    assert r.last_optimized_s == 50


def test_illegal_transitions_are_refused() -> None:
    r = TableRuntime("ns/t", _spec())
    with pytest.raises(IllegalTransition):
        r.on_planning(0)
    with pytest.raises(IllegalTransition):
        r.on_committing()


def test_an_evaluation_of_a_jobs_own_commit_made_while_it_ran_keeps_its_verdict() -> None:
    r = TableRuntime(table_id="ns/t", spec=_spec())
    r.on_evaluated(_files(5), _plan(5, None), now_s=0, metadata_location="m/1.json")
    r.on_maintenance_started(MaintenanceJob.EXPIRE)
    # The expiry committed m/2.json; a refresh evaluated it while the expiry deleted files.
    r.on_evaluated(_files(5), _plan(5, None), now_s=1, metadata_location="m/2.json")
    r.on_settled({MaintenanceJob.EXPIRE}, "m/2.json")
    # The expiry found snapshots to expire on m/1.json: that says nothing of m/2.json.
    r.on_maintenance_done(MaintenanceReport(MaintenanceJob.EXPIRE, "expired 3 snapshots"), now_s=2)

    assert r.next_maintenance_s(MaintenanceJob.EXPIRE, now_s=2) is None
