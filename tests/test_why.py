"""What a table waits for (`floe.optimizing.waiting`), its health score (`floe.planning.health`)
and each trigger's value against its threshold (`floe.planning.triggers`): plain values and a
clock, each answer checked against the decision the evaluator makes on the same files."""

from __future__ import annotations

from dataclasses import replace

import pytest

from floe.api.table import OptimizedTableSpec
from floe.maintenance.job import MaintenanceJob
from floe.optimizing.table_state import TableRuntime, TableState
from floe.optimizing.waiting import GroupFacts, why_waiting
from floe.planning.config import MiB, OptimizingConfig
from floe.planning.files import ContentFile, FileKind, PartitionKey, TableFiles
from floe.planning.health import table_health
from floe.planning.plan import OptimizingPlan, OptimizingType, PlannedTask
from floe.planning.table_evaluation import evaluate_table
from floe.planning.triggers import Trigger, table_triggers
from floe.scheduling.records import PlanningQueue

P = PartitionKey(0, ())
CONFIG = OptimizingConfig(target_size=8 * MiB, max_task_size_bytes=8 * MiB)
NOW = 100_000.0


def data(name: str, mib: float, rows: int = 1000, seq: int = 1) -> ContentFile:
    return ContentFile(f"data/{name}", FileKind.DATA, P, rows, int(mib * MiB), seq)


def equality(rows: int, seq: int = 9) -> ContentFile:
    return ContentFile(
        f"deletes/eq-{seq}", FileKind.EQUALITY_DELETES, P, rows, rows * 8, seq, equality_ids=(1,)
    )


def positions(target: ContentFile, rows: int, seq: int = 5) -> ContentFile:
    return ContentFile(
        f"deletes/{target.path}-pos",
        FileKind.POSITION_DELETES,
        P,
        rows,
        rows * 4,
        seq,
        referenced_data_file=target.path,
    )


def files(data_files: list[ContentFile], deletes: list[ContentFile] = ()) -> TableFiles:  # type: ignore[assignment]
    return TableFiles(1, 10, tuple(data_files), tuple(deletes))


def triggers(
    table: TableFiles, config: OptimizingConfig = CONFIG, last_minor: float | None = NOW
) -> dict[str, Trigger]:
    [partition] = table_triggers(table, config, NOW, last_minor, None)
    return {t.name: t for t in partition.triggers}


# -- triggers ---------------------------------------------------------------------------------


def test_amoros_triggers_show_the_values_the_evaluator_decides_on() -> None:
    frags = [data(f"f{i}", 0.1) for i in range(5)]
    seg = data("seg", 8, rows=10_000)
    table = files([*frags, seg], [equality(10), positions(seg, 500)])
    shown = triggers(table, replace(CONFIG, minor_trigger_file_count=6))
    assert (
        shown["fragments + equality-delete files"].value,
        shown["fragments + equality-delete files"].threshold,
    ) == (6, 6)
    assert shown["fragments + equality-delete files"].fired
    assert shown["deleted rows of the most deleted segment"].value == pytest.approx(0.05)
    assert not shown["deleted rows of the most deleted segment"].fired
    [decision] = evaluate_table(table, replace(CONFIG, minor_trigger_file_count=6), NOW, NOW, None)
    assert decision.optimizing_type == OptimizingType.MINOR
    # One file fewer: the count no longer fires, and neither does the evaluator.
    fewer = files([*frags[:4], seg], [equality(10), positions(seg, 500)])
    assert not triggers(fewer, replace(CONFIG, minor_trigger_file_count=6))[
        "fragments + equality-delete files"
    ].fired
    [decision] = evaluate_table(fewer, replace(CONFIG, minor_trigger_file_count=6), NOW, NOW, None)
    assert decision.optimizing_type is None


def test_an_interval_tells_when_it_fires_next_and_an_off_one_says_so() -> None:
    table = files([data("f0", 0.1), data("f1", 0.1)])
    minor = triggers(table, last_minor=NOW - 600)["minor interval"]
    assert (minor.value, minor.threshold, minor.fired) == (600, 3600, False)
    assert minor.next_s == NOW - 600 + 3600
    assert triggers(table, last_minor=NOW - 4000)["minor interval"].fired
    assert triggers(table, last_minor=None)["minor interval"].fired  # never optimized: elapsed
    full = triggers(table)["full interval"]
    assert (full.threshold, full.fired) == (None, False)  # off by default


def test_floes_triggers_follow_its_levels_share_and_conversions() -> None:
    floe = replace(CONFIG, policy="floe")
    seg = data("seg", 8, rows=10_000)
    table = files([seg, *(data(f"f{i}", 0.01) for i in range(3))], [positions(seg, 5_000), equality(5)])
    shown = triggers(table, floe)
    assert shown["deleted rows of the most deleted file"].value == pytest.approx(0.5)
    assert shown["deleted rows of the most deleted file"].fired  # past balanced's 0.4
    assert shown["files with deletes to convert"].fired
    assert shown["fragments in the fullest level"].threshold == 8
    assert not shown["fragments in the fullest level"].fired


