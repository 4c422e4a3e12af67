"""``floe run``: the always-on engine, embedded: task service, scheduler and one optimizer per group.

Manifests are read from a file or directory and re-read when they change, so quota,
policy and thresholds can be edited while it runs. With ``--once`` it exits when every
table is settled (idle on its current snapshot) or stuck (reported, exit code 1); a maintenance
job floe refused (`floe.maintenance.job.MaintenanceRefused`) is reported too, exit code 1.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table as RichTable

from floe.api.group import OptimizerGroup
from floe.api.inheritance import SettingsLayer, effective_spec, group_layer, set_layer
from floe.api.manifests import load_manifests
from floe.api.models import OptimizedTable
from floe.api.table import CatalogRef
from floe.api.table_set import OptimizedTableSet, OptimizedTableSetSpec
from floe.kit.redaction import Redactor
from floe.local.interrupt import Interrupted, deferred_interrupts, reinstall
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.history_sink import RunHistorySink
from floe.optimizing.registry import EngineEvent
from floe.optimizing.views import TableView
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe.tables.catalog import open_catalog
from floe.tables.run_history_table import open_history_table
from floe.tables.selection import TableSelector, claim_tables, list_table_identifiers, set_table_manifest
from floe.ui.model import UiSource
from floe.ui.server import UiServer
from floe_optimizer.app import Optimizer
from floe_optimizer.spark_runner import wait_for_idle_executors
from floe_optimizer.spark_session import get_spark


@dataclass
class ManifestWatcher:
    """Re-reads manifests when a file under `path` changes (by modification time), and lists the
    catalogs of OptimizedTableSets again every ``listInterval``."""

    path: Path
    catalog: CatalogRef | None
    redact: Redactor = field(default_factory=Redactor)
    """Learns every catalog's credentials the manifests name, for what `floe run` prints."""
    problems: dict[str, str] = field(default_factory=dict)
    """Per OptimizedTableSet (namespace/name) whose catalog could not be listed: why. Its tables
    stay as last listed."""
    sources: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    """Per table (namespace, name) of the last load: where each setting not left to floe's
    default came from (`floe.api.inheritance.EffectiveSpec.sources`)."""
    _stamp: tuple[tuple[str, float], ...] = field(default=())
    _listed: dict[str, tuple[float, OptimizedTableSetSpec, list[str]]] = field(default_factory=dict)
    """Per OptimizedTableSet: when it was listed (monotonic), its spec then, what it selected."""

    def changed(self) -> bool:
        """Whether any manifest file was added, removed or modified since the last load, or a
        set's catalog is due to be listed again."""
        files = sorted(self.path.glob("*.y*ml")) if self.path.is_dir() else [self.path]
        stamp = tuple((str(f), f.stat().st_mtime) for f in files if f.exists())
        due = any(time.monotonic() - at >= spec.list_interval for at, spec, _ in self._listed.values())
        if stamp == self._stamp and not due:
            return False
        self._stamp = stamp
        return True

    def load(self) -> tuple[list[OptimizerGroup], list[OptimizedTable]]:
        """Groups and tables (those of the sets included), tables without catalog properties
        taking `--catalog-config`'s. A table given by its own manifest wins over a set's. Each
        table carries its effective settings: its own, else its set's template, else its group's
        tableDefaults (`floe.api.inheritance`)."""
        resources = load_manifests(self.path)
        groups = [r for r in resources if isinstance(r, OptimizerGroup)]
        defaults = {(g.metadata.namespace, g.metadata.name): group_layer(g) for g in groups}
        own = [r for r in resources if isinstance(r, OptimizedTable)]
        self.sources = {}
        tables = [self._resolved(self._with_catalog(r), None, defaults) for r in own]
        sets = [r for r in resources if isinstance(r, OptimizedTableSet)]
        self._listed = {k: v for k, v in self._listed.items() if k in {_key(s) for s in sets}}
        for table_set in sets:
            namespace = [t for t in tables if t.metadata.namespace == table_set.metadata.namespace]
            served = {(t.spec.catalog.name, t.spec.table) for t in namespace}
            names = {t.metadata.name for t in namespace}
            mine, _ = claim_tables(table_set.spec.catalog.name, self._selected(table_set), served, names)
            template = set_layer(table_set.metadata.name, table_set.spec.template)
            for name, identifier in mine.items():
                table = OptimizedTable.model_validate(set_table_manifest(table_set, name, identifier))
                tables.append(self._resolved(self._with_catalog(table), template, defaults))
        return groups, tables

    def _resolved(
        self,
        table: OptimizedTable,
        template: SettingsLayer | None,
        defaults: Mapping[tuple[str, str], SettingsLayer | None],
    ) -> OptimizedTable:
        """`table` with the settings it inherits from its set's `template` and its group's
        `defaults`; their sources noted in `sources`."""
        group = defaults.get((table.metadata.namespace, table.spec.group))
        resolved = effective_spec(table.spec, [template, group])
        self.sources[(table.metadata.namespace, table.metadata.name)] = resolved.sources
        return table.model_copy(update={"spec": resolved.spec})

    def _catalog_for(self, catalog: CatalogRef) -> CatalogRef:
        """`catalog`, or `--catalog-config`'s when it has no properties of its own."""
        return self.catalog if self.catalog is not None and not catalog.properties else catalog

    def _with_catalog(self, table: OptimizedTable) -> OptimizedTable:
        catalog = self._learn(self._catalog_for(table.spec.catalog))
        return table.model_copy(update={"spec": table.spec.model_copy(update={"catalog": catalog})})

    def _selected(self, table_set: OptimizedTableSet) -> list[str]:
        """The set's tables: listed now when due or when the set changed, else as last listed
        (also when listing fails)."""
        key = _key(table_set)
        at, spec, selected = self._listed.get(key, (None, None, []))
        if at is not None and spec == table_set.spec and time.monotonic() - at < table_set.spec.list_interval:
            return selected
        catalog = self._learn(self._catalog_for(table_set.spec.catalog))
        try:
            identifiers = list_table_identifiers(open_catalog(catalog))
        except Exception as exc:  # whatever the catalog says: the tables stay as they were
            self.problems[key] = f"cannot list catalog {catalog.name!r}: {exc}"
        else:
            self.problems.pop(key, None)
            selected = TableSelector(table_set.spec.include, table_set.spec.exclude).select(identifiers)
        self._listed[key] = (time.monotonic(), table_set.spec, selected)
        return selected

    def _learn(self, catalog: CatalogRef) -> CatalogRef:
        """`catalog`, its credentials now masked in whatever `floe run` prints."""
        self.redact.add(catalog.properties, catalog.secret_properties)
        return catalog


