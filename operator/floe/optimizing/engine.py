"""The always-on engine: table runtimes, per-group scheduling, planning and commits.

One `tick()` refreshes the tables that are due (an unchanged snapshot is not rescanned),
tells each group's scheduler which tables are pending, plans the tables the scheduler
picks, and retries the delayed commits now due. A process commits as soon as its last
task's result is accepted, on the commit thread; a round first waits for those commits.
A round looks only at the tables whose time has come (`TableWakeups`: a refresh, a
maintenance job, a pending plan) and at those a process's end, a job's end or a changed
manifest touched; and, a backstop that bounds what a missed touch could delay, every table
once a minute, a share of them each round (`Rotation`). Optimizers reach the same TaskService
over HTTP and run the tasks. The engine is what `floe run` drives in a loop, and what the
Kubernetes controller drives from resource events.

Groups are keyed in the TaskService by `OptimizingEngine.group_key`: by name alone
embedded (``floe run``, where every manifest is in one namespace), and by
``namespace/name`` when ``namespaced_groups`` is set (the Kubernetes controller), so two
namespaces can each have a group called ``batch`` and a table only ever uses the group of
its own namespace. Optimizers register with that key.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future

from floe.api.group import OptimizerGroup
from floe.api.history import RunRecord
from floe.api.models import OptimizedTable
from floe.api.table import OptimizedTableSpec
from floe.kit.rotation import Rotation
from floe.maintenance.job import MaintenanceJob
from floe.optimizing import views
from floe.optimizing.catalog_access import CatalogAccess
from floe.optimizing.commit_runner import CommitRunner
from floe.optimizing.history_sink import RunHistorySink
from floe.optimizing.maintenance_runner import MaintenanceRunner
from floe.optimizing.processes import ProcessRunner
from floe.optimizing.refresher import TableRefresher
from floe.optimizing.registry import DEFAULT_NAMESPACE, EngineEvent, TableRegistry
from floe.optimizing.table_state import TableRuntime, TableState
from floe.optimizing.views import TableDetail, TableView
from floe.optimizing.waiting import Waiting
from floe.optimizing.wakeups import next_visit_s
from floe.service.task_service import RefusedResult, TaskService
from floe.tables.request_budget import BudgetStats

log = logging.getLogger(__name__)

BACKSTOP_VISIT_PERIOD_S = 60.0
"""How often the rounds look at each table, whether or not its time has come: a share of the
tables each round, never all in one."""


class OptimizingEngine:
    """Keeps every registered table optimized through the groups of a TaskService.

    It holds the registry of tables and groups and composes what works on them: the
    `TableRefresher`, the `ProcessRunner` (planning and commits) and the `MaintenanceRunner`.
    """

    def __init__(
        self,
        service: TaskService,
        clock: Callable[[], float] = time.time,
        refresh_interval_s: float = 10.0,
        io_threads: int = 4,
        namespaced_groups: bool = False,
        maintenance_threads: int = 1,
        refresh_budget_s: float = 2.0,
        spread_first_maintenance: bool = False,
        committer: CommitRunner | None = None,
        history: RunHistorySink | None = None,
    ) -> None:
        """`committer`: the thread processes are committed on (a new one by default); `history`:
        where every run that ends is appended, besides the table's own last runs (its owner
        closes it)."""
        self.service = service
        self.clock = clock
        self.spread_first_maintenance = spread_first_maintenance
        """Whether a new table's jobs first run at a point within their interval
        (`spread_first_runs`), rather than at once."""
        self._registry = TableRegistry(service, clock, namespaced_groups, history)
        self._catalogs = CatalogAccess(service.metrics)
        self._refresher = TableRefresher(
            self._registry, self._catalogs, refresh_interval_s, io_threads, refresh_budget_s
        )
        self._processes = ProcessRunner(
            self._registry, self._catalogs, self._refresher, committer or CommitRunner()
        )
        self._maintenance = MaintenanceRunner(
            self._registry, self._catalogs, self._processes.protection, maintenance_threads
        )
        self.runtimes = self._registry.runtimes
        self.groups = self._registry.groups
        """Groups by `group_key`."""
        self._lock = self._registry.lock
        self._backstop = Rotation(BACKSTOP_VISIT_PERIOD_S)
        self.visits = 0
        """Tables the rounds looked at so far (tests check that an idle round looks at none but the
        backstop's share)."""
        service.metrics.watch_tables(self.table_views)
        service.metrics.watch_catalogs(self._catalogs.budgets)
        service.notices.listen(self.table_changed)
        service.on_refused(self._on_refused)

    @property
    def refresh_interval_s(self) -> float:
        """How long a table's refresh is good for."""
        return self._refresher.refresh_interval_s

    @property
    def table_loads(self) -> int:
        """Tables loaded through their catalog so far (refreshes, plans, maintenance)."""
        return self._catalogs.table_loads

    @property
    def not_modified_loads(self) -> int:
        """Refreshes the catalog answered with "not modified" (`load_table_if_changed`): no load."""
        return self._catalogs.not_modified_loads

    @property
    def catalog_probes(self) -> int:
        """Calls that told the metadata locations of a catalog's tables at once (`metadata_locations`)."""
        return self._catalogs.catalog_probes

    # -- resources -----------------------------------------------------------------------

    def subscribe(self, listener: Callable[[EngineEvent], None]) -> None:
        """Receive every EngineEvent."""
        self._registry.subscribe(listener)

    def subscribe_runs(self, listener: Callable[[RunRecord], None]) -> None:
        """Receive every optimizing or maintenance run that ends, as it is recorded (under the
        engine's lock: `listener` must only take note)."""
        self._registry.subscribe_runs(listener)

    def group_key(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> str:
        """The group's name in the TaskService, which its optimizers register with."""
        return self._registry.group_key(name, namespace)

    def table_group_key(self, runtime: TableRuntime) -> str:
        """`group_key` of the group serving the table: the one of that name in the table's namespace."""
        return self._registry.table_group_key(runtime)

    def apply_group(self, group: OptimizerGroup) -> None:
        """Create or update a group: policy and timeouts apply on the next poll."""
        spec = group.spec
        with self._lock:
            name = self.group_key(group.metadata.name, group.metadata.namespace)
            if name in self.groups:
                self.service.update_group(
                    name, spec.policy, spec.heartbeat_timeout, spec.ack_timeout, spec.execute_timeout
                )
                self.groups[name] = group
            else:
                self.service.add_group(
                    name, spec.policy, spec.heartbeat_timeout, spec.ack_timeout, spec.execute_timeout
                )
                # Known first: registering checks it. Tables applied before their group join it now.
                self.groups[name] = group
                for runtime in self.runtimes.values():
                    if self.table_group_key(runtime) == name:
                        self._registry.register_in_group(runtime)
            # Planned ahead while an autoscaled group's executors start: they find tasks waiting.
            self.service.group(name).planning_threads = spec.max_threads if spec.autoscaling else 0

    def remove_group(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> None:
        """Forget a group (deleted): its optimizers are dropped and its processes cancelled uncommitted.

        Its tables stay registered and wait, PENDING with the reason "group ... does not
        exist", until a group of that name appears again. Files that finished tasks of a
        cancelled process already wrote are left to orphan-file cleanup, as in `remove_table`.
        """
        key = self.group_key(name, namespace)
        with self._lock:
            if self.groups.pop(key, None) is None:
                return
            # A process whose tasks are all done is only waiting on the catalog: it still commits.
            cancelled = self._processes.cancel_group(key)
            self.service.remove_group(key)
            failed = []
            for runtime in self.runtimes.values():
                if runtime.process_id in cancelled and runtime.busy:
                    process_id = runtime.process_id
                    runtime.on_process_failed(f"group {name!r} was deleted: process {process_id} cancelled")
                    self._registry.touch(runtime.table_id)
                    failed.append((runtime.table_id, process_id))
        for table_id, process_id in failed:
            self._registry.emit(
                table_id,
                "Warning",
                "OptimizingCancelled",
                f"{process_id}: group {name!r} was deleted; nothing was committed",
            )

    def apply_table(
        self, resource: OptimizedTable, secret_properties: dict[str, str] | None = None
    ) -> TableRuntime:
        """Create or update a table's runtime from its manifest (quota, thresholds, group, enabled).

        `secret_properties`: what the catalog Secret the manifest names holds, when the
        optimizers have that Secret mounted: its storage credentials then stay out of the tasks.
        """
        table_id = f"{resource.metadata.namespace}/{resource.metadata.name}"
        spec = resource.spec
        with self._lock:
            if secret_properties is not None and spec.catalog.secret_ref:
                self._registry.secret_properties[table_id] = dict(secret_properties)
            else:
                self._registry.secret_properties.pop(table_id, None)
            runtime = self.runtimes.get(table_id)
            self._registry.index(table_id, runtime.spec.table if runtime else None, spec.table)
            if runtime is None:
                runtime = TableRuntime(table_id=table_id, spec=spec)
                if self.spread_first_maintenance:
                    runtime.maintenance_since_s = self.clock()
                self.runtimes[table_id] = runtime
                if not spec.enabled:
                    runtime.state = TableState.DISABLED
            else:
                old_group = self.table_group_key(runtime)
                runtime.update_spec(spec)
                # A process in flight finishes in its old group (see ProcessRunner); otherwise move now.
                moved = old_group != self.table_group_key(runtime)
                if moved and old_group in self.groups and not runtime.busy:
                    self.service.group(old_group).remove_table(table_id)
            self._registry.register_in_group(runtime)
            self._registry.touch(table_id)
            return runtime

    def uses_mounted_secret(self, table_id: str) -> bool:
        """Whether the table's tasks leave its Secret's storage credentials to the optimizer's mount."""
        with self._lock:
            return table_id in self._registry.secret_properties

    def update_settings(self, table_id: str, spec: OptimizedTableSpec) -> None:
        """New settings (quota, thresholds, maintenance) for a table the engine has, its catalog,
        Secret and group as they are: what an inherited setting's change does."""
        with self._lock:
            runtime = self.runtimes.get(table_id)
            if runtime is None:
                return
            new = spec.model_copy(update={"catalog": runtime.spec.catalog, "group": runtime.spec.group})
            self._registry.index(table_id, runtime.spec.table, new.table)
            runtime.update_spec(new)
            self._registry.register_in_group(runtime)
            self._registry.touch(table_id)

    def remove_table(self, table_id: str) -> None:
        """Forget a table; its in-flight process is cancelled and nothing is committed.

        Files its finished tasks already wrote are left to orphan-file cleanup.
        """
        registry = self._registry
        with self._lock:
            runtime = self.runtimes.pop(table_id, None)
            registry.index(table_id, runtime.spec.table if runtime else None, None)
            registry.secret_properties.pop(table_id, None)
            registry.marked_pending.discard(table_id)
            registry.wanting.discard(table_id)
            registry.wakeups.discard(table_id)
            self._catalogs.forget(table_id)
            if runtime is None:
                return
            self._refresher.forget(runtime)
            group = self._processes.forget(runtime.process_id) or self.table_group_key(runtime)
            if group in self.groups:
                self.service.group(group).remove_table(table_id)
            registry.evaluations.pop(table_id, None)

    # -- the loop ------------------------------------------------------------------------

    def tick(self) -> None:
        """One round: wait for the commits under way, refresh due tables, plan what the schedulers
        pick, retry the delayed commits now due.

        Maintenance jobs that are due start in the background.
        """
        visit = self._tables_to_visit()
        visit += self._refresher.refresh_due(visit)
        self._processes.commit_finished()
        self._processes.plan_picked_tables()
        self._maintenance.start_due(visit)
        self._schedule_visits(visit)

    def _tables_to_visit(self) -> list[TableRuntime]:
        """The tables whose time has come, and the backstop's share of every table (once a
        `BACKSTOP_VISIT_PERIOD_S`)."""
        now = self.clock()
        with self._lock:
            due = self._registry.wakeups.pop_due(now)
            if backstop := self._backstop.take(now, self.runtimes.keys):
                woken = set(due)
                due += [table_id for table_id in backstop if table_id not in woken]
            self.visits += len(due)
            return [r for table_id in due if (r := self.runtimes.get(table_id)) is not None]

    def _schedule_visits(self, runtimes: list[TableRuntime]) -> None:
        """When to look at each of `runtimes` again, from what it is now."""
        now = self.clock()
        with self._lock:
            for runtime in runtimes:
                table_id = runtime.table_id
                if self.runtimes.get(table_id) is not runtime:
                    continue  # removed meanwhile
                self._registry.looked_at.add(table_id)
                if runtime.state in (TableState.PENDING, TableState.PLANNING):
                    self._registry.wanting.add(table_id)
                else:
                    self._registry.wanting.discard(table_id)
                when = next_visit_s(runtime, now)
                if table_id in self._registry.marked_pending:
                    when = now  # the next round tells its scheduler it is no longer pending
                self._registry.wakeups.schedule(table_id, when)

    def run(self, stop: threading.Event, interval_s: float = 1.0) -> None:
        """Tick until `stop` is set; errors are logged and reported, never fatal."""
        while not stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("engine tick failed")
            stop.wait(interval_s)

    def run_maintenance_now(self, table_id: str, job: MaintenanceJob) -> Future[None]:
        """Start `job` of the table at once, whatever its schedule, protected like a scheduled run."""
        return self._maintenance.run_now(table_id, job)

    def abandon_in_flight(self) -> tuple[int, int]:
        """Stop for good: forget every process in flight, deleting the files it wrote (by name, in
        its output directories), but for those whose commit is pending, which may have landed
        (orphan cleanup's). Call once its tasks stopped writing. Returns (processes, files deleted)."""
        return self._processes.abandon_in_flight()

    def close(self) -> None:
        """Stop the refresh threads, after the maintenance jobs running now finish (those waiting
        on file tasks fail at once), and the commit thread, after the commits under way."""
        self._maintenance.close()
        self._refresher.close()
        self._processes.close()

    # -- views ---------------------------------------------------------------------------

    def converged(self) -> bool:
        """Nothing in flight, no maintenance due or running, every table settled or stuck."""
        now = self.clock()
        with self._lock:
            stuck = set(self.stuck_tables())
            return not self._processes and all(
                (r.settled or r.table_id in stuck)
                and MaintenanceRunner.due(r, now) is None
                and r.maintaining is None
                for r in self.runtimes.values()
            )

    def stuck_tables(self) -> dict[str, str]:
        """Tables that cannot progress without outside help, with the reason."""
        return views.stuck_tables(self._registry)

    def group_demand(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> int:
        """Tasks the group's tables want run now (`floe.scheduling.autoscale`); see
        `views.group_demand`."""
        return views.group_demand(self._registry, self.group_key(name, namespace))

    def table_changed(self, identifier: str, catalog: str | None = None) -> list[str]:
        """A change notice: the tables of `identifier` (in `catalog`, if given) are refreshed at
        the next round, their polling cadence kept (`RefreshState.notice`); returns their ids."""
        with self._lock:
            candidates = [self.runtimes[t] for t in sorted(self._registry.by_identifier.get(identifier, ()))]
            found = [r for r in candidates if catalog is None or r.spec.catalog.name == catalog]
            for runtime in found:
                runtime.refresh.notice()
                self._registry.touch(runtime.table_id)
        return sorted(r.table_id for r in found)

    def catalog_budgets(self) -> dict[str, BudgetStats]:
        """What each REST catalog's request budget did and holds now, by catalog name."""
        return self._catalogs.budgets()

    def catalog_pressure(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> dict[str, str]:
        """How the request budgets of the group's tables' catalogs hold calls back now, in words,
        by catalog name (empty: none does; the usual case costs no walk of the tables)."""
        pressure = {c: words for c, stats in self._catalogs.budgets().items() if (words := stats.pressure())}
        if not pressure:
            return {}
        key = self.group_key(name, namespace)
        with self._lock:
            used = {
                r.spec.catalog.name
                for r in self.runtimes.values()
                if r.spec.catalog.name in pressure and self._registry.table_group_key(r) == key
            }
        return {c: pressure[c] for c in sorted(used)}

    def group_demands(self) -> dict[str, int]:
        """`group_demand` of every group, by `group_key`, in one pass over the tables."""
        return views.group_demands(self._registry)

    def table_detail(self, table_id: str) -> TableDetail | None:
        """What the table's own page shows beyond its view (`views.table_detail`)."""
        return views.table_detail(self._registry, table_id)

    def occupations(self, only: Collection[str] | None = None) -> dict[str, float]:
        """Each table's (of those in `only`) quota occupation over the last hour (1.0 = its
        whole quota), by table id."""
        return views.occupations(self._registry, only)

    def occupied(self) -> dict[str, float]:
        """The quota occupation of each table that has any, by table id (`views.occupied`)."""
        return views.occupied(self._registry)

    def waits(
        self, occupations: Mapping[str, float], only: Collection[str] | None = None
    ) -> dict[str, Waiting]:
        """What each table (of those in `only`) waits for, by table id, given `occupations`
        (`views.waits`)."""
        return views.waits(self._registry, occupations, only)

    def take_looked_at(self) -> set[str]:
        """The tables a round looked at or something touched since the last call: the status
        flush writes only theirs, and those with quota occupation (`occupied`)."""
        with self._lock:
            looked_at, self._registry.looked_at = self._registry.looked_at, set()
            return looked_at

    def table_views(self) -> list[TableView]:
        """Status of every table, ordered by id."""
        return views.table_views(self._registry)

    def _on_refused(self, refused: RefusedResult) -> None:
        self._registry.emit(
            refused.table_id,
            "Warning",
            "TaskResultRefused",
            f"{refused.process_id}: {refused.message}; the attempt counts as failed and its "
            f"{refused.files_deleted} file(s) were deleted",
        )
