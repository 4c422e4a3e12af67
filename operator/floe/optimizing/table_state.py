"""Per-table runtime: the state machine a table goes through, and what its status shows.

IDLE → PENDING (evaluation says work is due) → PLANNING → MINOR/MAJOR/FULL_OPTIMIZING →
COMMITTING → IDLE. Planning failure → PENDING; an empty plan → IDLE.

Pure: the engine does the I/O (loading the table, scanning, planning, committing) and
reports each step here with the clock's time, so every transition is testable alone.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum

from floe.api.history import RunLog
from floe.api.table import OptimizedTableSpec
from floe.maintenance.job import MaintenanceJob, MaintenanceReport
from floe.optimizing.maintenance_schedule import due_jobs, job_intervals, next_due_s, spread_first_runs
from floe.optimizing.refresh_cadence import RefreshState
from floe.planning.files import TableFiles
from floe.planning.health import TableHealth
from floe.planning.plan import OptimizingPlan, OptimizingType
from floe.tables.history import OptimizingHistory


class TableState(StrEnum):
    """What a table is doing; shown as STATE by `kubectl get ot` and `floe run`."""

    IDLE = "IDLE"
    PENDING = "PENDING"
    PLANNING = "PLANNING"
    MINOR_OPTIMIZING = "MINOR_OPTIMIZING"
    MAJOR_OPTIMIZING = "MAJOR_OPTIMIZING"
    FULL_OPTIMIZING = "FULL_OPTIMIZING"
    COMMITTING = "COMMITTING"
    DISABLED = "DISABLED"


UNSUPPORTED = "Unsupported"
"""Refusal reason: the table uses a feature floe cannot handle; neither optimized nor maintained."""
INVALID_TABLE_PROPERTY = "InvalidTableProperty"
"""Refusal reason: a table property floe applies has a value it cannot use; not optimized."""

_OPTIMIZING = {
    OptimizingType.MINOR: TableState.MINOR_OPTIMIZING,
    OptimizingType.MAJOR: TableState.MAJOR_OPTIMIZING,
    OptimizingType.FULL: TableState.FULL_OPTIMIZING,
}


class IllegalTransition(RuntimeError):
    """A step reported in a state where it cannot happen (an engine bug)."""


@dataclass(frozen=True)
class MaintenanceRun:
    """The last run of one maintenance job of a table."""

    finished_s: float
    result: str
    files_removed: int = 0
    bytes_removed: int = 0
    failed: bool = False
    refused: str = ""
    """Why floe refused the run (`floe.maintenance.job.MaintenanceRefused.reason`); empty when
    it was not refused."""


@dataclass
class TableRuntime:
    """Everything floe knows about one OptimizedTable between two refreshes."""

    table_id: str
    spec: OptimizedTableSpec
    state: TableState = TableState.IDLE
    snapshot_id: int | None = None
    data_files: int = 0
    delete_files: int = 0
    pending_reason: str = ""
    pending_since_s: float | None = None
    """When the table last became PENDING: its run's time queued starts there."""
    due_tasks: int = 0
    """Tasks the last evaluation's would-be plan holds: the table's demand before it is planned."""
    last_error: str = ""
    last_result: str = ""
    last_plan_s: float | None = None
    last_refresh_s: float | None = None
    refresh: RefreshState = field(default_factory=RefreshState, repr=False, compare=False)
    table_uuid: str | None = None
    """The table's UUID, as its last load found it: how a set follows a renamed table."""
    last_minor_s: float | None = None
    last_major_s: float | None = None
    last_full_s: float | None = None
    process_id: str | None = None
    evaluated_snapshot_id: int | None = field(default=None, repr=False)
    maintenance_runs: dict[MaintenanceJob, MaintenanceRun] = field(default_factory=dict)
    maintaining: MaintenanceJob | None = None
    """The maintenance job running now (at most one per table)."""
    refusal: str = ""
    """Why floe refuses to optimize the table; empty when it does not."""
    refusal_reason: str = ""
    """The refusal as a condition reason: `UNSUPPORTED` (a feature floe cannot handle) or
    `INVALID_TABLE_PROPERTY` (a table property floe applies has a value it cannot use)."""
    evaluated_metadata: str | None = field(default=None, repr=False)
    """The metadata file the last evaluation (or refusal) read: a change of properties, schema
    or partition spec moves it without a new snapshot."""
    catalog_etag: tuple[str, str] | None = field(default=None, repr=False)
    """The metadata file the last full load found and the ETag the catalog sent with it (REST):
    a refresh sends the tag while the last evaluation read that file (`etag_to_send`)."""
    catalog_error: str | None = None
    """What the last refresh made of the catalog: None, not contacted yet (or since the catalog
    changed); "", it answered (the table itself may still be missing); else why it did not."""
    settled_jobs: dict[MaintenanceJob, str] = field(default_factory=dict)
    """Jobs with nothing to do on a metadata file whatever the time (a run that found nothing, or
    what an evaluation saw: `floe.maintenance.settled`), with that file: while it is the table's
    current one, the job is not due."""
    maintenance_since_s: float | None = None
    """When the engine first saw the table, if it spreads the first run of each job over the
    job's interval from then (`spread_first_runs`); None: a job that never ran is due at once."""
    runs: RunLog = field(default_factory=RunLog, repr=False, compare=False)
    health: TableHealth | None = None
    """The health of the files the last evaluation scanned (`floe.planning.health`)."""
    _maintenance_due_for: tuple[OptimizedTableSpec, str | None] | None = field(
        default=None, repr=False, compare=False
    )
    _earliest_maintenance: float = field(default=0.0, repr=False, compare=False)

    @property
    def group(self) -> str:
        """The OptimizerGroup serving the table."""
        return self.spec.group

    @property
    def last_optimized_s(self) -> float | None:
        """End of the most recent optimizing of any type."""
        times = [t for t in (self.last_minor_s, self.last_major_s, self.last_full_s) if t is not None]
        return max(times) if times else None

    @property
    def settled(self) -> bool:
        """Idle (or disabled) with the current snapshot evaluated: nothing left to do now."""
        if self.state == TableState.DISABLED:
            return True
        return self.state == TableState.IDLE and self.evaluated_snapshot_id is not None

    @property
    def busy(self) -> bool:
        """A process is being planned, run or committed."""
        return self.state in (TableState.PLANNING, TableState.COMMITTING, *_OPTIMIZING.values())

    def update_spec(self, spec: OptimizedTableSpec) -> None:
        """A changed manifest: thresholds, quota, group or enabled apply from now on.

        The last evaluation is forgotten so the next refresh re-evaluates with the new
        thresholds even when the snapshot did not change.
        """
        if spec.catalog != self.spec.catalog:
            self.catalog_error = None  # another catalog, or other properties: not contacted yet
        if spec.maintenance != self.spec.maintenance:
            self.settled_jobs = {}  # other settings may leave a settled job something to do
        self.spec = spec
        self.evaluated_snapshot_id = None
        self.refresh.recheck_now()
        if not spec.enabled and not self.busy:
            self.state = TableState.DISABLED
        elif spec.enabled and self.state == TableState.DISABLED:
            self.state = TableState.IDLE

    def needs_evaluation(self, snapshot_id: int | None, metadata_location: str | None = None) -> bool:
        """Whether a refresh that found `snapshot_id` (in `metadata_location`) must scan and
        evaluate the table.

        An unchanged, already evaluated snapshot is not rescanned; a busy or disabled
        table is not evaluated. The table is evaluated again when its metadata moved, even on
        the same snapshot: a new target file size, or a dropped column or partition field that
        floe refused, makes no snapshot.
        """
        if self.busy or self.state == TableState.DISABLED:
            return False
        if snapshot_id is None or snapshot_id != self.evaluated_snapshot_id:
            return True
        return metadata_location is not None and metadata_location != self.evaluated_metadata

    def unchanged_at(self, metadata_location: str | None) -> bool:
        """Whether a table whose current metadata file is `metadata_location` has nothing new for a
        refresh: its last evaluation read that very file (metadata files never change), so loading
        it would find the evaluated snapshot, schema and properties."""
        return (
            metadata_location is not None
            and metadata_location == self.evaluated_metadata
            and self.evaluated_snapshot_id is not None
        )

    def on_history(self, history: OptimizingHistory) -> None:
        """Last optimizing times as recorded in the table's own snapshots."""
        self.last_minor_s = _latest(self.last_minor_s, history.last_minor_s)
        self.last_major_s = _latest(self.last_major_s, history.last_major_s)
        self.last_full_s = _latest(self.last_full_s, history.last_full_s)

    def etag_to_send(self) -> str | None:
        """The ETag for a conditional load: its file's 304 means nothing new for a refresh
        (`unchanged_at`). None when the catalog sent none, or the last evaluation read another file."""
        if self.catalog_etag is None:
            return None
        metadata_location, etag = self.catalog_etag
        return etag if self.unchanged_at(metadata_location) else None

    def on_evaluated(
        self, files: TableFiles, plan: OptimizingPlan, now_s: float, metadata_location: str | None = None
    ) -> None:
        """A refresh scanned `files` (of the metadata file `metadata_location`) and the evaluator's
        would-be `plan` says whether work is due."""
        self.last_refresh_s = now_s
        self.snapshot_id = files.snapshot_id
        self.evaluated_snapshot_id = files.snapshot_id
        self.evaluated_metadata = metadata_location
        self.data_files = len(files.data_files)
        self.delete_files = len(files.delete_files)
        self.last_error = ""
        self.refusal = self.refusal_reason = ""
        if self.busy or self.state == TableState.DISABLED:
            return
        self.due_tasks = len(plan.tasks)
        if plan.is_empty:
            self.state, self.pending_reason = TableState.IDLE, ""
        else:
            if self.state != TableState.PENDING:
                self.pending_since_s = now_s
            self.state = TableState.PENDING
            kind = plan.optimizing_type.label if plan.optimizing_type else "?"
            self.pending_reason = f"{kind} due in {len(plan.partitions)} partitions"

    def on_refused(
        self,
        reason: str,
        message: str,
        files: TableFiles | None,
        now_s: float,
        metadata_location: str | None = None,
    ) -> None:
        """Floe refuses the table (`message`; `reason` is `UNSUPPORTED` or
        `INVALID_TABLE_PROPERTY`): it is not planned until a refresh finds nothing to refuse.
        `files` are the live files when the refusal came after a scan; then the snapshot counts
        as evaluated and is not scanned again until it or the table's metadata
        (`metadata_location`) changes. A refusal while planning ends the planning."""
        self.last_refresh_s = now_s
        self.last_error = self.refusal = message
        self.refusal_reason = reason
        self.evaluated_metadata = metadata_location
        self.catalog_error = ""  # the catalog answered: the refusal comes from what it returned
        self.pending_reason = ""
        if files is not None:
            self.snapshot_id = self.evaluated_snapshot_id = files.snapshot_id
            self.data_files = len(files.data_files)
            self.delete_files = len(files.delete_files)
        else:
            self.evaluated_snapshot_id = None
        if self.state in (TableState.PENDING, TableState.PLANNING):
            self.state = TableState.IDLE

    def may_plan(self, now_s: float) -> bool:
        """PENDING, past min-plan-interval since the last plan, and no committing maintenance job running."""
        if self.state != TableState.PENDING:
            return False
        if self.maintaining is not None and self.maintaining.commits:
            return False
        return self.last_plan_s is None or now_s - self.last_plan_s >= self.spec.min_plan_interval

    def on_planning(self, now_s: float) -> None:
        """The scheduler chose this table; planning starts."""
        self._expect(TableState.PENDING)
        self.state = TableState.PLANNING
        self.last_plan_s = now_s

    def on_planned(self, plan: OptimizingPlan, process_id: str) -> None:
        """Planning produced tasks (→ optimizing) or nothing (→ IDLE)."""
        self._expect(TableState.PLANNING)
        if plan.is_empty or plan.optimizing_type is None:
            self.state, self.pending_reason = TableState.IDLE, ""
            return
        self.state = _OPTIMIZING[plan.optimizing_type]
        self.process_id = process_id
        self.pending_reason = ""
        self.last_error = ""

    def on_planning_failed(self, error: str) -> None:
        """Planning raised: back to PENDING, the error shown."""
        self._expect(TableState.PLANNING)
        self.state = TableState.PENDING
        self.last_error = f"planning failed: {error}"

    def on_committing(self) -> None:
        """All tasks are done; the commit starts (or starts again, after `on_commit_delayed`)."""
        if self.state not in (*_OPTIMIZING.values(), TableState.COMMITTING):
            raise IllegalTransition(f"{self.table_id}: commit in state {self.state}")
        self.state = TableState.COMMITTING

    def on_commit_delayed(self, error: str) -> None:
        """The commit could not be finished now (the catalog is unreachable, or whether it
        landed is unknown); it is tried again, the table staying COMMITTING, the error shown."""
        self._expect(TableState.COMMITTING)
        self.last_error = error

    def on_committed(self, kind: OptimizingType, snapshot_id: int, summary: str, now_s: float) -> None:
        """The process committed `snapshot_id`; the time of its own type is updated (as in
        Amoro, and as `optimizing_history` reads it back)."""
        self._expect(TableState.COMMITTING)
        if kind == OptimizingType.MINOR:
            self.last_minor_s = now_s
        elif kind == OptimizingType.MAJOR:
            self.last_major_s = now_s
        else:
            self.last_full_s = now_s
        self.last_error = ""
        self._finish(f"{kind.label} committed snapshot {snapshot_id}: {summary}")

    def on_process_failed(self, error: str) -> None:
        """Tasks or the commit failed; nothing was committed and the table is re-evaluated."""
        self.last_error = error
        self._finish(f"failed: {error}")

    def on_loaded(self, now_s: float, table_uuid: str | None = None) -> None:
        """A refresh loaded the table (whose UUID is `table_uuid`) through its catalog."""
        self.last_refresh_s = now_s
        self.catalog_error = ""
        self.table_uuid = table_uuid or self.table_uuid

    def on_access_error(self, error: str, now_s: float, catalog_failed: bool) -> None:
        """The catalog (``catalog_failed``) or the table could not be read; shown until a refresh succeeds.

        The last evaluation is forgotten: the next refresh that reads the table evaluates it again,
        which clears the error even when the snapshot is the one evaluated before.
        """
        self.last_refresh_s = now_s
        self.last_error = error
        self.refusal = self.refusal_reason = ""
        self.catalog_error = error if catalog_failed else ""
        self.evaluated_snapshot_id = None

    # -- maintenance ---------------------------------------------------------------------

    def due_maintenance(self, now_s: float) -> MaintenanceJob | None:
        """The maintenance job to start now, if any.

        None while a job runs, the table is disabled, or it uses a feature floe cannot handle (a
        refused table property leaves maintenance running: it does not depend on it). A job
        that commits a snapshot waits while an optimizing process is in flight (both would
        replace the same files); expiry and orphan cleanup run beside it, protecting what it uses.
        """
        if (
            self.maintaining is not None
            or self.state == TableState.DISABLED
            or self.refusal_reason == UNSUPPORTED
        ):
            return None
        if now_s < self.earliest_maintenance_s():
            return None
        last_runs = {job: run.finished_s for job, run in self.maintenance_runs.items()}
        for job in due_jobs(self.spec.maintenance, last_runs, now_s, self._first_runs()):
            if not self._settled(job) and not (job.commits and self.busy):
                return job
        return None

    def _first_runs(self) -> dict[MaintenanceJob, float]:
        """When each job that never ran is first due (none listed: at once)."""
        if self.maintenance_since_s is None:
            return {}
        return spread_first_runs(self.table_id, self.spec.maintenance, self.maintenance_since_s)

    def _settled(self, job: MaintenanceJob) -> bool:
        """Whether `job` has nothing to do on the table's metadata file as it is (`settled_jobs`)."""
        location = self.settled_jobs.get(job)
        return location is not None and location == self.evaluated_metadata

    def on_settled(self, jobs: Collection[MaintenanceJob], metadata_location: str | None) -> None:
        """An evaluation of `metadata_location` found that `jobs` have nothing to do on it."""
        if metadata_location is None:
            return
        for job in jobs:
            self.settled_jobs[job] = metadata_location
        self._maintenance_due_for = None

    def earliest_maintenance_s(self) -> float:
        """When the first job is due (inf: none is on, or every one is settled), kept until the
        spec, a run or the metadata file changes: the engine asks every table every round."""
        key = (self.spec, self.evaluated_metadata)
        cached = self._maintenance_due_for
        if cached is None or cached[0] is not key[0] or cached[1] != key[1]:
            # The schedule's own answer per job, asked as of the dawn of time: a job's first run,
            # else one interval after its last; none for a settled job.
            self._earliest_maintenance = min(
                (
                    when
                    for job in job_intervals(self.spec.maintenance)
                    if (when := self.next_maintenance_s(job, -math.inf)) is not None
                ),
                default=math.inf,
            )
            self._maintenance_due_for = key
        return self._earliest_maintenance

    def next_maintenance_s(self, job: MaintenanceJob, now_s: float) -> float | None:
        """When `job` is due next (now, or its first run's time, if it never ran); None when the
        spec turns it off or the job is settled until the table changes."""
        if self._settled(job):
            return None
        run = self.maintenance_runs.get(job)
        first = self._first_runs().get(job, -math.inf)
        return next_due_s(self.spec.maintenance, job, run.finished_s if run else None, now_s, first)

    def on_maintenance_started(self, job: MaintenanceJob) -> None:
        """`job` starts; no other job, nor (for a committing job) planning, starts until it ends."""
        if self.maintaining is not None:
            raise IllegalTransition(f"{self.table_id}: {job} while {self.maintaining} runs")
        if job.commits and self.busy:
            raise IllegalTransition(f"{self.table_id}: {job} while {self.state}")
        self.maintaining = job

    def on_maintenance_done(self, report: MaintenanceReport, now_s: float) -> None:
        """The running job finished; a committed snapshot is evaluated at the next refresh."""
        self._end_maintenance(report.job)
        self._maintenance_due_for = None
        self.maintenance_runs[report.job] = MaintenanceRun(
            now_s, report.summary, report.files_removed, report.bytes_removed
        )
        if report.settled_at is not None:
            self.settled_jobs[report.job] = report.settled_at
        elif self.settled_jobs.get(report.job) != self.evaluated_metadata:
            # A job that found work says nothing of a later metadata file: the verdict of an
            # evaluation of the job's own commit, made while it deleted files, stays.
            self.settled_jobs.pop(report.job, None)
        if report.snapshot_id is not None:
            self.evaluated_snapshot_id = None
            self.last_refresh_s = None
            self.refresh.recheck_now()

    def on_maintenance_failed(self, job: MaintenanceJob, error: str, now_s: float, refused: str = "") -> None:
        """The running job raised, or floe refused it (`refused`: why); it is tried again one
        interval later, as a refusal may be lifted meanwhile (a property changed)."""
        self._end_maintenance(job)
        self._maintenance_due_for = None
        result = f"refused: {error}" if refused else f"failed: {error}"
        self.maintenance_runs[job] = MaintenanceRun(now_s, result, failed=True, refused=refused)

    def restore_maintenance_run(self, job: MaintenanceJob, run: MaintenanceRun) -> None:
        """A run recorded before a restart (in status), so the job keeps its schedule."""
        known = self.maintenance_runs.get(job)
        if known is None or known.finished_s < run.finished_s:
            self._maintenance_due_for = None
            self.maintenance_runs[job] = run

    def _end_maintenance(self, job: MaintenanceJob) -> None:
        if self.maintaining != job:
            raise IllegalTransition(f"{self.table_id}: {job} ended while {self.maintaining} runs")
        self.maintaining = None

    def _finish(self, result: str) -> None:
        self.last_result = result
        self.process_id = None
        # Re-evaluate at the next refresh, which is due at once.
        self.evaluated_snapshot_id = None
        self.last_refresh_s = None
        self.refresh.recheck_now()
        self.state = TableState.IDLE if self.spec.enabled else TableState.DISABLED

    def _expect(self, state: TableState) -> None:
        if self.state != state:
            raise IllegalTransition(f"{self.table_id}: expected {state}, is {self.state}")


def _latest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