def _key(table_set: OptimizedTableSet) -> str:
    return f"{table_set.metadata.namespace}/{table_set.metadata.name}"


def render(views: list[TableView], events: list[EngineEvent], redact: Callable[[str], str]) -> RichTable:
    """The live view: one row per table, then the latest events; every text `redact`ed and shown
    as it is (no rich markup read from it)."""

    def shown(text: str) -> str:
        return escape(redact(text))

    out = RichTable(
        title="floe run", caption="\n".join(shown(f"{e.reason}: {e.table_id}: {e.message}") for e in events)
    )
    for column in (
        "table",
        "group",
        "state",
        "quota",
        "occupation",
        "data files",
        "delete files",
        "running",
        "queued",
        "maintenance",
        "last result / why pending",
    ):
        out.add_column(column, overflow="fold")
    for v in views:
        note = v.last_error or (v.pending_reason if v.state == "PENDING" else v.last_result)
        out.add_row(
            shown(v.table),
            shown(v.group),
            v.state,
            f"{v.quota:g}",
            f"{v.occupation:.0%}",
            str(v.data_files),
            str(v.delete_files),
            str(v.running_tasks),
            str(v.queued_tasks),
            shown(_maintenance_note(v)),
            shown(note),
        )
    return out


def _maintenance_note(view: TableView) -> str:
    """The job running now, else how many jobs ran and what they reclaimed."""
    if view.maintaining is not None:
        return f"{view.maintaining} running"
    if not view.maintenance:
        return "-"
    failed = [str(job) for job, run in view.maintenance.items() if run.failed and not run.refused]
    refused = [f"{job} ({run.refused})" for job, run in view.maintenance.items() if run.refused]
    files = sum(run.files_removed for run in view.maintenance.values())
    note = f"{len(view.maintenance)} jobs ran, {files} files reclaimed"
    if failed:
        note += f"; failed: {', '.join(failed)}"
    return f"{note}; refused: {', '.join(refused)}" if refused else note


