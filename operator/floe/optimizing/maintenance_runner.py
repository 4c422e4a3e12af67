"""Running a table's maintenance jobs for the engine: on their schedule or at once, on threads of
their own (a job lists and deletes files for minutes on a big table), with what a process in
flight needs kept out of reach, on the group's executors when the table is big, and with each
job's end or refusal shown to users."""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from pyiceberg.table import Table

from floe.api.history import Outcome
from floe.maintenance.job import MaintenanceJob, MaintenanceRefused, MaintenanceReport
from floe.maintenance.jobs import run_maintenance_job
from floe.maintenance.orphans_on_executors import ExecutorPool
from floe.optimizing.catalog_access import CatalogAccess
from floe.optimizing.maintenance_schedule import job_intervals
from floe.optimizing.registry import TableRegistry
from floe.optimizing.run_history import maintenance_run
from floe.optimizing.table_state import TableRuntime
from floe.planning.files import TableFiles
from floe.protocol.storage import task_io_properties
from floe.scheduling.group_scheduler import GroupScheduler
from floe.service.file_tasks import FileTaskDispatcher
from floe.tables.request_budget import Priority, within_priority

log = logging.getLogger(__name__)

Protection = Callable[[str | None], tuple[tuple[int, ...], tuple[str, ...]]]
"""Given a table's process id (or None), the snapshot ids and file-name prefixes its process in
flight needs kept."""


