"""The always-on engine: table runtimes, per-group scheduling, planning and commits.

One `tick()` refreshes the tables that are due (an unchanged snapshot is not rescanned),
tells each group's scheduler which tables are pending, plans the tables the scheduler
picks, and commits the processes whose tasks are done. A round looks only at the tables whose
time has come (`TableWakeups`: a refresh, a maintenance job, a pending plan) and at those a
process's end, a job's end or a changed manifest touched; once a minute it looks at every
table, a backstop that bounds what a missed touch could delay. Optimizers reach the same
TaskService over HTTP and run the tasks. The engine is what `floe run` drives in a
loop, and what the Kubernetes controller drives from resource events.

Groups are keyed in the TaskService by `OptimizingEngine.group_key`: by name alone
embedded (``floe run``, where every manifest is in one namespace), and by
``namespace/name`` when ``namespaced_groups`` is set (the Kubernetes controller), so two
namespaces can each have a group called ``batch`` and a table only ever uses the group of
its own namespace. Optimizers register with that key.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from floe.api.models import CatalogRef, OptimizedTable, OptimizedTableSpec, OptimizerGroup
from floe.api.table_properties import InvalidTableProperty
from floe.commit.rewrite import CommitFailed, CommitHistory, CommitPending, commit_rewrite
from floe.maintenance.jobs import run_maintenance_job
from floe.maintenance.orphans_on_executors import ExecutorPool
from floe.maintenance.settled import settled_jobs
from floe.optimizing.commit_request import ProcessFailed, commit_request
from floe.optimizing.leftovers import remove_uncommitted_outputs
from floe.optimizing.specs import OptimizingProcess, build_process
from floe.planning.files import TableFiles
from floe.planning.plan import OptimizingType
from floe.planning.planner import plan_optimizing
from floe.protocol.rewrite_task import OUT_OF_MEMORY
from floe.protocol.storage import task_io_properties
from floe.rewrite.parquet_options import check_write_properties
from floe.scheduling.autoscale import table_demand
from floe.scheduling.queue import GroupScheduler, ProcessOutcome
from floe.service.file_tasks import FileTaskDispatcher
from floe.service.task_service import RefusedResult, TaskService
from floe.tables.catalog import (
    CatalogConfigError,
    CatalogUnreachable,
    TableAccessError,
    load_table,
    open_catalog,
)
from floe.tables.catalog_locations import CatalogLocations
from floe.tables.conditional_load import LoadedTable, load_table_if_changed
from floe.tables.history import optimizing_history
from floe.tables.maintenance_job import MaintenanceJob, MaintenanceRefused
from floe.tables.metadata_probe import metadata_locations
from floe.tables.runtime import (
    INVALID_TABLE_PROPERTY,
    UNSUPPORTED,
    MaintenanceRun,
    TableRuntime,
    TableState,
)
from floe.tables.scan import ScannedTable
from floe.tables.support import UnsupportedTableError, check_supported, scan_supported
from floe.tables.wakeups import TableWakeups

log = logging.getLogger(__name__)

MIN_DELETE_MEMORY = 64 * 1024 * 1024
FIRST_COMMIT_RETRY_DELAY_S = 5.0
MAX_COMMIT_RETRY_DELAY_S = 300.0
"""A commit the catalog could not take is retried after 5 s, then ever less often, up to every 5 min."""
DEFAULT_NAMESPACE = "default"
FULL_VISIT_INTERVAL_S = 60.0
"""How often a round looks at every table, whether or not its time has come."""


@dataclass(frozen=True)
class EngineEvent:
    """Something a user should hear about: a Kubernetes Event from the operator, a line in `floe run`."""

    table_id: str
    kind: str  # "Normal" or "Warning"
    reason: str
    message: str


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


@dataclass(frozen=True)
class _DelayedCommit:
    outcome: ProcessOutcome
    retry_at: float
    delay_s: float


@dataclass
class _InFlight:
    process: OptimizingProcess
    table: Table
    group: str
    optimizing_type: OptimizingType
    commit_history: CommitHistory = field(default_factory=CommitHistory)
    """Carried across the delayed commit's calls: whether an attempt may have landed unseen."""


