"""Prometheus metrics of the task service and the engine, served at ``/metrics``.

Events are counted where they happen (completions, registrations, commits, poll
durations); gauges (queues, optimizers, per-table occupation and state) are read at scrape
time from the sources the service and the engine hand in (`watch_groups`, `watch_tables`),
so they are never stale and cost nothing between scrapes. Each `TaskService` has its own
registry: several services in one process (the tests, the benchmarks) never share counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from floe.scheduling.records import GroupSchedulingStats
from floe.tables.request_budget import BudgetStats


class TableGauges(Protocol):
    """What the per-table gauges show of a table (the engine's `TableView`)."""

    @property
    def group_key(self) -> str: ...
    @property
    def table_id(self) -> str: ...
    @property
    def occupation(self) -> float: ...
    @property
    def running_tasks(self) -> int: ...
    @property
    def queued_tasks(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def health(self) -> int | None: ...


GroupsSource = Callable[[], Iterable[tuple[str, GroupSchedulingStats, int]]]
"""Per group: its name, its scheduling figures and its registered optimizers."""
TablesSource = Callable[[], Iterable[TableGauges]]


class ScalingSample(Protocol):
    """What the scaling gauges and counters show of a group (the operator's `ScaleSample`)."""

    @property
    def group(self) -> str: ...
    @property
    def desired(self) -> int: ...
    @property
    def ready(self) -> int: ...
    @property
    def demand(self) -> int: ...
    @property
    def held_core_s(self) -> float: ...
    @property
    def static_core_s(self) -> float: ...


ScalingSource = Callable[[], Iterable[ScalingSample]]
"""Per group: executors desired and ready, its demand in tasks, and its executor core-seconds."""

CatalogsSource = Callable[[], Mapping[str, BudgetStats]]
"""Per catalog name: what its request budget did and holds (`floe.tables.request_budget`)."""

POLL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
"""Seconds: the scheduler answers a poll in well under a millisecond unless its lock is contended."""


class ServiceMetrics:
    """The counters and histogram the service and engine update, and the registry serving them all."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.tasks_completed = Counter(
            "floe_tasks_completed",
            "Task attempts optimizers completed, by group and outcome (success or failure).",
            ["group", "outcome"],
            registry=self.registry,
        )
        self.results_refused = Counter(
            "floe_task_results_refused",
            "Task results the service refused before they could reach a commit, by group and by the "
            "check they failed (rows, location, missing, size, footer, schema, metrics).",
            ["group", "check"],
            registry=self.registry,
        )
        self.registrations = Counter(
            "floe_optimizer_registrations",
            "Registrations, by result (accepted, or refused for a missing or wrong registration token).",
            ["result"],
            registry=self.registry,
        )
        self.commits = Counter(
            "floe_commits",
            "Optimizing processes that ended at the committer, by group and result (committed or failed).",
            ["group", "result"],
            registry=self.registry,
        )
        self.maintenance_runs = Counter(
            "floe_maintenance_runs",
            "Maintenance job runs, by job (expire, orphans, manifests, dangling-deletes, retention) "
            "and result (done or failed).",
            ["job", "result"],
            registry=self.registry,
        )
        self.executor_seconds = Counter(
            "floe_executor_seconds",
            "Executor core-seconds the tasks of optimizing processes and maintenance jobs took (each "
            "task holds one core), retried attempts included, by group and kind (minor, major, full, "
            "or the maintenance job): what the group's executors were used for.",
            ["group", "kind"],
            registry=self.registry,
        )
        self.maintenance_files_reclaimed = Counter(
            "floe_maintenance_files_reclaimed",
            "Files maintenance jobs removed (or, for commits, took out of the table), by job.",
            ["job"],
            registry=self.registry,
        )
        self.maintenance_file_tasks = Counter(
            "floe_maintenance_file_tasks",
            "Tasks maintenance jobs of big tables sent to their group's executors, by group and kind "
            "(orphan-scan, delete-files).",
            ["group", "kind"],
            registry=self.registry,
        )
        self.maintenance_bytes_reclaimed = Counter(
            "floe_maintenance_bytes_reclaimed",
            "Bytes of the files maintenance jobs removed, by job.",
            ["job"],
            registry=self.registry,
        )
        self.catalog_calls = Counter(
            "floe_catalog_calls",
            "Calls to the tables' catalogs, by kind: load (one table's metadata, for a refresh, a "
            "plan or a maintenance job), probe (the metadata locations of a catalog's tables at "
            "once, which spares loading the tables that did not change) or not-modified (a REST "
            "catalog's 304 to a refresh's conditional load: the table did not change).",
            ["kind"],
            registry=self.registry,
        )
        self.poll_seconds = Histogram(
            "floe_poll_duration_seconds",
            "Time the scheduler took to answer one poll, waiting for its lock included and a long "
            "poll's wait for work excluded.",
            buckets=POLL_BUCKETS,
            registry=self.registry,
        )
        self._state = _StateCollector()
        self.registry.register(self._state)

    def watch_groups(self, groups: GroupsSource) -> None:
        """Report the groups `groups()` gives at each scrape (the task service's)."""
        self._state.groups = groups

    def watch_tables(self, tables: TablesSource) -> None:
        """Report the tables `tables()` gives at each scrape (the engine's; the last one given wins)."""
        self._state.tables = tables

    def watch_catalogs(self, catalogs: CatalogsSource) -> None:
        """Report the request budgets `catalogs()` gives at each scrape (the engine's)."""
        self._state.catalogs = catalogs

    def watch_scaling(self, scaling: ScalingSource) -> None:
        """Report the executor counts and demand `scaling()` gives at each scrape (the operator's)."""
        self._state.scaling = scaling


class _StateCollector(Collector):
    """Gauges read at scrape time."""

    def __init__(self) -> None:
        self.groups: GroupsSource | None = None
        self.tables: TablesSource | None = None
        self.scaling: ScalingSource | None = None
        self.catalogs: CatalogsSource | None = None

    def collect(self) -> Iterator[Metric]:
        """One sample per group, per table and per catalog, from the current state."""
        yield from self._groups()
        yield from self._scaling()
        yield from self._tables()
        yield from self._catalogs()

    def _catalogs(self) -> Iterator[Metric]:
        if self.catalogs is None:
            return
        labels = ["catalog"]
        requests = CounterMetricFamily(
            "floe_catalog_requests", "HTTP requests sent to a REST catalog within its budget.", labels=labels
        )
        throttled = CounterMetricFamily(
            "floe_catalog_throttled",
            "429 and 503 answers of a REST catalog: each pauses every call to it for its Retry-After.",
            labels=labels,
        )
        held_back = CounterMetricFamily(
            "floe_catalog_refreshes_held_back",
            "Table refreshes that found the catalog's request budget spent (or the catalog paused) and "
            "stayed due for a later round.",
            labels=labels,
        )
        waiting = GaugeMetricFamily(
            "floe_catalog_requests_waiting",
            "Commits, plans and jobs waiting for the budget now.",
            labels=labels,
        )
        paused = GaugeMetricFamily(
            "floe_catalog_paused_seconds",
            "How long every call to the catalog still waits after its last 429 or 503 (0: not paused).",
            labels=labels,
        )
        rate = GaugeMetricFamily(
            "floe_catalog_request_rate",
            "Requests a second the budget lets through now: the catalog's setting, halved by 429/503 "
            "answers and growing back.",
            labels=labels,
        )
        for name, stats in sorted(self.catalogs().items()):
            requests.add_metric([name], stats.requests)
            rate.add_metric([name], round(stats.rate_now, 3))
            throttled.add_metric([name], stats.throttled)
            held_back.add_metric([name], stats.refreshes_held_back)
            waiting.add_metric([name], stats.waiting)
            paused.add_metric([name], round(stats.paused_for_s, 3))
        yield from (requests, throttled, held_back, waiting, paused, rate)

    def _scaling(self) -> Iterator[Metric]:
        if self.scaling is None:
            return
        desired = GaugeMetricFamily(
            "floe_group_desired_executors",
            "Executor pods the group wants now: spec.executors, or autoscaling's choice.",
            labels=["group"],
        )
        ready = GaugeMetricFamily("floe_group_ready_executors", "Executor pods ready.", labels=["group"])
        demand = GaugeMetricFamily(
            "floe_group_demand_tasks",
            "Tasks the group's tables want run: running, queued and due, each table's capped by its "
            "quota; what an HPA on a fixed-count group can scale spec.executors on.",
            labels=["group"],
        )
        held = CounterMetricFamily(
            "floe_group_executor_core_seconds_held",
            "Core-seconds of the group's ready executor pods (their cores over time), since the "
            "group's first status (kept across operator restarts).",
            labels=["group"],
        )
        static = CounterMetricFamily(
            "floe_group_executor_core_seconds_static",
            "Core-seconds a group fixed at this group's peak (an autoscaled group's maxExecutors, "
            "a fixed group's executors) would have held over the same time: held / static is "
            "what autoscaling costs against a static group.",
            labels=["group"],
        )
        for sample in self.scaling():
            desired.add_metric([sample.group], sample.desired)
            ready.add_metric([sample.group], sample.ready)
            demand.add_metric([sample.group], sample.demand)
            held.add_metric([sample.group], sample.held_core_s)
            static.add_metric([sample.group], sample.static_core_s)
        yield from (desired, ready, demand, held, static)

    def _groups(self) -> Iterator[Metric]:
        if self.groups is None:
            return
        families = {
            "pending": GaugeMetricFamily(
                "floe_group_pending_tasks", "Planned tasks waiting for an optimizer thread.", labels=["group"]
            ),
            "running": GaugeMetricFamily(
                "floe_group_running_tasks", "Tasks handed out and not completed.", labels=["group"]
            ),
            "optimizers": GaugeMetricFamily(
                "floe_group_optimizers", "Optimizers registered with the group.", labels=["group"]
            ),
            "threads": GaugeMetricFamily(
                "floe_group_threads", "Task threads of the group's registered optimizers.", labels=["group"]
            ),
            "pending_tables": GaugeMetricFamily(
                "floe_group_pending_tables", "Tables waiting to be planned.", labels=["group"]
            ),
        }
        for group, stats, optimizers in self.groups():
            families["pending"].add_metric([group], stats.pending_tasks)
            families["running"].add_metric([group], stats.running_tasks)
            families["optimizers"].add_metric([group], optimizers)
            families["threads"].add_metric([group], stats.threads)
            families["pending_tables"].add_metric([group], stats.pending_tables)
        yield from families.values()

    def _tables(self) -> Iterator[Metric]:
        if self.tables is None:
            return
        labels = ["group", "table"]
        occupation = GaugeMetricFamily(
            "floe_table_quota_occupation",
            "The table's task time in the last hour over its quota (1 = its whole quota).",
            labels=labels,
        )
        running = GaugeMetricFamily("floe_table_running_tasks", "The table's tasks running.", labels=labels)
        queued = GaugeMetricFamily(
            "floe_table_queued_tasks", "The table's tasks planned, waiting.", labels=labels
        )
        state = GaugeMetricFamily(
            "floe_table_state",
            "1 for the table's current state (IDLE, PENDING, PLANNING, ...); other states are not listed.",
            labels=[*labels, "state"],
        )
        health = GaugeMetricFamily(
            "floe_table_health",
            "The table's health score, 0 to 100 (100: its files as optimizing leaves them); tables "
            "not evaluated yet are not listed.",
            labels=labels,
        )
        for view in self.tables():
            key = [view.group_key, view.table_id]
            occupation.add_metric(key, view.occupation)
            running.add_metric(key, view.running_tasks)
            queued.add_metric(key, view.queued_tasks)
            state.add_metric([*key, view.state], 1)
            if view.health is not None:
                health.add_metric(key, view.health)
        yield from (occupation, running, queued, state, health)
