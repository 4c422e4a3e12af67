"""Why a table is not being optimized right now, in words a data engineer understands.

Amoro's users see tables sit in PENDING with no way to tell why. `why_waiting` answers from
what the engine already holds (the table's runtime and its group's planning queue): no
catalog call, no scan. Pure: the caller passes the clock's time.
"""

from __future__ import annotations

from dataclasses import dataclass

from floe.optimizing.table_state import TableRuntime, TableState
from floe.scheduling.records import PlanningQueue


@dataclass(frozen=True)
class GroupFacts:
    """What the table's optimizer group tells about its wait."""

    name: str
    exists: bool
    autoscaled: bool
    queue: PlanningQueue | None
    """The group's planning queue; None when the group does not exist."""


@dataclass(frozen=True)
class Waiting:
    """What a table waits for: a reason (CamelCase, for conditions and filters) and the words."""

    reason: str
    message: str
    queue_position: int | None = None
    """1 for the next table the group plans; None when the table is not in the queue."""
    queue_length: int | None = None


def why_waiting(runtime: TableRuntime, group: GroupFacts, occupation: float, now_s: float) -> Waiting:
    """The table's wait, the first that applies: refused, catalog or table unreachable, busy,
    disabled, nothing due, then (pending) what holds its planning back, in the order the engine
    checks it."""
    if runtime.refusal:
        return Waiting("Refused", f"floe refuses the table: {runtime.refusal}")
    if runtime.catalog_error:
        return Waiting("CatalogUnavailable", f"its catalog does not answer: {runtime.catalog_error}")
    if runtime.last_error and runtime.evaluated_snapshot_id is None and runtime.state != TableState.PENDING:
        return Waiting("TableUnavailable", f"the table could not be read: {runtime.last_error}")
    if runtime.busy:
        if runtime.state == TableState.COMMITTING and runtime.last_error:
            return Waiting("CommitRetrying", f"its commit is retried: {runtime.last_error}")
        return Waiting(
            "Optimizing", f"{runtime.state.value.lower().replace('_', ' ')} (process {runtime.process_id})"
        )
    if runtime.state == TableState.DISABLED:
        return Waiting("Disabled", "optimizing is disabled in its spec (optimizing.enabled: false)")
    if runtime.state != TableState.PENDING:
        return Waiting(
            "NothingDue", "no trigger fired at its current snapshot; `floe explain` shows each trigger"
        )
    return _pending(runtime, group, occupation, now_s)


def _pending(runtime: TableRuntime, group: GroupFacts, occupation: float, now_s: float) -> Waiting:
    due = runtime.pending_reason or "optimizing is due"
    if not group.exists or group.queue is None:
        return Waiting("GroupMissing", f"{due}, but optimizer group {group.name!r} does not exist")
    if runtime.maintaining is not None and runtime.maintaining.commits:
        return Waiting(
            "MaintenanceRunning", f"{due}; waits for its {runtime.maintaining} job to commit first"
        )
    interval = runtime.spec.min_plan_interval
    if runtime.last_plan_s is not None and now_s - runtime.last_plan_s < interval:
        left = runtime.last_plan_s + interval - now_s
        return Waiting(
            "MinPlanInterval",
            f"{due}; planned {now_s - runtime.last_plan_s:.0f} s ago, "
            f"plans again in {left:.0f} s (minPlanInterval)",
        )
    queue = group.queue
    ids = queue.table_ids
    position = ids.index(runtime.table_id) + 1 if runtime.table_id in ids else None
    where = dict(queue_position=position, queue_length=len(ids))
    if queue.threads == 0:
        if group.autoscaled:
            return Waiting(
                "WaitingForScaleUp",
                f"{due}; group {group.name!r} has no executor yet and scales up for it",
                **where,
            )
        return Waiting(
            "NoExecutors",
            f"{due}; group {group.name!r} has no executor: its optimizer is not running or has 0 executors",
            **where,
        )
    if queue.threads_taken:
        return Waiting(
            "ExecutorsBusy",
            f"{due}; all {queue.threads} executor threads of group {group.name!r} "
            "have tasks waiting to start",
            **where,
        )
    if occupation >= 1.0 and position is not None and position > 1:
        return Waiting(
            "OverQuota",
            f"{due}; it used {occupation:.0%} of its quota over the last hour, "
            "and tables under quota go first",
            **where,
        )
    if position is None:
        return Waiting("Planning", f"{due}; the group is planning it", **where)
    return Waiting(
        "Queued", f"{due}; {_ordinal(position)} of {len(ids)} tables waiting in group {group.name!r}", **where
    )


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
