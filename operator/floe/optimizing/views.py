"""What the engine shows of its tables and groups: each table's status row, its quota
occupation, the tables that cannot progress without help, and each group's demand for
executors. Read under the registry's lock, from the schedulers' figures."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from floe.api.history import RunRecord
from floe.maintenance.job import MaintenanceJob
from floe.optimizing.registry import TableRegistry
from floe.optimizing.table_state import MaintenanceRun, TableRuntime, TableState
from floe.optimizing.waiting import GroupFacts, Waiting, why_waiting
from floe.planning.health import TableHealth
from floe.scheduling.autoscale import table_demand
from floe.scheduling.records import PlanningQueue


@dataclass(frozen=True)
class TableView:
    """One row of status: the runtime plus its scheduling figures."""

    table_id: str
    table: str
    group: str
    group_key: str
    """The group's name in the TaskService (`OptimizingEngine.group_key`)."""
    state: str
    quota: float
    occupation: float
    data_files: int
    delete_files: int
    running_tasks: int
    queued_tasks: int
    pending_reason: str
    last_result: str
    last_error: str
    maintenance: dict[MaintenanceJob, MaintenanceRun] = field(default_factory=dict)
    maintaining: MaintenanceJob | None = None
    health: int | None = None
    """The table's health score (`floe.planning.health`); None before its first evaluation."""
    process_id: str | None = None
    """The optimizing process in flight, if any."""
    due_tasks: int = 0
    """Tasks its would-be plan holds while it is PENDING or PLANNING (its demand before planning);
    0 otherwise."""


@dataclass(frozen=True)
class TableDetail:
    """What a table's own page shows beyond its `TableView`: its runs kept in memory (the last
    `floe.api.history.STATUS_HISTORY`, oldest first), its health's factors and its clock."""

    table_id: str
    catalog: str
    snapshot_id: int | None
    runs: tuple[RunRecord, ...]
    health: TableHealth | None
    pending_since_s: float | None
    last_refresh_s: float | None
    next_refresh_s: float | None
    """When its catalog is asked next; None: at the next round."""
    refresh_interval_s: float | None
    last_plan_s: float | None
    refusal: str


def table_views(registry: TableRegistry) -> list[TableView]:
    """Status of every table, ordered by id."""
    now = registry.clock()
    with registry.lock:
        stats = {name: registry.service.group(name).stats(now) for name in registry.groups}
        views = []
        for table_id in sorted(registry.runtimes):
            r = registry.runtimes[table_id]
            s = stats.get(registry.table_group_key(r), {}).get(table_id)
            views.append(
                TableView(
                    table_id=table_id,
                    table=r.spec.table,
                    group=r.group,
                    group_key=registry.table_group_key(r),
                    state=r.state.value,
                    quota=r.spec.quota,
                    occupation=s.occupation if s else 0.0,
                    data_files=r.data_files,
                    delete_files=r.delete_files,
                    running_tasks=s.running if s else 0,
                    queued_tasks=s.planned if s else 0,
                    pending_reason=r.pending_reason,
                    last_result=r.last_result,
                    last_error=r.last_error,
                    maintenance=dict(r.maintenance_runs),
                    maintaining=r.maintaining,
                    health=r.health.score if r.health else None,
                    process_id=r.process_id,
                    due_tasks=r.due_tasks if r.state in (TableState.PENDING, TableState.PLANNING) else 0,
                )
            )
        return views


def table_detail(registry: TableRegistry, table_id: str) -> TableDetail | None:
    """The table's `TableDetail`, read under the lock from its runtime alone; None for a table the
    engine does not have."""
    with registry.lock:
        r = registry.runtimes.get(table_id)
        if r is None:
            return None
        return TableDetail(
            table_id=table_id,
            catalog=r.spec.catalog.name,
            snapshot_id=r.snapshot_id,
            runs=tuple(r.runs),
            health=r.health,
            pending_since_s=r.pending_since_s,
            last_refresh_s=_last_refresh_s(r),
            next_refresh_s=r.refresh.next_check_at(),
            refresh_interval_s=r.refresh.interval_s,
            last_plan_s=r.last_plan_s,
            refusal=r.refusal,
        )


def occupations(registry: TableRegistry, only: Collection[str] | None = None) -> dict[str, float]:
    """Each table's (of those in `only`) quota occupation over the last hour (1.0 = its whole
    quota), by table id: what `table_views` says of it, for a fraction of the cost."""
    now = registry.clock()
    with registry.lock:
        runtimes = registry.runtimes
        table_ids = _known(registry, only)
        by_group: dict[str, list[str]] = {}
        for table_id in table_ids:
            by_group.setdefault(registry.table_group_key(runtimes[table_id]), []).append(table_id)
        result = dict.fromkeys(table_ids, 0.0)
        for key, ids in by_group.items():
            if key in registry.groups:
                result |= registry.service.group(key).occupations(now, ids)
        return result