class OptimizingEngine:
    """Keeps every registered table optimized through the groups of a TaskService."""

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
    ) -> None:
        self.service = service
        self.spread_first_maintenance = spread_first_maintenance
        """Whether a new table's jobs first run at a point within their interval
        (`spread_first_runs`), rather than at once."""
        self.refresh_budget_s = refresh_budget_s
        """How long a round goes on loading due tables; the rest are loaded in the next rounds."""
        self._refresh_batch = 4 * io_threads
        self.namespaced_groups = namespaced_groups
        self.clock = clock
        self.refresh_interval_s = refresh_interval_s
        self.runtimes: dict[str, TableRuntime] = {}
        self.groups: dict[str, OptimizerGroup] = {}
        """Groups by `group_key`."""
        self._catalogs: dict[CatalogKey, Catalog] = {}
        self.table_loads = 0
        """Tables loaded through their catalog so far (refreshes, plans, maintenance)."""
        self.not_modified_loads = 0
        """Refreshes the catalog answered with "not modified" (`load_table_if_changed`): no load."""
        self.catalog_probes = 0
        """Calls that told the metadata locations of a catalog's tables at once (`metadata_locations`)."""
        self._counts_lock = threading.Lock()  # the refresh threads load tables concurrently
        self._marked_pending: set[str] = set()
        """Tables the engine last told their group's scheduler may be planned (`_update_pending`)."""
        self._wakeups = TableWakeups()
        self._next_full_visit_s = -math.inf
        self.visits = 0
        """Tables the rounds looked at so far (tests check that an idle round looks at none)."""
        self._scans: dict[str, ScannedTable] = {}
        self._in_flight: dict[str, _InFlight] = {}
        self._delayed_commits: dict[str, _DelayedCommit] = {}
        """Processes whose commit could not be finished yet, by process id."""
        self._listeners: list[Callable[[EngineEvent], None]] = []
        self._lock = threading.RLock()
        self._pool = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="floe-refresh")
        # Maintenance jobs list and delete files for minutes on big tables: their own threads
        # keep ticks (refresh, planning, commits) going meanwhile.
        self._maintenance_pool = ThreadPoolExecutor(
            max_workers=maintenance_threads, thread_name_prefix="floe-maintenance"
        )
        self._file_tasks = FileTaskDispatcher(service, clock)
        service.metrics.watch_tables(self.table_views)
        service.on_refused(self._on_refused)
        service.results.use_storage(self._process_io_properties)
        self._secret_properties: dict[str, dict[str, str]] = {}
        """Per table: the properties its catalog Secret holds, whose storage credentials tasks
        leave to the optimizer's mounted copy of the Secret (Kubernetes)."""
        self._catalog_keys: dict[str, tuple[CatalogRef, CatalogKey]] = {}
        """Per table: its catalog reference and `_catalog_key` of it, which each probe asks of
        every table and which stays the same while the reference does."""
        self._locations: dict[CatalogKey, CatalogLocations] = {}
        """Per catalog: its tables' locations, which orphan cleanups check their roots against."""

    # -- resources -----------------------------------------------------------------------

    def subscribe(self, listener: Callable[[EngineEvent], None]) -> None:
        """Receive every EngineEvent."""
        self._listeners.append(listener)

    def group_key(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> str:
        """The group's name in the TaskService, which its optimizers register with."""
        return _group_key(name, namespace, self.namespaced_groups)

    def table_group_key(self, runtime: TableRuntime) -> str:
        """`group_key` of the group serving the table: the one of that name in the table's namespace."""
        return _table_group_key(runtime.table_id, runtime.group, self.namespaced_groups)

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
                        self._register_in_group(runtime)
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
            cancelled = [
                pid
                for pid, flight in self._in_flight.items()
                if flight.group == key and pid not in self._delayed_commits
            ]
            for pid in cancelled:
                del self._in_flight[pid]
            self.service.remove_group(key)
            failed = []
            for runtime in self.runtimes.values():
                if runtime.process_id in cancelled and runtime.busy:
                    process_id = runtime.process_id
                    runtime.on_process_failed(f"group {name!r} was deleted: process {process_id} cancelled")
                    self._touch(runtime.table_id)
                    failed.append((runtime.table_id, process_id))
        for table_id, process_id in failed:
            self._emit(
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
                self._secret_properties[table_id] = dict(secret_properties)
            else:
                self._secret_properties.pop(table_id, None)
            runtime = self.runtimes.get(table_id)
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
                # A process in flight finishes in its old group (see _commit); otherwise move now.
                moved = old_group != self.table_group_key(runtime)
                if moved and old_group in self.groups and not runtime.busy:
                    self.service.group(old_group).remove_table(table_id)
            self._register_in_group(runtime)
            self._touch(table_id)
            return runtime

    def uses_mounted_secret(self, table_id: str) -> bool:
        """Whether the table's tasks leave its Secret's storage credentials to the optimizer's mount."""
        with self._lock:
            return table_id in self._secret_properties

    def update_settings(self, table_id: str, spec: OptimizedTableSpec) -> None:
        """New settings (quota, thresholds, maintenance) for a table the engine has, its catalog,
        Secret and group as they are: what an inherited setting's change does."""
        with self._lock:
            runtime = self.runtimes.get(table_id)
            if runtime is None:
                return
            runtime.update_spec(
                spec.model_copy(update={"catalog": runtime.spec.catalog, "group": runtime.spec.group})
            )
            self._register_in_group(runtime)
            self._touch(table_id)

    def remove_table(self, table_id: str) -> None:
        """Forget a table; its in-flight process is cancelled and nothing is committed.

        Files its finished tasks already wrote are left to orphan-file cleanup.
        """
        with self._lock:
            runtime = self.runtimes.pop(table_id, None)
            self._secret_properties.pop(table_id, None)
            self._marked_pending.discard(table_id)
            self._wakeups.discard(table_id)
            self._catalog_keys.pop(table_id, None)
            if runtime is None:
                return
            flight = self._in_flight.pop(runtime.process_id, None) if runtime.process_id else None
            if runtime.process_id:
                self._delayed_commits.pop(runtime.process_id, None)
            group = flight.group if flight else self.table_group_key(runtime)
            if group in self.groups:
                self.service.group(group).remove_table(table_id)
            self._scans.pop(table_id, None)

    def _register_in_group(self, runtime: TableRuntime, left_group: str | None = None) -> None:
        group = self.table_group_key(runtime)
        if left_group is not None and left_group != group and left_group in self.groups:
            self.service.group(left_group).remove_table(runtime.table_id)
        if group in self.groups:
            self.service.group(group).upsert_table(
                runtime.table_id, runtime.spec.quota, runtime.last_optimized_s
            )

    # -- the loop ------------------------------------------------------------------------

    def tick(self) -> None:
        """One round: refresh due tables, plan what the schedulers pick, commit finished work.

        Maintenance jobs that are due start in the background.
        """
        visit = self._tables_to_visit()
        visit += self._refresh_due_tables(visit)
        self._commit_finished()
        self._plan_picked_tables()
        self._start_due_maintenance(visit)
        self._schedule_visits(visit)

    def _touch(self, table_id: str) -> None:
        """Something happened to the table: the next round looks at it (hold the lock)."""
        self._wakeups.wake_at(table_id, -math.inf)

    def _tables_to_visit(self) -> list[TableRuntime]:
        """The tables whose time has come, or every table once a `FULL_VISIT_INTERVAL_S`."""
        now = self.clock()
        with self._lock:
            due = self._wakeups.pop_due(now)
            if now >= self._next_full_visit_s:
                self._next_full_visit_s = now + FULL_VISIT_INTERVAL_S
                due = list(self.runtimes)
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
                when = runtime.next_visit_s(now, self.refresh_interval_s)
                if table_id in self._marked_pending:
                    when = now  # the next round tells its scheduler it is no longer pending
                self._wakeups.schedule(table_id, when)

    def run(self, stop: threading.Event, interval_s: float = 1.0) -> None:
        """Tick until `stop` is set; errors are logged and reported, never fatal."""
        while not stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("engine tick failed")
            stop.wait(interval_s)

    def abandon_in_flight(self) -> tuple[int, int]:
        """Stop for good: forget every process in flight, deleting the files it wrote (by name, in
        its output directories), but for those whose commit is pending, which may have landed
        (orphan cleanup's). Call once its tasks stopped writing. Returns (processes, files deleted)."""
        with self._lock:
            flights = [
                (pid, f)
                for pid, f in self._in_flight.items()
                if pid not in self._delayed_commits and not f.commit_history.outcome_unknown
            ]
            for pid, _ in flights:
                del self._in_flight[pid]
        removed = 0
        for pid, flight in flights:
            try:
                removed += len(
                    remove_uncommitted_outputs(
                        flight.table.io, pid, {spec.output_dir for spec in flight.process.specs}, committed=()
                    )
                )
            except OSError as exc:
                log.warning("%s: could not remove its files: %s", pid, exc)
        return len(flights), removed

    def close(self) -> None:
        """Stop the refresh threads, after the maintenance jobs running now finish (those waiting
        on file tasks fail at once)."""
        self._file_tasks.close()
        self._pool.shutdown(wait=True)
        self._maintenance_pool.shutdown(wait=True)

    def converged(self) -> bool:
        """Nothing in flight, no maintenance due or running, every table settled or stuck."""
        now = self.clock()
        with self._lock:
            stuck = set(self.stuck_tables())
            return not self._in_flight and all(
                (r.settled or r.table_id in stuck)
                and self._maintenance_due(r, now) is None
                and r.maintaining is None
                for r in self.runtimes.values()
            )

    def stuck_tables(self) -> dict[str, str]:
        """Tables that cannot progress without outside help, with the reason."""
        with self._lock:
            stuck = {}
            for r in self.runtimes.values():
                if r.busy:
                    continue
                if r.refusal:
                    stuck[r.table_id] = r.refusal
                elif r.last_error and r.evaluated_snapshot_id is None:
                    stuck[r.table_id] = r.last_error
                elif r.state == TableState.PENDING and self._unserved(self.table_group_key(r)):
                    stuck[r.table_id] = r.pending_reason
            return stuck

    def _unserved(self, group_key: str) -> bool:
        """The group does not exist, or has no thread and will not get one by itself (an
        autoscaled group brings its executors back when its demand asks)."""
        group = self.groups.get(group_key)
        if group is None:
            return True
        return group.spec.autoscaling is None and self.service.group(group_key).threads == 0

    def group_demand(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> int:
        """Tasks the group's tables want run now (`floe.scheduling.autoscale`): a table's running
        and queued tasks, or, pending or planning, those its would-be plan holds; each table's
        capped by its quota in the group at its largest. 0 for a group the engine does not know."""
        key = self.group_key(name, namespace)
        with self._lock:
            group = self.groups.get(key)
            if group is None:
                return 0
            # Asked every few seconds of a group of thousands of tables: only the tables with a
            # process are asked the scheduler's figures.
            in_process = self.service.group(key).process_tasks()
            demand = 0
            for runtime in self.runtimes.values():
                if self.table_group_key(runtime) != key:
                    continue
                running_and_planned = in_process.get(runtime.table_id)
                if running_and_planned is not None:
                    tasks = sum(running_and_planned)
                elif runtime.state in (TableState.PENDING, TableState.PLANNING):
                    tasks = max(1, runtime.due_tasks)
                else:
                    tasks = 0
                demand += table_demand(tasks, runtime.spec.quota, group.spec.max_threads)
            return demand

    # -- refresh -------------------------------------------------------------------------

    def _refresh_due_tables(self, visit: list[TableRuntime]) -> list[TableRuntime]:
        """Refresh the tables of `visit` that are due, and with them every table of a catalog
        probed for them; returns those others, whose next visit changes too."""
        now = self.clock()
        due = [
            r
            for r in visit
            if not r.busy
            and r.state != TableState.DISABLED
            and (r.last_refresh_s is None or now - r.last_refresh_s >= self.refresh_interval_s)
        ]
        locations = self._metadata_locations(due)
        unchanged: set[str] = set()
        also: list[TableRuntime] = []
        if locations:
            # A probe answers for every table of its catalog: they are all refreshed with the due
            # ones, so that the catalog's tables stay due together and one probe serves a round.
            with self._lock:
                eligible = [
                    r for r in self.runtimes.values() if not r.busy and r.state != TableState.DISABLED
                ]
            keys = {r.table_id: self._catalog_key_of(r) for r in eligible}
            visited = {r.table_id for r in visit}
            also = [r for r in eligible if r.table_id not in visited and keys[r.table_id] in locations]
            due += also
            unchanged = {
                r.table_id
                for r in due
                if r.unchanged_at(locations.get(keys[r.table_id], {}).get(r.spec.table))
            }
        with self._lock:
            for runtime in due:
                if runtime.table_id in unchanged:
                    runtime.on_loaded(now)
        self._load_within_budget([r for r in due if r.table_id not in unchanged])
        with self._lock:
            for runtime in visit + also:
                self._update_pending(runtime, now)
        return also

    def _refresh(self, runtime: TableRuntime) -> None:
        now = self.clock()
        try:
            loaded = self._load_if_changed(runtime)
            if loaded.table is None:
                runtime.on_loaded(now)  # the catalog says the file last evaluated is still current
                return
            table = loaded.table
            runtime.catalog_etag = (table.metadata_location, loaded.etag) if loaded.etag else None
            runtime.on_loaded(now, str(table.metadata.table_uuid))
            current = table.metadata.current_snapshot()
            snapshot_id = current.snapshot_id if current else None
            if not runtime.needs_evaluation(snapshot_id, table.metadata_location):
                return
            # Properties first: they need no scan, and a refused table is checked every refresh.
            config = runtime.spec.optimizing_config(table.metadata.properties)
            check_write_properties(table.metadata.properties, table.metadata.schema())
            scanned = scan_supported(runtime.spec.table, table)
            # The scan read the manifest list: pyiceberg's cache answers this.
            manifests = current.manifests(table.io) if current else []
            settled = settled_jobs(table.metadata, scanned.files, manifests, runtime.spec.maintenance)
            history = optimizing_history(table.metadata)
            plan = plan_optimizing(
                scanned.files,
                config,
                now_s=now,
                last_minor_s=history.last_minor_s,
                last_full_s=history.last_full_s,
            )
        except UnsupportedTableError as exc:
            self._refuse_unsupported(runtime, exc, now)
            return
        except InvalidTableProperty as exc:
            self._refuse_property(runtime, exc, now)
            return
        except TableAccessError as exc:
            if runtime.last_error != str(exc):
                self._emit(runtime.table_id, "Warning", "TableUnavailable", str(exc))
            runtime.on_access_error(
                str(exc), now, catalog_failed=isinstance(exc, CatalogConfigError | CatalogUnreachable)
            )
            return
        with self._lock:
            self._scans[runtime.table_id] = scanned
            runtime.on_history(history)
            runtime.on_evaluated(scanned.files, plan, now, table.metadata_location)
            runtime.on_settled(settled, table.metadata_location)

    def _refuse(
        self,
        runtime: TableRuntime,
        reason: str,
        message: str,
        files: TableFiles | None,
        metadata_location: str | None,
        now: float,
    ) -> None:
        """Floe refuses the table (`reason`, `message`): shown, with an Event when the message is new."""
        with self._lock:
            new = runtime.refusal != message
            runtime.on_refused(reason, message, files, now, metadata_location)
            self._scans.pop(runtime.table_id, None)
        if new:
            self._emit(runtime.table_id, "Warning", reason, message)

    def _refuse_unsupported(self, runtime: TableRuntime, exc: UnsupportedTableError, now: float) -> None:
        self._refuse(runtime, UNSUPPORTED, str(exc), exc.files, exc.metadata_location, now)

    def _refuse_property(self, runtime: TableRuntime, exc: InvalidTableProperty, now: float) -> None:
        # No files and no metadata location: the next refresh checks the properties again,
        # which needs no scan, and a fixed manifest (targetSize) clears it as well as the table.
        message = f"table {runtime.spec.table} is not optimized: {exc}"
        self._refuse(runtime, INVALID_TABLE_PROPERTY, message, None, None, now)

    def _update_pending(self, runtime: TableRuntime, now: float) -> None:
        if runtime.state != TableState.PENDING and runtime.table_id not in self._marked_pending:
            return  # neither pending nor marked so: nothing to say or undo (most tables, most rounds)
        key = self.table_group_key(runtime)
        if key not in self.groups:
            if runtime.state == TableState.PENDING:
                runtime.pending_reason = f"group {runtime.group!r} does not exist"
            return
        scheduler = self.service.group(key)
        pending = runtime.may_plan(now)
        scheduler.set_pending(runtime.table_id, pending)
        if pending:
            self._marked_pending.add(runtime.table_id)
        else:
            self._marked_pending.discard(runtime.table_id)
        if runtime.state == TableState.PENDING and scheduler.threads == 0:
            if self.groups[key].spec.autoscaling is not None:
                # Not a problem: the group's demand brings its executors back.
                runtime.pending_reason = f"group {runtime.group!r} is scaling up from no executors"
                return
            reason = f"group {runtime.group!r} has no ready optimizer"
            if runtime.pending_reason != reason:
                self._emit(runtime.table_id, "Warning", "NoOptimizer", f"pending: {reason}")
            runtime.pending_reason = reason

    def _load_within_budget(self, runtimes: list[TableRuntime]) -> None:
        """Refresh `runtimes` through their catalogs, longest unrefreshed first, in batches while
        the round's budget lasts (one batch at least): thousands of new tables are loaded over
        several rounds, and status flushes, planning and commits go on between them."""
        ordered = sorted(runtimes, key=lambda r: -math.inf if r.last_refresh_s is None else r.last_refresh_s)
        started = time.monotonic()
        for start in range(0, len(ordered), self._refresh_batch):
            if start and time.monotonic() - started >= self.refresh_budget_s:
                return  # the rest stay due: the next rounds load them first
            batch = ordered[start : start + self._refresh_batch]
            for future in [self._pool.submit(self._refresh, r) for r in batch]:
                future.result()

    def _metadata_locations(self, runtimes: list[TableRuntime]) -> dict[CatalogKey, dict[str, str]]:
        """The metadata locations of every table of each catalog of `runtimes` that can tell them
        all in one call (`metadata_locations`). A table whose metadata file is the one its last
        evaluation read needs no load (`TableRuntime.unchanged_at`); the others are loaded. A
        catalog that fails here fails again in the loads, which report it."""
        found: dict[CatalogKey, dict[str, str]] = {}
        for key, ref in {self._catalog_key_of(r): r.spec.catalog for r in runtimes}.items():
            try:
                locations = metadata_locations(self._catalog(ref))
            except Exception:  # the loads that follow report the catalog's error
                continue
            if locations is not None:
                self._count_catalog_call("probe")
                found[key] = locations
        return found

    def _catalog_key_of(self, runtime: TableRuntime) -> CatalogKey:
        ref = runtime.spec.catalog
        cached = self._catalog_keys.get(runtime.table_id)
        if cached is None or cached[0] is not ref:
            cached = self._catalog_keys[runtime.table_id] = (ref, _catalog_key(ref))
        return cached[1]

    def _catalog(self, ref: CatalogRef) -> Catalog:
        key = _catalog_key(ref)
        catalog = self._catalogs.get(key)
        if catalog is None:
            catalog = open_catalog(ref)
            self._catalogs[key] = catalog
        return catalog

    def _count_catalog_call(self, kind: Literal["load", "probe", "not-modified"]) -> None:
        """One call to a catalog: its engine counter and its metric."""
        with self._counts_lock:
            if kind == "load":
                self.table_loads += 1
            elif kind == "probe":
                self.catalog_probes += 1
            else:
                self.not_modified_loads += 1
        self.service.metrics.catalog_calls.labels(kind).inc()

    def _load(self, runtime: TableRuntime) -> Table:
        self._count_catalog_call("load")
        return load_table(self._catalog(runtime.spec.catalog), runtime.spec.table)

    def _load_if_changed(self, runtime: TableRuntime) -> LoadedTable:
        """A refresh's load: none where the catalog says the table's metadata file is still the
        one its last evaluation read (`load_table_if_changed`)."""
        try:
            loaded = load_table_if_changed(
                self._catalog(runtime.spec.catalog), runtime.spec.table, runtime.etag_to_send()
            )
        except Exception:
            self._count_catalog_call("load")  # a call that failed, as `_load` counts it
            raise
        self._count_catalog_call("load" if loaded.table is not None else "not-modified")
        return loaded

    # -- maintenance ---------------------------------------------------------------------

    def run_maintenance_now(self, table_id: str, job: MaintenanceJob) -> Future[None]:
        """Start `job` of the table at once, whatever its schedule, protected like a scheduled run."""
        with self._lock:
            runtime = self.runtimes[table_id]
            runtime.on_maintenance_started(job)
            return self._submit_maintenance(runtime, job)

    @staticmethod
    def _maintenance_due(runtime: TableRuntime, now: float) -> MaintenanceJob | None:
        # A table never read, or without a snapshot, has nothing to maintain yet.
        if runtime.snapshot_id is None:
            return None
        return runtime.due_maintenance(now)

    def _start_due_maintenance(self, visit: list[TableRuntime]) -> None:
        now = self.clock()
        with self._lock:
            for runtime in visit:
                if self.runtimes.get(runtime.table_id) is not runtime:
                    continue  # removed meanwhile
                job = self._maintenance_due(runtime, now)
                if job is not None:
                    runtime.on_maintenance_started(job)
                    self._submit_maintenance(runtime, job)

    def _submit_maintenance(self, runtime: TableRuntime, job: MaintenanceJob) -> Future[None]:
        # Under the lock: what the job must not touch is read before anything else can start.
        flight = self._in_flight.get(runtime.process_id) if runtime.process_id else None
        protected_snapshots = (flight.process.starting_snapshot_id,) if flight else ()
        protected_prefixes = (flight.process.process_id,) if flight else ()
        return self._maintenance_pool.submit(
            self._maintain, runtime, job, protected_snapshots, protected_prefixes
        )

    def _maintain(
        self,
        runtime: TableRuntime,
        job: MaintenanceJob,
        protected_snapshots: tuple[int, ...],
        protected_prefixes: tuple[str, ...],
    ) -> None:
        """Run one job; its time counts toward the table's quota like task time.

        A process planned while expiry or orphan cleanup runs is safe without protection:
        it starts from the current snapshot, which expiry always keeps, and its files are
        younger than any orphan age (at least an hour).
        """
        run_id = f"{runtime.table_id}/{job}-{uuid.uuid4().hex[:8]}"
        with self._lock:
            key = self.table_group_key(runtime)
            scheduler = self.service.group(key) if key in self.groups else None
        if scheduler is not None:
            scheduler.start_maintenance(runtime.table_id, run_id, self.clock())
        try:
            table = self._load(runtime)
            report = run_maintenance_job(
                table,
                job,
                runtime.spec.maintenance,
                now_s=self.clock(),
                protected_snapshot_ids=protected_snapshots,
                protected_prefixes=protected_prefixes,
                executors=self._executors_for(runtime, job, table, scheduler, run_id),
                known_live=self._known_live(runtime.table_id),
                catalog_locations=self._catalog_locations(runtime.spec.catalog),
            )
        except MaintenanceRefused as exc:
            self._refuse_maintenance(runtime, exc)
        except Exception as exc:  # any failure is the job's result, never the engine's
            log.warning("maintenance %s of %s failed", job, runtime.table_id, exc_info=True)
            with self._lock:
                runtime.on_maintenance_failed(job, str(exc), self.clock())
            self.service.metrics.maintenance_runs.labels(job.value, "failed").inc()
            self._emit(runtime.table_id, "Warning", "MaintenanceFailed", f"{job}: {exc}")
        else:
            metrics = self.service.metrics
            metrics.maintenance_runs.labels(job.value, "done").inc()
            metrics.maintenance_files_reclaimed.labels(job.value).inc(report.files_removed)
            metrics.maintenance_bytes_reclaimed.labels(job.value).inc(report.bytes_removed)
            with self._lock:
                runtime.on_maintenance_done(report, self.clock())
                if report.snapshot_id is not None:
                    self._scans.pop(runtime.table_id, None)
            if report.files_removed or report.snapshot_id is not None:
                self._emit(runtime.table_id, "Normal", "MaintenanceDone", f"{job}: {report.summary}")
        finally:
            if scheduler is not None:
                scheduler.end_maintenance(run_id, self.clock())
            with self._lock:
                self._touch(runtime.table_id)

    def _refuse_maintenance(self, runtime: TableRuntime, exc: MaintenanceRefused) -> None:
        """Floe refused the job: shown in its status entry and the ``MaintenanceAllowed`` condition,
        with a Warning Event when the refusal is new; the job is asked again one interval later."""
        with self._lock:
            previous = runtime.maintenance_runs.get(exc.job)
            runtime.on_maintenance_failed(exc.job, exc.detail, self.clock(), refused=exc.reason)
            new = previous is None or previous.result != runtime.maintenance_runs[exc.job].result
        self.service.metrics.maintenance_runs.labels(exc.job.value, "refused").inc()
        if new:
            self._emit(runtime.table_id, "Warning", "MaintenanceRefused", str(exc))

    def _catalog_locations(self, ref: CatalogRef) -> CatalogLocations:
        """The locations of the tables of `ref`'s catalog, one index shared by all its tables."""
        catalog = self._catalog(ref)
        with self._lock:
            return self._locations.setdefault(_catalog_key(ref), CatalogLocations(catalog))

    def _known_live(self, table_id: str) -> TableFiles | None:
        with self._lock:
            scanned = self._scans.get(table_id)
        return scanned.files if scanned is not None else None

    def _executors_for(
        self,
        runtime: TableRuntime,
        job: MaintenanceJob,
        table: Table,
        scheduler: GroupScheduler | None,
        run_id: str,
    ) -> ExecutorPool | None:
        """The group's executors for orphan cleanup or expiry of a table with at least
        ``maintenance.executorsAtFiles`` files, while the group has an optimizer; else None."""
        if job not in (MaintenanceJob.ORPHANS, MaintenanceJob.EXPIRE) or scheduler is None:
            return None
        if runtime.data_files + runtime.delete_files < runtime.spec.maintenance.executors_at_files:
            return None
        if not self.service.optimizers(scheduler.name):
            return None
        secret_properties = self._secret_properties.get(runtime.table_id)
        io_properties, secret = task_io_properties(
            table.io.properties,
            runtime.spec.catalog.secret_ref if secret_properties is not None else None,
            secret_properties or {},
        )
        batches = itertools.count()
        return ExecutorPool(
            run=lambda specs: self._file_tasks.run(
                scheduler, runtime.table_id, f"{run_id}-{next(batches)}", specs
            ),
            io_properties=io_properties,
            storage_secret=secret,
        )

    # -- planning ------------------------------------------------------------------------

    def _plan_picked_tables(self) -> None:
        for name in list(self.groups):
            with self._lock:
                if name not in self.groups:
                    continue  # removed meanwhile
                scheduler = self.service.group(name)
            while True:
                now = self.clock()
                with self._lock:
                    if not self._current(name, scheduler):
                        break  # removed meanwhile
                    table_id = scheduler.next_table_to_plan(now)
                    runtime = self.runtimes.get(table_id) if table_id else None
                    if table_id is None:
                        break
                    if runtime is None or not runtime.may_plan(now):
                        scheduler.planning_empty(table_id)
                        continue
                    runtime.on_planning(now)
                self._plan(runtime, name, scheduler, max(1, scheduler.threads_to_plan_for))
                with self._lock:
                    self._touch(runtime.table_id)

    def _plan(self, runtime: TableRuntime, group_name: str, scheduler: GroupScheduler, threads: int) -> None:
        with self._lock:
            if not self._current(group_name, scheduler):
                runtime.on_planning_failed(f"group {runtime.group!r} was deleted")
                return
            group = self.groups[group_name].spec
        now = self.clock()
        try:
            table = self._load(runtime)
            current = table.metadata.current_snapshot()
            cached = self._scans.get(runtime.table_id)
            if cached is not None and current is not None and cached.files.snapshot_id == current.snapshot_id:
                scanned = cached
                check_supported(runtime.spec.table, table, scanned)
            else:
                scanned = scan_supported(runtime.spec.table, table)
            history = optimizing_history(table.metadata)
            config = runtime.spec.optimizing_config(table.metadata.properties)
            plan = plan_optimizing(
                scanned.files,
                config,
                now_s=now,
                last_minor_s=history.last_minor_s,
                last_full_s=history.last_full_s,
                max_tasks=threads,
            )
            if plan.is_empty or plan.optimizing_type is None:
                with self._lock:
                    runtime.on_planned(plan, "")
                    scheduler.planning_empty(runtime.table_id)
                return
            memory = max(MIN_DELETE_MEMORY, group.executor_memory // group.executor_cores // 2)
            secret_properties = self._secret_properties.get(runtime.table_id)
            process = build_process(
                table,
                runtime.spec.table,
                scanned,
                plan,
                config,
                delete_memory_limit=memory,
                clustering=runtime.spec.clustering,
                storage_secret=runtime.spec.catalog.secret_ref if secret_properties is not None else None,
                secret_properties=secret_properties,
            )
        except UnsupportedTableError as exc:
            with self._lock:
                scheduler.planning_empty(runtime.table_id)
            self._refuse_unsupported(runtime, exc, now)
            return
        except InvalidTableProperty as exc:
            with self._lock:
                scheduler.planning_empty(runtime.table_id)
            self._refuse_property(runtime, exc, now)
            return
        except (TableAccessError, OSError, ValueError) as exc:
            with self._lock:
                runtime.on_planning_failed(str(exc))
                scheduler.planning_failed(runtime.table_id)
            self._emit(runtime.table_id, "Warning", "PlanningFailed", str(exc))
            return
        with self._lock:
            if not self._current(group_name, scheduler):
                # The group was deleted (or deleted and created again) while this table was planned.
                runtime.on_planning_failed(f"group {runtime.group!r} was deleted")
                return
            self._in_flight[process.process_id] = _InFlight(process, table, group_name, plan.optimizing_type)
            scheduler.add_process(
                runtime.table_id,
                process.process_id,
                list(process.specs),
                max_retries=runtime.spec.execute.num_retries,
                allow_partial_commit=runtime.spec.allow_partial_commit,
            )
            runtime.on_planned(plan, process.process_id)
        self._emit(
            runtime.table_id,
            "Normal",
            "OptimizingStarted",
            f"{plan.optimizing_type.label} optimizing {process.process_id}: {len(process.specs)} tasks"
            + (
                f"; storage credentials from the mounted Secret {process.specs[0].storage_secret!r}"
                if process.specs[0].storage_secret
                else ""
            ),
        )

    def _current(self, group_name: str, scheduler: GroupScheduler) -> bool:
        """Whether ``scheduler`` is still the group's (not deleted, nor deleted and created again)."""
        return group_name in self.groups and self.service.group(group_name) is scheduler

    # -- commit --------------------------------------------------------------------------

    def _commit_finished(self) -> None:
        now = self.clock()
        with self._lock:
            retries = [d.outcome for d in self._delayed_commits.values() if d.retry_at <= now]
        finished = list(retries)
        for name in list(self.groups):
            with self._lock:
                if name not in self.groups:
                    continue  # removed meanwhile
                finished += self.service.group(name).take_finished()
        for outcome in finished:
            self._commit(outcome)
            with self._lock:
                self._touch(outcome.table_id)

    def _commit(self, outcome: ProcessOutcome) -> None:
        with self._lock:
            flight = self._in_flight.pop(outcome.process_id, None)
            runtime = self.runtimes.get(outcome.table_id)
            delayed = self._delayed_commits.pop(outcome.process_id, None)
        if flight is None or runtime is None:
            # The table was removed while its tasks ran: drop what they wrote, unless a commit
            # of it may have landed (orphan cleanup then keeps what a snapshot references).
            if delayed is None:
                self._discard(outcome, flight)
            return
        with self._lock:
            runtime.on_committing()
        now = self.clock()
        try:
            if not outcome.succeeded and not outcome.allow_partial_commit:
                raise ProcessFailed(_failure_summary(outcome))
            # With partial commit, commit_request keeps the finished tasks (or raises if none).
            request = commit_request(
                flight.process, outcome.results, outcome.failures, runtime.spec.allow_partial_commit
            )
            result = commit_rewrite(flight.table, request, history=flight.commit_history)
        except CommitPending as exc:
            self._delay_commit(outcome, flight, runtime, delayed, str(exc))
            return
        except (ProcessFailed, CommitFailed, UnsupportedTableError) as exc:
            self._discard(outcome, flight)
            with self._lock:
                runtime.on_process_failed(str(exc))
                self._register_in_group(runtime, left_group=flight.group)
            self.service.metrics.commits.labels(flight.group, "failed").inc()
            kept = (
                "; an earlier commit attempt may have landed: its files are kept for orphan cleanup"
                if flight.commit_history.outcome_unknown
                else ""
            )
            self._emit(runtime.table_id, "Warning", "OptimizingFailed", f"{outcome.process_id}: {exc}{kept}")
            if OUT_OF_MEMORY in str(exc):
                self._emit(runtime.table_id, "Warning", OUT_OF_MEMORY, f"{outcome.process_id}: {exc}")
            return
        self._discard(outcome, flight, committed=frozenset(f.file_path for f in request.added_files))
        summary = result.changes
        with self._lock:
            runtime.on_committed(flight.optimizing_type, result.snapshot_id, summary, now)
            self._scans.pop(runtime.table_id, None)
            self._register_in_group(runtime, left_group=flight.group)
        self.service.metrics.commits.labels(flight.group, "committed").inc()
        self._emit(runtime.table_id, "Normal", "Committed", f"{outcome.process_id}: {summary}")

    def _delay_commit(
        self,
        outcome: ProcessOutcome,
        flight: _InFlight,
        runtime: TableRuntime,
        previous: _DelayedCommit | None,
        error: str,
    ) -> None:
        """Keep the process and try its commit again later, backing off; its files stay."""
        delay = FIRST_COMMIT_RETRY_DELAY_S
        if previous is not None:
            delay = min(previous.delay_s * 2, MAX_COMMIT_RETRY_DELAY_S)
        with self._lock:
            if outcome.table_id not in self.runtimes:
                return  # removed meanwhile: nothing to retry for
            self._in_flight[outcome.process_id] = flight
            self._delayed_commits[outcome.process_id] = _DelayedCommit(outcome, self.clock() + delay, delay)
            runtime.on_commit_delayed(error)
        log.warning("%s: commit delayed, trying again in %.0f s: %s", outcome.process_id, delay, error)
        if previous is None:
            self._emit(
                runtime.table_id,
                "Warning",
                "CommitDelayed",
                f"{outcome.process_id}: {error}; its files are kept and the commit is tried again",
            )

    def _discard(
        self, outcome: ProcessOutcome, flight: _InFlight | None, committed: frozenset[str] = frozenset()
    ) -> None:
        """Delete what the process wrote and `committed` does not hold, lost attempts' files too.

        Nothing while a commit attempt of the process (in any call) may have landed unseen: a
        snapshot may reference the files, so they are orphan cleanup's, which keeps those."""
        if flight is None:
            return
        if flight.commit_history.outcome_unknown:
            log.warning(
                "%s: a commit attempt may have landed; its files are kept for orphan cleanup",
                outcome.process_id,
            )
            return
        reported = [written.path for result in outcome.results for written in result.files]
        try:
            removed = remove_uncommitted_outputs(
                flight.table.io,
                outcome.process_id,
                {spec.output_dir for spec in flight.process.specs},
                committed,
                reported,
            )
        except OSError as exc:
            log.warning("%s: could not remove its uncommitted files: %s", outcome.process_id, exc)
            return
        if removed:
            log.info("%s: removed %d files no commit references", outcome.process_id, len(removed))

    # -- views ---------------------------------------------------------------------------

    def occupations(self) -> dict[str, float]:
        """Each table's quota occupation over the last hour (1.0 = its whole quota), by table id:
        what `table_views` says of it, for a fraction of the cost."""
        now = self.clock()
        with self._lock:
            by_group = {name: self.service.group(name).occupations(now) for name in self.groups}
            return {
                table_id: by_group.get(self.table_group_key(r), {}).get(table_id, 0.0)
                for table_id, r in self.runtimes.items()
            }

    def table_views(self) -> list[TableView]:
        """Status of every table, ordered by id."""
        now = self.clock()
        with self._lock:
            stats = {name: self.service.group(name).stats(now) for name in self.groups}
            views = []
            for table_id in sorted(self.runtimes):
                r = self.runtimes[table_id]
                s = stats.get(self.table_group_key(r), {}).get(table_id)
                views.append(
                    TableView(
                        table_id=table_id,
                        table=r.spec.table,
                        group=r.group,
                        group_key=self.table_group_key(r),
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
                    )
                )
            return views

    def _process_io_properties(self, process_id: str) -> dict[str, str] | None:
        """The FileIO properties of the table a process in flight rewrites, credentials included."""
        with self._lock:
            flight = self._in_flight.get(process_id)
        return {k: str(v) for k, v in flight.table.io.properties.items()} if flight else None

    def _on_refused(self, refused: RefusedResult) -> None:
        self._emit(
            refused.table_id,
            "Warning",
            "TaskResultRefused",
            f"{refused.process_id}: {refused.message}; the attempt counts as failed and its "
            f"{refused.files_deleted} file(s) were deleted",
        )

    def _emit(self, table_id: str, kind: str, reason: str, message: str) -> None:
        event = EngineEvent(table_id, kind, reason, message)
        log.info("%s %s %s: %s", kind, table_id, reason, message)
        for listener in self._listeners:
            listener(event)


def _failure_summary(outcome: ProcessOutcome) -> str:
    if not outcome.failures:
        return "process failed"
    first = min(outcome.failures)
    return f"{len(outcome.failures)} tasks failed; {first}: {outcome.failures[first]}"


CatalogKey = tuple[str, tuple[tuple[str, str], ...]]
"""A catalog's name and properties: the tables that share them share one open catalog."""


@functools.lru_cache(maxsize=1 << 16)
def _group_key(name: str, namespace: str, namespaced: bool) -> str:
    return f"{namespace}/{name}" if namespaced else name


@functools.lru_cache(maxsize=1 << 16)
def _table_group_key(table_id: str, group: str, namespaced: bool) -> str:
    """Asked of every table by each status flush and group demand: kept, not worked out again."""
    namespace = table_id.split("/", 1)[0] if "/" in table_id else DEFAULT_NAMESPACE
    return _group_key(group, namespace, namespaced)


def _catalog_key(ref: CatalogRef) -> CatalogKey:
    return ref.name, tuple(sorted(ref.properties.items()))
