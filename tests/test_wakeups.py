"""The engine's queue of when to look at each table next, and the times a table asks for."""

from __future__ import annotations

import math
from typing import Any

from floe.api.table import OptimizedTableSpec
from floe.maintenance.job import MaintenanceJob, MaintenanceReport
from floe.optimizing.refresh_cadence import RefreshCadence
from floe.optimizing.table_state import TableRuntime
from floe.optimizing.wakeups import TableWakeups, next_visit_s
from floe.planning.files import ContentFile, FileKind, PartitionKey, TableFiles
from floe.planning.plan import OptimizingPlan, OptimizingType, PlannedTask

P = PartitionKey(0, ())
CADENCE = RefreshCadence(min_interval_s=10.0, max_interval_s=600.0)
NO_JOBS = {
    job: {"enabled": False} for job in ("snapshotRetention", "orphanFiles", "manifests", "danglingDeletes")
}


def test_tables_come_out_in_time_order_once_their_time_has_come() -> None:
    wakeups = TableWakeups()
    wakeups.wake_at("b", 20)
    wakeups.wake_at("a", 10)
    wakeups.wake_at("c", 30)
    assert wakeups.pop_due(5) == []
    assert wakeups.pop_due(25) == ["a", "b"]
    assert wakeups.pop_due(25) == [] and len(wakeups) == 1  # taken off until put back


def test_an_earlier_wake_up_stays_and_schedule_replaces_it() -> None:
    wakeups = TableWakeups()
    wakeups.wake_at("t", 10)
    wakeups.wake_at("t", 50)  # later: the earlier one stays
    assert wakeups.pop_due(10) == ["t"]
    wakeups.wake_at("t", 50)
    wakeups.wake_at("t", -math.inf)  # something happened: at once
    assert wakeups.pop_due(0) == ["t"] and wakeups.pop_due(100) == []  # once, not twice
    wakeups.wake_at("t", 10)
    wakeups.schedule("t", 50)  # what the table is now asks for later
    assert wakeups.pop_due(49) == [] and wakeups.pop_due(50) == ["t"]
    wakeups.wake_at("t", 10)
    wakeups.schedule("t", math.inf)  # nothing is ever due by itself
    wakeups.discard("u")
    assert wakeups.pop_due(math.inf) == [] and len(wakeups) == 0


def test_many_moved_wake_ups_do_not_pile_up() -> None:
    wakeups = TableWakeups()
    for step in range(10_000):
        wakeups.wake_at("t", 1_000_000 - step)
        wakeups.pop_due(0)
    assert len(wakeups._heap) < 200
    assert wakeups.pop_due(math.inf) == ["t"]


def _runtime(**maintenance: Any) -> TableRuntime:
    spec = OptimizedTableSpec.model_validate(
        {"table": "db.t", "catalog": {"name": "c"}, "maintenance": {**NO_JOBS, **maintenance}}
    )
    return TableRuntime("ns/t", spec)


def _evaluate(runtime: TableRuntime, now_s: float, kind: OptimizingType | None = None) -> None:
    """A refresh at `now_s` that found a new snapshot and evaluated it."""
    data = tuple(ContentFile(f"f{i}", FileKind.DATA, P, 10, 100, 1) for i in range(3))
    tasks = (PlannedTask(P, data, ()),) if kind else ()
    runtime.on_evaluated(TableFiles(5, 1, data, ()), OptimizingPlan(5, 1, kind, (), tasks), now_s)
    runtime.refresh.on_checked(now_s, CADENCE, runtime.table_id, changed=True)


def test_an_idle_table_asks_for_its_next_refresh_and_a_new_one_at_once() -> None:
    runtime = _runtime()
    assert next_visit_s(runtime, 100) == -math.inf  # never refreshed
    _evaluate(runtime, 100)
    # The shortest interval after a change, spread by up to 10 % either way.
    assert next_visit_s(runtime, 100) == runtime.refresh.next_s and 109 <= runtime.refresh.next_s <= 111


def test_a_pending_table_asks_every_round_a_busy_one_never_by_itself() -> None:
    runtime = _runtime()
    _evaluate(runtime, 100, OptimizingType.MINOR)
    assert next_visit_s(runtime, 103) == 103
    runtime.on_planning(103)
    assert next_visit_s(runtime, 104) == math.inf  # its process's end is a happening
    runtime.on_planned(OptimizingPlan(5, 1, None, (), ()), "")
    assert next_visit_s(runtime, 105) == runtime.refresh.next_s  # idle again: the refresh it had


def test_a_disabled_table_never_asks() -> None:
    runtime = _runtime()
    runtime.update_spec(runtime.spec.model_copy(update={"enabled": False}))
    assert next_visit_s(runtime, 0) == math.inf


def test_maintenance_asks_for_its_next_job_but_not_while_one_runs_or_before_a_read() -> None:
    runtime = _runtime(snapshotRetention={"interval": "1h"})
    job = MaintenanceJob.EXPIRE
    runtime.refresh.next_s = 3600 * 24
    assert next_visit_s(runtime, 5) == 3600 * 24  # never read: its refresh reads it first
    _evaluate(runtime, 0)
    runtime.refresh.next_s = 3600 * 24
    assert next_visit_s(runtime, 5) == 5  # never ran: due now
    runtime.on_maintenance_started(job)
    assert next_visit_s(runtime, 6) == 3600 * 24  # its end is a happening
    runtime.on_maintenance_done(MaintenanceReport(job, "expired nothing"), now_s=7)
    assert next_visit_s(runtime, 8) == 7 + 3600