class MaintenanceRunner:
    """Starts due maintenance jobs and runs them on its own threads."""

    def __init__(
        self,
        registry: TableRegistry,
        catalogs: CatalogAccess,
        protection: Protection,
        maintenance_threads: int,
    ) -> None:
        self._registry = registry
        self._catalogs = catalogs
        self._protection = protection
        self._pool = ThreadPoolExecutor(
            max_workers=maintenance_threads, thread_name_prefix="floe-maintenance"
        )
        self._file_tasks = FileTaskDispatcher(registry.service, registry.clock)

    def close(self) -> None:
        """Let the jobs running now finish (those waiting on file tasks fail at once)."""
        self._file_tasks.close()
        self._pool.shutdown(wait=True)

    def run_now(self, table_id: str, job: MaintenanceJob) -> Future[None]:
        """Start `job` of the table at once, whatever its schedule, protected like a scheduled run."""
        with self._registry.lock:
            runtime = self._registry.runtimes[table_id]
            runtime.on_maintenance_started(job)
            self._registry.touch(table_id)
            return self._submit(runtime, job)

    @staticmethod
    def due(runtime: TableRuntime, now: float) -> MaintenanceJob | None:
        """The job of the table whose time has come, if any."""
        # A table never read, or without a snapshot, has nothing to maintain yet.
        if runtime.snapshot_id is None:
            return None
        return runtime.due_maintenance(now)

    def start_due(self, visit: list[TableRuntime]) -> None:
        """Start the due job of each table of `visit`."""
        registry = self._registry
        now = registry.clock()
        with registry.lock:
            for runtime in visit:
                if registry.runtimes.get(runtime.table_id) is not runtime:
                    continue  # removed meanwhile
                job = self.due(runtime, now)
                if job is not None:
                    runtime.on_maintenance_started(job)
                    self._submit(runtime, job)

    def _submit(self, runtime: TableRuntime, job: MaintenanceJob) -> Future[None]:
        # Under the lock: what the job must not touch is read before anything else can start.
        protected_snapshots, protected_prefixes = self._protection(runtime.process_id)
        return self._pool.submit(
            within_priority(Priority.MAINTENANCE, self._maintain),
            runtime,
            job,
            protected_snapshots,
            protected_prefixes,
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
        registry = self._registry
        run_id = f"{runtime.table_id}/{job}-{uuid.uuid4().hex[:8]}"
        started = registry.clock()
        executor_seconds: list[float] = []

        def record(outcome: Outcome, error: str = "", report: MaintenanceReport | None = None) -> None:
            """Keep the run in the table's history (hold the lock)."""
            registry.record_run(
                runtime,
                maintenance_run(
                    runtime.table_id,
                    run_id.rsplit("/", 1)[-1],
                    job,
                    started,
                    registry.clock(),
                    outcome,
                    error=error,
                    files_removed=report.files_removed if report else 0,
                    bytes_removed=report.bytes_removed if report else 0,
                    snapshot_id=report.snapshot_id if report else None,
                    executor_seconds=sum(executor_seconds),
                    trigger=trigger,
                ),
                key,
            )

        with registry.lock:
            trigger = _maintenance_trigger(runtime, job, started)
            key = registry.table_group_key(runtime)
            scheduler = registry.service.group(key) if key in registry.groups else None
        if scheduler is not None:
            scheduler.start_maintenance(runtime.table_id, run_id, registry.clock())
        try:
            table = self._catalogs.load(runtime)
            report = run_maintenance_job(
                table,
                job,
                runtime.spec.maintenance,
                now_s=registry.clock(),
                protected_snapshot_ids=protected_snapshots,
                protected_prefixes=protected_prefixes,
                executors=self._executors_for(runtime, job, table, scheduler, run_id, executor_seconds),
                known_live=self._known_live(runtime.table_id),
                catalog_locations=self._catalogs.catalog_locations(runtime.spec.catalog),
            )
        except MaintenanceRefused as exc:
            self._refuse(runtime, exc)
            with registry.lock:
                record("refused", str(exc))
        except Exception as exc:  # any failure is the job's result, never the engine's
            log.warning("maintenance %s of %s failed", job, runtime.table_id, exc_info=True)
            with registry.lock:
                runtime.on_maintenance_failed(job, str(exc), registry.clock())
                record("failed", str(exc))
            registry.service.metrics.maintenance_runs.labels(job.value, "failed").inc()
            registry.emit(runtime.table_id, "Warning", "MaintenanceFailed", f"{job}: {exc}")
        else:
            metrics = registry.service.metrics
            metrics.maintenance_runs.labels(job.value, "done").inc()
            metrics.maintenance_files_reclaimed.labels(job.value).inc(report.files_removed)
            metrics.maintenance_bytes_reclaimed.labels(job.value).inc(report.bytes_removed)
            with registry.lock:
                runtime.on_maintenance_done(report, registry.clock())
                record("done", report=report)
                if report.snapshot_id is not None:
                    registry.evaluations.pop(runtime.table_id, None)
            if report.files_removed or report.snapshot_id is not None:
                registry.emit(runtime.table_id, "Normal", "MaintenanceDone", f"{job}: {report.summary}")
        finally:
            if scheduler is not None:
                scheduler.end_maintenance(run_id, registry.clock())
            with registry.lock:
                registry.touch(runtime.table_id)

    def _refuse(self, runtime: TableRuntime, exc: MaintenanceRefused) -> None:
        """Floe refused the job: shown in its status entry and the ``MaintenanceAllowed`` condition,
        with a Warning Event when the refusal is new; the job is asked again one interval later."""
        registry = self._registry
        with registry.lock:
            previous = runtime.maintenance_runs.get(exc.job)
            runtime.on_maintenance_failed(exc.job, exc.detail, registry.clock(), refused=exc.reason)
            new = previous is None or previous.result != runtime.maintenance_runs[exc.job].result
        registry.service.metrics.maintenance_runs.labels(exc.job.value, "refused").inc()
        if new:
            registry.emit(runtime.table_id, "Warning", "MaintenanceRefused", str(exc))

    def _known_live(self, table_id: str) -> TableFiles | None:
        with self._registry.lock:
            evaluation = self._registry.evaluations.get(table_id)
        return evaluation.scanned.files if evaluation is not None else None

    def _executors_for(
        self,
        runtime: TableRuntime,
        job: MaintenanceJob,
        table: Table,
        scheduler: GroupScheduler | None,
        run_id: str,
        executor_seconds: list[float],
    ) -> ExecutorPool | None:
        """The group's executors for orphan cleanup or expiry of a table with at least
        ``maintenance.executorsAtFiles`` files, while the group has an optimizer; else None.
        The seconds each batch of file tasks took are added to `executor_seconds`."""
        if job not in (MaintenanceJob.ORPHANS, MaintenanceJob.EXPIRE) or scheduler is None:
            return None
        if runtime.data_files + runtime.delete_files < runtime.spec.maintenance.executors_at_files:
            return None
        if not self._registry.service.optimizers(scheduler.name):
            return None
        secret_properties = self._registry.secret_properties.get(runtime.table_id)
        io_properties, secret = task_io_properties(
            table.io.properties,
            runtime.spec.catalog.secret_ref if secret_properties is not None else None,
            secret_properties or {},
        )
        batches = itertools.count()
        return ExecutorPool(
            run=lambda specs: self._file_tasks.run(
                scheduler,
                runtime.table_id,
                f"{run_id}-{next(batches)}",
                specs,
                on_work=lambda work: executor_seconds.append(work.task_seconds),
            ),
            io_properties=io_properties,
            storage_secret=secret,
        )


def _maintenance_trigger(runtime: TableRuntime, job: MaintenanceJob, now_s: float) -> str:
    """Why the job runs: its interval since its last run, or that it never ran."""
    interval = job_intervals(runtime.spec.maintenance).get(job)
    last = runtime.maintenance_runs.get(job)
    if last is None:
        return f"first run (every {interval:g} s)" if interval is not None else "first run"
    since = f"{now_s - last.finished_s:.0f} s since its last run"
    return f"{since} (every {interval:g} s)" if interval is not None else since
