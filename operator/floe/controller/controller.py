"""The state the operator's handlers share: the `Controller`, with the task service and the engine.

kopf runs the handlers of `floe.controller.groups` and `floe.controller.tables` on its
event loop in the main thread (or a thread of the caller's choosing: see
`floe.controller.main.run_kopf`). The task service answers the optimizer drivers on
``0.0.0.0:PORT`` from its own thread. The engine ticks from a third thread, and table status
is flushed from a fourth, both only while this replica is the leader (see
`floe.controller.leader`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from floe.api.group import OptimizerGroupSpec
from floe.api.inheritance import InheritedSettingsInvalid, effective_spec
from floe.api.models import API_VERSION, TABLE_SET_PLURAL, OptimizedTable
from floe.controller.catalog_secrets import CatalogSecretRefresher
from floe.controller.config import HistoryTableConfig, OperatorConfig
from floe.controller.events import ControllerEvents, InvolvedObject
from floe.controller.external_metrics import (
    AUTHENTICATION_CONFIG_MAP,
    ClientAuthentication,
    ExternalMetricsConfig,
    external_metrics_server,
)
from floe.controller.kube import Kube
from floe.controller.leader import Leadership
from floe.controller.objects import scale_config_map
from floe.controller.pod_health import PodProblemLog
from floe.controller.quiet_listing import QuietListing
from floe.controller.scaling import GroupScaling
from floe.controller.secrets import CatalogSecretError, read_catalog_properties, with_catalog_properties
from floe.controller.settings import InheritedSettings
from floe.controller.status import TableStatusFlusher, epoch, restore_history, restore_maintenance
from floe.kit.background import BackgroundServer
from floe.kit.redaction import Redactor
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.history_sink import RunHistorySink
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe.tables.catalog import open_catalog
from floe.tables.run_history_table import open_history_table
from floe.ui.model import UiSource
from floe.ui.server import UiServer

log = logging.getLogger(__name__)


class Controller:
    """The state kopf's handlers share: engine, task service, Kubernetes API, redaction."""

    def __init__(self, config: OperatorConfig, kube: Kube) -> None:
        self.config = config
        self.kube = kube
        self.service = TaskService(clock=time.time, registration_token=config.registration_token)
        if config.notice_token:
            self.service.notices.allow(config.notice_token)
        self.redact = Redactor()
        self.history_problem: str | None = None
        """Why the run history table (`OperatorConfig.history`) cannot be written now; None when
        it can (the groups' ``HistoryWritten`` condition)."""
        self.history = self._history_sink(config.history) if config.history is not None else None
        self.history_warned: dict[str, str] = {}
        """Per group, the history problem its last ``HistoryNotWritten`` Event told."""
        # Groups keyed by namespace/name: same-named groups in two namespaces stay apart.
        self.engine = OptimizingEngine(
            self.service,
            refresh_interval_s=config.refresh_interval_s,
            namespaced_groups=True,
            spread_first_maintenance=config.spread_first_maintenance,
            history=self.history,
        )
        self.server = TaskServiceServer(self.service, host="0.0.0.0", port=config.service_port)
        self.metrics_server: BackgroundServer | None = None
        """The external metrics API, once serving (`OperatorConfig.external_metrics`)."""
        self.ui_server: BackgroundServer | None = None
        """The web UI, once serving (`OperatorConfig.ui_port`)."""
        self.tables: dict[str, InvolvedObject] = {}
        self.resources: dict[str, OptimizedTable] = {}
        """Each table as applied, before its Secret's catalog properties are merged in."""
        self.awaiting_secret: dict[str, dict[str, Any]] = {}
        """Tables whose spec waits for its catalog Secret, with the status they had then (see
        `reconcile_table`)."""
        self.apply_lock = threading.RLock()
        """Held while a table's spec is applied to the engine (kopf handlers, Secret refresh)."""
        self.table_changes = 0
        """How many times an OptimizedTable was applied or removed (its spec or metadata changed:
        kopf's handlers; a status patch is no such change) since the operator started."""
        self.pod_problems = PodProblemLog()
        self.events = ControllerEvents(
            kube, self.redact, self.tables, self.resources, self.pod_problems, lambda: self.engine.clock()
        )
        self.catalog_secrets = CatalogSecretRefresher(
            kube,
            self.engine,
            self.redact,
            self.events,
            resources=self.resources,
            tables=self.tables,
            awaiting_secret=self.awaiting_secret,
            apply_lock=self.apply_lock,
            register=self._register,
            resolved=self._resolved,
            table_changes=lambda: self.table_changes,
        )
        self.settings = InheritedSettings(
            self.engine, lambda namespace, name: kube.get_custom(TABLE_SET_PLURAL, name, namespace)
        )
        """What each table inherits from its OptimizedTableSet and its OptimizerGroup."""
        self.flusher = TableStatusFlusher(
            kube,
            self.engine,
            self.redact,
            time.time,
            self.catalog_secrets.problems,
            self.settings.status,
            max_writes_per_s=config.status_writes_per_s,
            burst_s=config.status_interval_s,
            drain_events=self.events.drain,
        )
        self.leadership = Leadership(
            kube,
            config.identity,
            config.priority,
            config.peering_name,
            config.namespaces,
            check_interval_s=config.leader_check_interval_s,
            standalone=config.standalone,
        )
        self.quiet_listings: dict[str, QuietListing] = {}
        """Per OptimizedTableSet (uid), its last full listing if that changed nothing."""
        self.warned_groups: set[str] = set()
        self.refused_drivers: set[str] = set()
        """Groups (namespace/name) whose driver pod was refused for want of its ServiceAccount, and
        said so: the Warning Event is posted once, not at every retry."""
        self.scaling = GroupScaling(publish=self.service.set_executors)
        """Each group's executor count: fixed or autoscaled, and the figures the metrics show."""
        self.service.metrics.watch_scaling(self.scaling.samples)
        self.rounds = 0
        """Engine rounds ticked by this replica (only while it leads)."""
        self.loop_seen = time.monotonic()
        """When the engine loop last came round (leading or not), for the liveness probe."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status_thread: threading.Thread | None = None
        self.engine.subscribe(self.events.on_engine_event)

    def start(self) -> None:
        """Post Events, serve the task service and start ticking (as leader) in the background."""
        self.events.start()
        if self.config.create_peering_objects:
            self.leadership.ensure_peering_objects()
        self.server.start()
        if self.config.external_metrics is not None:
            self.metrics_server = self._serve_external_metrics(self.config.external_metrics)
        if self.config.ui_port:
            self.ui_server = self._serve_ui(self.config.ui_port)
        self._thread = threading.Thread(target=self._loop, name="floe-engine", daemon=True)
        self._thread.start()
        self._status_thread = threading.Thread(target=self._flush_loop, name="floe-status-flush", daemon=True)
        self._status_thread.start()
        log.info(
            "task service on port %d, advertised to drivers as %s",
            self.config.service_port,
            self.config.service_url,
        )

    def stop(self) -> None:
        """Stop ticking, flush status one last time, stop serving; then post the Events left."""
        self._stop.set()
        for thread in (self._thread, self._status_thread):
            if thread is not None:
                thread.join(timeout=30)
        self.flusher.close()
        self.server.stop()
        for server in (self.metrics_server, self.ui_server):
            if server is not None:
                server.stop()
        self.engine.close()
        if self.history is not None:
            self.history.close()  # appends the runs left
        self.events.stop()

    def _history_sink(self, config: HistoryTableConfig) -> RunHistorySink:
        """The sink of every run into the history table; its problems show on the groups."""
        catalog = config.catalog
        self.redact.add(catalog.properties, catalog.secret_properties)

        def on_problem(message: str | None) -> None:
            self.history_problem = None if message is None else self.redact(message)

        return RunHistorySink(lambda: open_history_table(open_catalog(catalog), config.table), on_problem)

    def _serve_external_metrics(self, config: ExternalMetricsConfig) -> BackgroundServer | None:
        """Start the external metrics API; None, with the reason logged, when it cannot be: the
        engine goes on without it, and the APIService shows it unavailable."""
        name, namespace = AUTHENTICATION_CONFIG_MAP
        try:
            data = self.kube.read_config_map_data(name, namespace)
            if data is None:
                raise ValueError(f"{namespace}/{name} does not exist")
            server = external_metrics_server(
                config, self.group_demands, ClientAuthentication.from_config_map(data), time.time
            )
            server.start()
        except Exception as exc:  # any cause: RBAC, a missing certificate, a taken port
            log.error(
                "not serving external metrics (external.metrics.k8s.io) on port %d: %s", config.port, exc
            )
            return None
        return server

    def _serve_ui(self, port: int) -> BackgroundServer | None:
        """Start the web UI; None, with the reason logged, when it cannot be (a taken port): the
        engine goes on without it."""
        source = UiSource(
            self.engine,
            self.redact,
            scaling=self.scaling.samples,
            notice=self._ui_notice,
            title=f"floe · {self.config.identity}",
        )
        server = UiServer(source, host="0.0.0.0", port=port)
        try:
            server.start()
        except (OSError, RuntimeError) as exc:
            log.error("not serving the web UI on port %d: %s", port, exc)
            return None
        return server

    def _ui_notice(self) -> str:
        """What every UI page says first: a follower's engine holds no current figures."""
        if self.leadership.is_leader():
            return ""
        return (
            f"This replica ({self.config.identity}) does not lead: its engine is idle and these "
            "figures are not current. Port-forward to the leading replica."
        )

    def group_demands(self, namespace: str) -> list[tuple[str, int]]:
        """Each OptimizerGroup of `namespace` the engine serves, with its demand in tasks."""
        names = [
            g.metadata.name for g in list(self.engine.groups.values()) if g.metadata.namespace == namespace
        ]
        return [(name, self.engine.group_demand(name, namespace)) for name in names]

    def _loop(self) -> None:
        last_secrets = time.monotonic()
        while not self._stop.is_set():
            self.loop_seen = time.monotonic()
            try:
                if self.leadership.is_leader():
                    due = time.monotonic() - last_secrets >= self.config.secret_interval_s
                    if due or self.catalog_secrets.remounted.is_set():
                        self.catalog_secrets.remounted.clear()
                        last_secrets = time.monotonic()
                        self.catalog_secrets.refresh()
                    self.engine.tick()
                    self.autoscale_groups()
                    self.rounds += 1
            except Exception:
                log.exception("engine round failed")
            self._stop.wait(self.config.tick_interval_s)

    def _flush_loop(self) -> None:
        """Every status interval while leading, and once more at the end (after the engine's
        last round): the tables' status written back, beside the engine's rounds."""
        while not self._stop.wait(self.config.status_interval_s):
            try:
                if self.leadership.is_leader():
                    self.flusher.flush()
            except Exception:
                log.exception("status flush failed")
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.leadership.is_leader():
            self.flusher.flush()

    def autoscale_groups(self) -> None:
        """Every engine round: each autoscaled group follows its demand, so a table that triggers
        brings executors within a round rather than at the next status pass."""
        for key, group in list(self.engine.groups.items()):
            if group.spec.autoscaling is not None:
                demand = self.engine.group_demand(group.metadata.name, group.metadata.namespace)
                self.autoscale(key, group.spec, demand)

    def autoscale(self, group_key: str, spec: OptimizerGroupSpec, demand: int) -> int | None:
        """The count an autoscaled group follows now, after its autoscaler's decision for `demand`
        (`OptimizingEngine.group_demand`): the scale ConfigMap rewritten and a
        ``ScaledUp``/``ScaledDown`` Event posted when it changes. None until the group's ConfigMap
        is known (its status pass reads it)."""
        # The engine round and the group's status pass both decide: one at a time, each from
        # the count the other wrote.
        with self.catalog_secrets.group_lock(group_key):
            followed = self.scaling.followed(group_key)
            if followed is None or spec.autoscaling is None:
                return None
            ref, current = followed
            decision = self.scaling.decide(group_key, spec, demand, current, self.engine.clock())
            if not decision.changed:
                return current
            self.kube.apply(scale_config_map(ref, decision.executors))
            self.scaling.note_followed(group_key, ref, decision.executors)
        message = f"executors {current} → {decision.executors}: {decision.reason}"
        self.scaling.note_scaled(group_key, message)
        involved = InvolvedObject(API_VERSION, "OptimizerGroup", ref.name, ref.namespace, ref.uid)
        reason = "ScaledUp" if decision.executors > current else "ScaledDown"
        self.events.post(involved.as_dict(), "Normal", reason, message)
        return decision.executors

    def reconcile_table(
        self,
        table_id: str,
        involved: InvolvedObject,
        base: OptimizedTable,
        status: Mapping[str, Any],
        table_set: str | None = None,
    ) -> None:
        """Apply a table to the engine, its catalog properties read from its Secret, if it names one.

        A Secret that cannot be read leaves the table waiting for it: CatalogReady turns False
        (its status is written at once, even for a table the engine does not know yet), a
        Warning Event names the Secret, and `CatalogSecretRefresher.refresh` reads it again every
        ``secret_interval_s`` until it can apply the table. A table the engine already had
        keeps running on its last properties meanwhile. `table_set`: the OptimizedTableSet that
        made the table, whose template it inherits.
        """
        self.tables[table_id] = involved
        self.settings.use_set(table_id, table_set)
        with self.apply_lock:
            self.resources[table_id] = base
            self.table_changes += 1
        secret = base.spec.catalog.secret_ref
        if not secret:
            self.catalog_secrets.problems.clear(table_id)  # it names no Secret any more: nothing to wait for
            self._register(table_id, base, status)
            return
        try:
            properties = read_catalog_properties(self.kube, secret, base.metadata.namespace)
        except CatalogSecretError as exc:
            self.awaiting_secret[table_id] = dict(status)
            if table_id not in self.engine.runtimes:
                self.flusher.seed(table_id, status)
            self.catalog_secrets.failed(table_id, exc.problem)
            self.flusher.flush(only={table_id})
            return
        self.redact.add(properties, base.spec.catalog.secret_properties)
        self.catalog_secrets.read(table_id)
        self._register(table_id, with_catalog_properties(base, properties), status, properties)

    def forget_table(self, table_id: str) -> None:
        """The table is deleted: the engine, the status flush and the Secret refresh forget it."""
        with self.apply_lock:
            self.resources.pop(table_id, None)
            self.table_changes += 1
            self.awaiting_secret.pop(table_id, None)
            self.engine.remove_table(table_id)
        self.catalog_secrets.problems.clear(table_id)
        self.flusher.forget(table_id)
        self.settings.forget(table_id)
        self.tables.pop(table_id, None)

    def apply_table_set(self, namespace: str, name: str, template: Mapping[str, Any] | None) -> int:
        """An OptimizedTableSet's template as its handler sees it: a change reaches its tables at
        once. Returns how many tables' settings changed."""
        return self.reapply_settings(self.settings.apply_set(namespace, name, template))

    def reapply_settings(self, table_ids: Sequence[str]) -> int:
        """Resolve the settings of `table_ids` again (their set's template or group's defaults
        changed); the engine takes those that changed. Returns how many."""
        changed = 0
        with self.apply_lock:
            for table_id in table_ids:
                base, runtime = self.resources.get(table_id), self.engine.runtimes.get(table_id)
                if base is None or runtime is None:
                    continue  # not applied yet: it is resolved when it is
                spec = base.spec.model_copy(update={"catalog": runtime.spec.catalog})
                resolved = self._resolved(table_id, base.model_copy(update={"spec": spec}))
                if resolved.spec != runtime.spec:
                    self.engine.update_settings(table_id, resolved.spec)
                    changed += 1
        # Where each setting comes from is in the status even when the settings stay the same.
        self.flusher.look_at(table_ids)
        return changed

    def tables_of_group(self, namespace: str, name: str) -> list[str]:
        """The tables (namespace/name) that name the group."""
        return [
            table_id
            for table_id, resource in list(self.resources.items())
            if resource.metadata.namespace == namespace and resource.spec.group == name
        ]

    def _resolved(self, table_id: str, resource: OptimizedTable) -> OptimizedTable:
        """`resource` with the settings it inherits. Settings that do not merge into a valid spec
        (each level is valid on its own) are a Warning Event; the table then runs on its own."""
        try:
            effective = self.settings.resolve(table_id, resource)
        except InheritedSettingsInvalid as exc:
            involved = self.tables.get(table_id)
            if involved is not None:
                self.events.post(involved.as_dict(), "Warning", "InvalidSettings", self.redact(str(exc)))
            log.warning("%s: %s", table_id, self.redact(str(exc)))
            effective = effective_spec(resource.spec, [])
        return resource.model_copy(update={"spec": effective.spec})

    def _register(
        self,
        table_id: str,
        resource: OptimizedTable,
        status: Mapping[str, Any],
        secret_properties: dict[str, str] | None = None,
    ) -> None:
        """Create or update the table's runtime; a new one takes its last optimizing times and
        maintenance runs from ``status`` (a restart, or a follower that became the leader).
        `secret_properties`: what the table's catalog Secret holds, if it names one."""
        # Inline credentials too, and the names the user marks secret.
        self.redact.add(resource.spec.catalog.properties, resource.spec.catalog.secret_properties)
        mounted = (
            self.catalog_secrets.mounted_secret_properties(resource, secret_properties)
            if secret_properties
            else None
        )
        with self.apply_lock:  # against a concurrent Secret refresh applying an older spec
            self.awaiting_secret.pop(table_id, None)
            known = table_id in self.engine.runtimes
            resource = self._resolved(table_id, resource)
            runtime = self.engine.apply_table(resource, secret_properties=mounted)
            if not known and status:
                self.flusher.seed(table_id, status)
                runtime.last_minor_s = runtime.last_minor_s or epoch(status.get("lastMinorOptimizing"))
                runtime.last_major_s = runtime.last_major_s or epoch(status.get("lastMajorOptimizing"))
                runtime.last_full_s = runtime.last_full_s or epoch(status.get("lastFullOptimizing"))
                restore_maintenance(runtime, status)
                restore_history(runtime, status)
                # Re-applying hands the restored last-optimized time to the group's scheduler.
                self.engine.apply_table(resource, secret_properties=mounted)
