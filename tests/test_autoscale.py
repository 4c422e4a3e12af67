"""The autoscaler's decisions, on plain values and a clock: up at once, down after the delay to
the highest count the delay's demand asked for, within the bounds; and a table's demand."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField
from test_engine import _table

from floe.api.group import AutoscalingSpec, OptimizerGroup, OptimizerGroupSpec
from floe.api.models import OptimizedTable
from floe.controller.scaling import GroupScaling, ScaleFigures, ScaleSample, core_seconds_due
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.registry import EngineEvent
from floe.optimizing.table_state import TableState
from floe.scheduling.autoscale import ExecutorAutoscaler, table_demand
from floe.service.task_service import TaskService
from floe.tables.writer import conform

SPEC = AutoscalingSpec.model_validate({"minExecutors": 0, "maxExecutors": 4, "scaleDownDelay": "60s"})


def test_scales_up_at_once_to_what_the_demand_fills_within_the_maximum() -> None:
    autoscaler = ExecutorAutoscaler()
    first = autoscaler.decide(SPEC, executor_cores=2, demand=3, current=0, now_s=0)
    assert (first.executors, first.changed) == (2, True)
    assert first.reason == "demand of 3 tasks wants 2 executors"
    assert autoscaler.decide(SPEC, 2, demand=50, current=2, now_s=1).executors == 4  # the maximum
    same = autoscaler.decide(SPEC, 2, demand=8, current=4, now_s=2)
    assert (same.executors, same.changed) == (4, False)


def test_scales_down_only_after_the_delay_to_the_delays_peak() -> None:
    autoscaler = ExecutorAutoscaler()
    assert not autoscaler.decide(SPEC, 1, demand=1, current=4, now_s=100).changed
    assert not autoscaler.decide(SPEC, 1, demand=3, current=4, now_s=130).changed
    waiting = autoscaler.decide(SPEC, 1, demand=0, current=4, now_s=159)
    assert not waiting.changed and "once it stays below 4 for 60s" in waiting.reason
    down = autoscaler.decide(SPEC, 1, demand=0, current=4, now_s=160)
    # 3 executors' worth was asked for within the delay: the group keeps 3, not 0.
    assert (down.executors, down.changed) == (3, True)
    assert down.reason == "demand stayed at most 3 executors' worth for 60s (now 0 tasks)"
    assert not autoscaler.decide(SPEC, 1, demand=0, current=3, now_s=161).changed
    assert autoscaler.decide(SPEC, 1, demand=0, current=3, now_s=221).executors == 0  # scaled to zero


def test_flapping_demand_moves_nothing_within_the_delay() -> None:
    """A burst that ebbs and comes back within the delay: no scale-down, and the clock restarts."""
    autoscaler = ExecutorAutoscaler()
    decisions = [
        autoscaler.decide(SPEC, 1, demand=demand, current=2, now_s=now)
        for now, demand in ((0, 0), (30, 1), (50, 2), (70, 0), (100, 1), (129, 0))
    ]
    assert not any(d.changed for d in decisions)
    assert autoscaler.decide(SPEC, 1, demand=0, current=2, now_s=130).executors == 1  # 60 s after 70


def test_the_minimum_is_kept_and_a_count_outside_the_bounds_is_brought_in() -> None:
    spec = AutoscalingSpec.model_validate({"minExecutors": 1, "maxExecutors": 3, "scaleDownDelay": "0s"})
    autoscaler = ExecutorAutoscaler()
    assert autoscaler.decide(spec, 1, demand=0, current=2, now_s=0).executors == 1
    assert not autoscaler.decide(spec, 1, demand=0, current=1, now_s=1).changed
    shrunk = autoscaler.decide(spec, 1, demand=0, current=7, now_s=2)  # maxExecutors lowered
    assert (shrunk.executors, shrunk.changed) == (3, True)
    assert shrunk.reason == "7 executors are outside minExecutors 1 .. maxExecutors 3"


def test_a_tables_demand_is_capped_by_its_quota() -> None:
    assert table_demand(10, quota=0.5, max_threads=8) == 4  # half of the group at its largest
    assert table_demand(10, quota=3, max_threads=8) == 3  # a quota above 1 is threads
    assert table_demand(2, quota=0.5, max_threads=8) == 2
    assert table_demand(5, quota=0.01, max_threads=8) == 1  # a table with work always counts
    assert table_demand(0, quota=0.5, max_threads=8) == 0


def test_a_group_is_manual_or_autoscaled() -> None:
    manual = OptimizerGroupSpec()
    assert (manual.executors, manual.initial_executors, manual.max_threads) == (None, 1, 1)
    auto = OptimizerGroupSpec.model_validate(
        {"executorCores": 2, "autoscaling": {"minExecutors": 1, "maxExecutors": 5}}
    )
    assert (auto.executors, auto.initial_executors, auto.max_threads) == (None, 1, 10)
    with pytest.raises(ValueError, match=re.escape("set spec.executors (a fixed count) or spec.autoscaling")):
        OptimizerGroupSpec.model_validate({"executors": 2, "autoscaling": {"maxExecutors": 5}})
    with pytest.raises(
        ValueError, match=re.escape("minExecutors (6) must not exceed autoscaling.maxExecutors (5)")
    ):
        OptimizerGroupSpec.model_validate({"autoscaling": {"minExecutors": 6, "maxExecutors": 5}})
    with pytest.raises(ValueError, match="scaleDownDelay must not be negative"):
        OptimizerGroupSpec.model_validate({"autoscaling": {"maxExecutors": 5, "scaleDownDelay": "-1"}})


# -- the engine's demand, on real tables -----------------------------------------------------


def _autoscaled_group(name: str, max_executors: int) -> OptimizerGroup:
    return OptimizerGroup.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizerGroup",
            "metadata": {"name": name},
            "spec": {"executorCores": 1, "autoscaling": {"maxExecutors": max_executors}},
        }
    )


def partitioned_small_files(catalog: SqlCatalog, name: str, partitions: int) -> None:
    """Three appends of one small file per partition: a task per partition is due."""
    schema = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "p", LongType(), required=True)
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
    table = catalog.create_table(name, schema, partition_spec=spec)
    for start in range(0, 30, 10):
        append_to_each_partition(table, partitions, start)


def append_to_each_partition(table: Table, partitions: int, first_id: int) -> None:
    """One append of ten rows (ids from `first_id`) to each of the partitions 0 to `partitions` - 1
    of a table that `partitioned_small_files` made: a small file in each."""
    ids = [i for i in range(first_id, first_id + 10) for _ in range(partitions)]
    parts = [p for _ in range(10) for p in range(partitions)]
    rows = pa.table({"id": pa.array(ids, pa.int64()), "p": pa.array(parts, pa.int64())})
    table.append(conform(table, rows))


def test_the_engines_demand_counts_due_tasks_capped_by_quota(sql_catalog: SqlCatalog) -> None:
    """Two tables due for minor optimizing, one task per partition. At zero threads an
    autoscaled group plans for its largest (4 threads): the 6-partition table is planned with 4
    tasks, which fill them, so the other stays pending with its 1 task due. The demand is the
    queued tasks of one and the due task of the other, the first capped by its quota (0.5 of 4
    threads = 2). Neither table is stuck or warned about."""
    partitioned_small_files(sql_catalog, "db.wide", 6)
    partitioned_small_files(sql_catalog, "db.narrow", 1)
    engine = OptimizingEngine(TaskService(clock=time.time, registration_token="t"), refresh_interval_s=0.1)
    events: list[EngineEvent] = []
    engine.subscribe(events.append)

    def table(name: str) -> OptimizedTable:
        manifest = _table(sql_catalog, "g", minor={"triggerFileCount": 2}, quota=0.5)
        manifest.metadata.name = name
        manifest.spec.table = f"db.{name}"
        return manifest

    def tick_until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 60
        while not done():
            assert time.monotonic() < deadline, engine.table_views()
            engine.tick()
            time.sleep(0.1)

    try:
        engine.apply_group(_autoscaled_group("g", max_executors=4))
        wide = engine.apply_table(table("wide"))
        tick_until(lambda: wide.process_id is not None)
        narrow = engine.apply_table(table("narrow"))
        tick_until(lambda: narrow.state == TableState.PENDING)
        for _ in range(5):  # more rounds: the planned tasks fill the threads planned for
            engine.tick()
            time.sleep(0.1)
        queued = {v.table: v.queued_tasks for v in engine.table_views()}
        assert queued == {"db.wide": 4, "db.narrow": 0}, queued
        assert (wide.due_tasks, narrow.due_tasks, narrow.state) == (6, 1, TableState.PENDING)
        assert "scaling up from no executors" in narrow.pending_reason
        assert engine.group_demand("g") == 2 + 1
        assert engine.group_demand("other") == 0
        assert engine.stuck_tables() == {}
        assert not [e for e in events if e.reason == "NoOptimizer"]
    finally:
        engine.close()


def test_the_operators_group_scaling_reports_waking_and_figures() -> None:
    scaling = GroupScaling()
    manual = OptimizerGroupSpec.model_validate({"executors": 3})
    fixed = scaling.decide("ns/m", manual, demand=10, current=1, now_s=0)
    assert (fixed.executors, fixed.changed) == (3, True)
    auto = OptimizerGroupSpec.model_validate({"autoscaling": {"maxExecutors": 2, "scaleDownDelay": "0s"}})
    assert scaling.decide("ns/a", auto, demand=1, current=0, now_s=100).executors == 1
    starts: list[float] = [90.0]  # a task that started before the group woke does not count

    def first_start_since(since: float) -> float | None:
        return next((t for t in starts if t >= since), None)

    assert scaling.first_task_after_waking("ns/a", first_start_since) is None
    starts += [104.0, 104.5]  # a task shorter than a status pass, finished before it
    assert scaling.first_task_after_waking("ns/a", first_start_since) == 4
    assert scaling.first_task_after_waking("ns/a", first_start_since) is None, "said once"
    scaling.record("ns/a", ScaleFigures(desired=1, ready=1, demand=1), now_s=110, cores=2, static_executors=2)
    assert list(scaling.samples()) == [ScaleSample("ns/a", 1, 1, 1, 0.0, 0.0)]
    scaling.forget("ns/a")
    assert list(scaling.samples()) == []


def test_executor_time_counts_held_cores_against_a_static_group_at_the_peak() -> None:
    scaling = GroupScaling()
    # Resumed from a status written before a restart, then: 1 executor of 2 cores for 60 s, 0 for
    # 100 s, 2 for 40 s; a static group of maxExecutors 2 holds 4 cores all along.
    scaling.resume_time("ns/a", held_s=1000.0, static_s=2000.0)
    for now, ready in ((0.0, 1), (60.0, 0), (160.0, 2), (200.0, 2)):
        meter = scaling.record("ns/a", ScaleFigures(2, ready, 0), now_s=now, cores=2, static_executors=2)
    assert (meter.held_s, meter.static_s) == (1000 + 60 * 2 + 40 * 4, 2000 + 200 * 4)
    scaling.resume_time("ns/a", held_s=0.0, static_s=0.0)  # only before the first record
    [sample] = scaling.samples()
    assert (sample.held_core_s, sample.static_core_s) == (1280, 2800)
    # A clock that goes back counts nothing, and the figures it brings count from then.
    assert (
        scaling.record("ns/a", ScaleFigures(2, 2, 0), now_s=150.0, cores=2, static_executors=2).held_s == 1280
    )


def test_executor_core_seconds_alone_are_written_once_a_minute_of_peak_cores() -> None:
    """A static group's core-seconds grow every 5 s round: alone they patch the status when a
    counter leaves zero or has grown by a minute of the group's peak cores (here 2 x 2), not
    every round; the first status has them at once."""
    written = {"held": 400, "static": 800}
    assert core_seconds_due({}, {"held": 0, "static": 0}, 4)
    assert not core_seconds_due(written, {"held": 420, "static": 820}, 4)
    assert not core_seconds_due(written, {"held": 400, "static": 1039}, 4)
    assert core_seconds_due(written, {"held": 400, "static": 1040}, 4)
    assert core_seconds_due({"held": 0, "static": 800}, {"held": 20, "static": 820}, 4)
    assert not core_seconds_due({"held": 0, "static": 0}, {"held": 0, "static": 0}, 4)