def _known(registry: TableRegistry, only: Collection[str] | None) -> Collection[str]:
    """The tables of `only` the engine has, or all of them (hold the lock)."""
    runtimes = registry.runtimes
    return runtimes.keys() if only is None else [t for t in only if t in runtimes]


def occupied(registry: TableRegistry) -> dict[str, float]:
    """The occupation of every table that has any, by table id: from the tables with task time
    in each group's window, not a walk over every table."""
    now = registry.clock()
    with registry.lock:
        result: dict[str, float] = {}
        for key in registry.groups:
            result |= registry.service.group(key).occupied(now)
        return {t: share for t, share in result.items() if t in registry.runtimes}


def waits(
    registry: TableRegistry, occupation: Mapping[str, float], only: Collection[str] | None = None
) -> dict[str, Waiting]:
    """What each table (of those in `only`) waits for (`floe.optimizing.waiting`), by table id,
    given each table's quota occupation (`occupations`, which the caller has at hand): each
    group's planning queue is ordered once for all its tables."""
    now = registry.clock()
    with registry.lock:
        runtimes = registry.runtimes
        table_ids = _known(registry, only)
        queues: dict[str, PlanningQueue] = {}
        result = {}
        for table_id in table_ids:
            runtime = runtimes[table_id]
            key = registry.table_group_key(runtime)
            group = registry.groups.get(key)
            if group is not None and key not in queues:
                queues[key] = registry.service.group(key).planning_queue(now)
            facts = GroupFacts(
                name=runtime.group,
                exists=group is not None,
                autoscaled=group is not None and group.spec.autoscaling is not None,
                queue=queues.get(key),
            )
            result[table_id] = why_waiting(runtime, facts, occupation.get(table_id, 0.0), now)
        return result


def stuck_tables(registry: TableRegistry) -> dict[str, str]:
    """Tables that cannot progress without outside help, with the reason."""
    with registry.lock:
        stuck = {}
        for r in registry.runtimes.values():
            if r.busy:
                continue
            if r.refusal:
                stuck[r.table_id] = r.refusal
            elif r.last_error and r.evaluated_snapshot_id is None:
                stuck[r.table_id] = r.last_error
            elif r.state == TableState.PENDING and _unserved(registry, registry.table_group_key(r)):
                stuck[r.table_id] = r.pending_reason
        return stuck


def _unserved(registry: TableRegistry, group_key: str) -> bool:
    """The group does not exist, or has no thread and will not get one by itself (an
    autoscaled group brings its executors back when its demand asks)."""
    group = registry.groups.get(group_key)
    if group is None:
        return True
    return group.spec.autoscaling is None and registry.service.group(group_key).threads == 0


def group_demand(registry: TableRegistry, key: str) -> int:
    """Tasks the group's tables want run now (`floe.scheduling.autoscale`): a table's running
    and queued tasks, or, pending or planning, those its would-be plan holds; each table's
    capped by its quota in the group at its largest. 0 for a group the engine does not know."""
    return group_demands(registry, {key}).get(key, 0)


def group_demands(registry: TableRegistry, keys: Collection[str] | None = None) -> dict[str, int]:
    """`group_demand` of each group of `keys` (None: every group the engine knows), in one pass
    over the tables."""
    with registry.lock:
        groups = {key: group for key, group in registry.groups.items() if keys is None or key in keys}
        # Asked every round of groups of thousands of tables: only the tables with a process and
        # those a round last saw pending or planning are looked at, not every table.
        in_process = {key: registry.service.group(key).process_tasks() for key in groups}
        demand = dict.fromkeys(groups, 0)
        wanting = registry.wanting.union(*in_process.values())
        for table_id in wanting:
            runtime = registry.runtimes.get(table_id)
            if runtime is None:
                continue
            key = registry.table_group_key(runtime)
            group = groups.get(key)
            if group is None:
                continue
            running_and_planned = in_process[key].get(runtime.table_id)
            if running_and_planned is not None:
                tasks = sum(running_and_planned)
            elif runtime.state in (TableState.PENDING, TableState.PLANNING):
                tasks = max(1, runtime.due_tasks)
            else:
                tasks = 0
            demand[key] += table_demand(tasks, runtime.spec.quota, group.spec.max_threads)
        return demand


def _last_refresh_s(runtime: TableRuntime) -> float | None:
    """When the table was last checked: by itself, or by its catalog's last sweep since."""
    sweep, own = runtime.refresh.sweep, runtime.last_refresh_s
    if sweep is None or sweep.last_s is None or own is None:
        return own
    return max(own, sweep.last_s)