# -- health -----------------------------------------------------------------------------------


def test_health_is_100_for_target_sized_files_without_deletes_and_loses_points_for_each_cost() -> None:
    healthy = [data(f"s{i}", 8, rows=10_000) for i in range(12)]
    assert table_health(files(healthy), CONFIG).score == 100
    small = [data(f"f{i}", 0.08) for i in range(12)]
    health = table_health(files(small), CONFIG)
    assert (
        health.small_files == pytest.approx(0.99) and health.score == 60 and health.worst() == "small files"
    )
    # Equality-deleted rows at the duplicate ratio: all 40 of their points.
    with_eq = table_health(files(healthy, [equality(12_000)]), CONFIG)
    assert with_eq.equality_deletes == 1.0 and with_eq.score == 60
    with_pos = table_health(files(healthy, [positions(healthy[0], 6_000)]), CONFIG)
    assert with_pos.position_deletes == pytest.approx(0.5) and with_pos.score == 90
    # Three small files of a new table count for a quarter (minor.triggerFileCount 12).
    assert table_health(files(small[:3]), CONFIG).score == 90
    assert table_health(files([]), CONFIG).score == 100


# -- what a table waits for -------------------------------------------------------------------


def runtime(state: TableState = TableState.PENDING) -> TableRuntime:
    r = TableRuntime("ns/t", OptimizedTableSpec.model_validate({"table": "db.t", "catalog": {"name": "c"}}))
    r.state, r.pending_reason = state, "minor due in 2 partitions"
    return r


def group(table_ids: tuple[str, ...] = ("ns/a", "ns/t"), threads: int = 2, taken: bool = False) -> GroupFacts:
    return GroupFacts("g", exists=True, autoscaled=False, queue=PlanningQueue(table_ids, threads, taken))


def test_a_pending_table_is_told_its_place_in_the_queue() -> None:
    waiting = why_waiting(runtime(), group(), occupation=0.2, now_s=NOW)
    assert waiting.reason == "Queued" and (waiting.queue_position, waiting.queue_length) == (2, 2)
    assert waiting.message == "minor due in 2 partitions; 2nd of 2 tables waiting in group 'g'"


@pytest.mark.parametrize(
    ("facts", "occupation", "reason", "words"),
    [
        (group(threads=0), 0.0, "NoExecutors", "has no executor"),
        (replace(group(threads=0), autoscaled=True), 0.0, "WaitingForScaleUp", "scales up for it"),
        (group(taken=True), 0.0, "ExecutorsBusy", "all 2 executor threads"),
        (group(), 1.3, "OverQuota", "it used 130% of its quota"),
        (group(("ns/t", "ns/a")), 1.3, "Queued", "1st of 2"),  # first anyway: no one under quota waits
        (GroupFacts("g", exists=False, autoscaled=False, queue=None), 0.0, "GroupMissing", "does not exist"),
    ],
)
def test_what_holds_a_pending_table_back(
    facts: GroupFacts, occupation: float, reason: str, words: str
) -> None:
    waiting = why_waiting(runtime(), facts, occupation, NOW)
    assert waiting.reason == reason and words in waiting.message


def test_min_plan_interval_and_a_committing_maintenance_job_come_before_the_queue() -> None:
    r = runtime()
    r.last_plan_s = NOW - 20
    waiting = why_waiting(r, group(), 0.0, NOW)
    assert waiting.reason == "MinPlanInterval" and "plans again in 40 s" in waiting.message
    r.last_plan_s = None
    r.maintaining = MaintenanceJob.DANGLING_DELETES
    assert why_waiting(r, group(), 0.0, NOW).reason == "MaintenanceRunning"


def test_a_table_not_pending_says_why() -> None:
    assert why_waiting(runtime(TableState.IDLE), group(), 0.0, NOW).reason == "NothingDue"
    assert why_waiting(runtime(TableState.DISABLED), group(), 0.0, NOW).reason == "Disabled"
    busy = runtime(TableState.PLANNING)
    busy.on_planned(OptimizingPlan(5, 1, OptimizingType.MINOR, (), (PlannedTask(P, (), ()),)), "p1")
    assert why_waiting(busy, group(), 0.0, NOW).message == "minor optimizing (process p1)"
    refused = runtime(TableState.IDLE)
    refused.refusal = "equality deletes on a column floe cannot compare"
    assert why_waiting(refused, group(), 0.0, NOW).reason == "Refused"
    unreachable = runtime(TableState.IDLE)
    unreachable.catalog_error = "connection refused"
    assert why_waiting(unreachable, group(), 0.0, NOW).reason == "CatalogUnavailable"
