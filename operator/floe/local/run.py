"""``floe run``: the always-on engine, embedded: task service, scheduler and one optimizer per group.

Manifests are read from a file or directory and re-read when they change, so quota,
policy and thresholds can be edited while it runs. With ``--once`` it exits when every
table is settled (idle on its current snapshot) or stuck (reported, exit code 1).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession
from rich.console import Console
from rich.live import Live
from rich.table import Table as RichTable

from floe.api.manifests import load_manifests
from floe.api.models import CatalogRef, OptimizedTable, OptimizerGroup
from floe.local.interrupt import Interrupted, deferred_interrupts, reinstall
from floe.service.engine import EngineEvent, OptimizingEngine, TableView
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe_optimizer.app import Optimizer
from floe_optimizer.spark_runner import wait_for_idle_executors
from floe_optimizer.spark_session import get_spark


@dataclass
class ManifestWatcher:
    """Re-reads manifests when a file under `path` changes (by modification time)."""

    path: Path
    catalog: CatalogRef | None
    _stamp: tuple[tuple[str, float], ...] = field(default=())

    def changed(self) -> bool:
        """Whether any manifest file was added, removed or modified since the last load."""
        files = sorted(self.path.glob("*.y*ml")) if self.path.is_dir() else [self.path]
        stamp = tuple((str(f), f.stat().st_mtime) for f in files if f.exists())
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        return True

    def load(self) -> tuple[list[OptimizerGroup], list[OptimizedTable]]:
        """Groups and tables, tables without catalog properties taking `--catalog-config`'s."""
        resources = load_manifests(self.path)
        groups = [r for r in resources if isinstance(r, OptimizerGroup)]
        tables = []
        for r in resources:
            if isinstance(r, OptimizedTable):
                if self.catalog is not None and not r.spec.catalog.properties:
                    r = r.model_copy(update={"spec": r.spec.model_copy(update={"catalog": self.catalog})})
                tables.append(r)
        return groups, tables


def render(views: list[TableView], events: list[EngineEvent]) -> RichTable:
    """The live view: one row per table, then the latest events."""
    out = RichTable(
        title="floe run", caption="\n".join(f"{e.reason}: {e.table_id}: {e.message}" for e in events)
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
            v.table,
            v.group,
            v.state,
            f"{v.quota:g}",
            f"{v.occupation:.0%}",
            str(v.data_files),
            str(v.delete_files),
            str(v.running_tasks),
            str(v.queued_tasks),
            _maintenance_note(v),
            note,
        )
    return out


def _maintenance_note(view: TableView) -> str:
    """The job running now, else how many jobs ran and what they reclaimed."""
    if view.maintaining is not None:
        return f"{view.maintaining} running"
    if not view.maintenance:
        return "-"
    failed = [str(job) for job, run in view.maintenance.items() if run.failed]
    files = sum(run.files_removed for run in view.maintenance.values())
    note = f"{len(view.maintenance)} jobs ran, {files} files reclaimed"
    return f"{note}; failed: {', '.join(failed)}" if failed else note


def run_engine(
    manifests: Path,
    catalog: CatalogRef | None,
    once: bool,
    console: Console,
    cores: int = 2,
    refresh_interval_s: float = 10.0,
    timeout_s: float | None = None,
) -> int:
    """Run until interrupted (or, with `once`, until settled). Returns the exit code."""
    watcher = ManifestWatcher(manifests, catalog)
    watcher.changed()
    groups, tables = watcher.load()
    # Even on this machine the service listens on a port other local users can reach: only
    # the optimizers started here, which are handed this token, may register and take tasks.
    token = secrets.token_urlsafe(32)
    service = TaskService(clock=time.time, registration_token=token)
    engine = OptimizingEngine(service, refresh_interval_s=refresh_interval_s)
    events: list[EngineEvent] = []
    engine.subscribe(lambda e: events.append(e))
    server = TaskServiceServer(service)
    server.start()
    spark = get_spark(master=f"local[{cores}]")
    reinstall()  # SparkContext took SIGINT
    optimizers: dict[str, Optimizer] = {}
    started = time.monotonic()
    interrupted: Interrupted | None = None
    try:
        _apply(engine, groups, tables, optimizers, server.url, token, spark)
        with Live(render(engine.table_views(), events[-5:]), console=console, auto_refresh=False) as live:
            while True:
                # A signal takes effect between ticks: a commit in flight is never cut in half.
                with deferred_interrupts():
                    engine.tick()
                if watcher.changed():
                    groups, tables = watcher.load()
                    _apply(engine, groups, tables, optimizers, server.url, token, spark)
                live.update(render(engine.table_views(), events[-5:]), refresh=True)
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
        if interrupted is not None:
            wait_for_idle_executors(spark)
            processes, removed = engine.abandon_in_flight()
            interrupted.outcome = (
                f"{processes} optimizing process(es) abandoned, nothing committed by them; "
                f"{removed} files they wrote deleted"
            )
        engine.close()
    if interrupted is not None:
        raise interrupted
    stuck = engine.stuck_tables()
    for table_id, reason in stuck.items():
        console.print(f"[yellow]{table_id}[/yellow]: {reason}")
    return 1 if stuck else 0


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