def run_engine(
    manifests: Path,
    catalog: CatalogRef | None,
    once: bool,
    console: Console,
    redact: Redactor,
    cores: int = 2,
    refresh_interval_s: float = 10.0,
    timeout_s: float | None = None,
    history_table: str | None = None,
    ui_port: int = 0,
    notice_token: str | None = None,
) -> int:
    """Run until interrupted (or, with `once`, until settled). Returns the exit code. Every text
    printed passes through `redact`, which learns the credentials of every catalog the
    manifests name. With `history_table` (``namespace.table`` of `catalog`), every run that
    ends is appended there too. With `ui_port`, the web UI is served on 127.0.0.1 there. With
    `notice_token`, change notices that present it are taken (`floe.service.change_notices`)."""

    def warn(subject: str, text: str) -> None:
        console.print(f"[yellow]{escape(redact(subject))}[/yellow]: {escape(redact(text))}", highlight=False)

    watcher = ManifestWatcher(manifests, catalog, redact)
    watcher.changed()
    groups, tables = watcher.load()
    for table_set, problem in watcher.problems.items():
        warn(table_set, problem)
    # Even on this machine the service listens on a port other local users can reach: only
    # the optimizers started here, which are handed this token, may register and take tasks.
    token = secrets.token_urlsafe(32)
    service = TaskService(clock=time.time, registration_token=token)
    if notice_token:
        service.notices.allow(notice_token)
    events: list[EngineEvent] = []
    history = _history_sink(catalog, history_table, events) if history_table else None
    # --once waits for every job's first run, so none is put off; a long run spreads them.
    engine = OptimizingEngine(
        service, refresh_interval_s=refresh_interval_s, spread_first_maintenance=not once, history=history
    )
    engine.subscribe(lambda e: events.append(e))
    server = TaskServiceServer(service)
    server.start()
    if notice_token:
        console.print(f"change notices: POST {server.url}/v1/tables/NAMESPACE/TABLE/changed", highlight=False)
    ui = UiServer(UiSource(engine, redact, title="floe run"), port=ui_port) if ui_port else None
    if ui is not None:
        ui.start()
        console.print(f"web UI: {ui.url}", highlight=False)
    spark = get_spark(master=f"local[{cores}]")
    reinstall()  # SparkContext took SIGINT
    optimizers: dict[str, Optimizer] = {}
    started = time.monotonic()
    interrupted: Interrupted | None = None
    try:
        _apply(engine, groups, tables, optimizers, server.url, token, spark)
        view = render(engine.table_views(), events[-5:], redact)
        with Live(view, console=console, auto_refresh=False) as live:
            while True:
                # A signal takes effect between ticks: a commit in flight is never cut in half.
                with deferred_interrupts():
                    engine.tick()
                if watcher.changed():
                    groups, tables = watcher.load()
                    _apply(engine, groups, tables, optimizers, server.url, token, spark)
                    for table_set, problem in watcher.problems.items():
                        warn(table_set, problem)
                live.update(render(engine.table_views(), events[-5:], redact), refresh=True)
                if once and engine.converged():
                    break
                if timeout_s is not None and time.monotonic() - started > timeout_s:
                    console.print(f"[red]not converged after {timeout_s:g}s[/red]")
                    return 1
                time.sleep(0.5)
    except Interrupted as exc:
        interrupted = exc
    finally:
        # Interrupted: the running tasks are cancelled at once, their processes abandoned.
        for optimizer in optimizers.values():
            optimizer.stop(grace_s=0 if interrupted else 30)
        server.stop()
        if ui is not None:
            ui.stop()
        if interrupted is not None:
            wait_for_idle_executors(spark)
            processes, removed = engine.abandon_in_flight()
            interrupted.outcome = (
                f"{processes} optimizing process(es) abandoned, nothing committed by them; "
                f"{removed} files they wrote deleted"
            )
        engine.close()
        if history is not None:
            history.close()
    if interrupted is not None:
        raise interrupted
    if history is not None and history.problem is not None:
        warn(history_table or "", history.problem)
        return 1
    stuck = engine.stuck_tables()
    for table_id, reason in stuck.items():
        warn(table_id, reason)
    refused = [
        (view.table_id, f"{job} {run.result}")
        for view in engine.table_views()
        for job, run in view.maintenance.items()
        if run.refused
    ]
    for table_id, text in refused:
        warn(table_id, text)
    return 1 if stuck or refused else 0


def _history_sink(catalog: CatalogRef | None, identifier: str, events: list[EngineEvent]) -> RunHistorySink:
    """The sink of every run into ``identifier`` of `catalog` (``--catalog-config``'s); its
    problems appear with the Events."""
    if catalog is None:
        raise ValueError("--history-table needs --catalog-config: the catalog the history table is in")

    def on_problem(message: str | None) -> None:
        if message is not None:
            events.append(EngineEvent(identifier, "Warning", "HistoryNotWritten", message))

    return RunHistorySink(lambda: open_history_table(open_catalog(catalog), identifier), on_problem)


def _apply(
    engine: OptimizingEngine,
    groups: list[OptimizerGroup],
    tables: list[OptimizedTable],
    optimizers: dict[str, Optimizer],
    url: str,
    token: str,
    spark: SparkSession,
) -> None:
    for group in groups:
        engine.apply_group(group)
        name, threads = group.metadata.name, group.spec.max_threads
        current = optimizers.get(name)
        if current is not None and current.threads != threads:
            current.stop(grace_s=30)
            del optimizers[name]
        if name not in optimizers and threads > 0:
            optimizer = Optimizer(
                url,
                group=name,
                threads=threads,
                spark=spark,
                memory_bytes=group.spec.executor_memory,
                name=f"embedded-{name}",
                registration_token=token,
            )
            optimizer.start()
            optimizers[name] = optimizer
    # Embedded optimizers register in the background; until they have, their groups would
    # look like groups without an optimizer.
    deadline = time.monotonic() + 30
    while any(o.optimizer_id is None for o in optimizers.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for table in tables:
        engine.apply_table(table)
    known = {f"{t.metadata.namespace}/{t.metadata.name}" for t in tables}
    for table_id in list(engine.runtimes):
        if table_id not in known:
            engine.remove_table(table_id)
