"""When each maintenance job of a table is due: pure, from the spec, the last runs and a clock."""

from __future__ import annotations

from collections.abc import Mapping

from floe.api.models import MaintenanceSpec
from floe.tables.maintenance_job import MaintenanceJob

# Retention first: the files it drops become history that expiry, then orphan cleanup, reclaim.
# Dangling deletes before manifests, so the rewritten manifests no longer carry them.
JOB_ORDER = (
    MaintenanceJob.RETENTION,
    MaintenanceJob.DANGLING_DELETES,
    MaintenanceJob.MANIFESTS,
    MaintenanceJob.EXPIRE,
    MaintenanceJob.ORPHANS,
)


def job_intervals(spec: MaintenanceSpec) -> dict[MaintenanceJob, float]:
    """The enabled jobs of a table and the seconds between two runs of each, in `JOB_ORDER`."""
    intervals: dict[MaintenanceJob, float | None] = {
        MaintenanceJob.RETENTION: spec.data_retention.interval if spec.data_retention else None,
        MaintenanceJob.DANGLING_DELETES: (
            spec.dangling_deletes.interval if spec.dangling_deletes.enabled else None
        ),
        MaintenanceJob.MANIFESTS: spec.manifests.interval if spec.manifests.enabled else None,
        MaintenanceJob.EXPIRE: (
            spec.snapshot_retention.interval if spec.snapshot_retention.enabled else None
        ),
        MaintenanceJob.ORPHANS: spec.orphan_files.interval if spec.orphan_files.enabled else None,
    }
    return {job: interval for job in JOB_ORDER if (interval := intervals[job]) is not None}


def next_due_s(
    spec: MaintenanceSpec, job: MaintenanceJob, last_run_s: float | None, now_s: float
) -> float | None:
    """When `job` runs next: one interval after its last run, at once if it never ran; None when off."""
    interval = job_intervals(spec).get(job)
    if interval is None:
        return None
    return now_s if last_run_s is None else last_run_s + interval


def due_jobs(
    spec: MaintenanceSpec, last_runs: Mapping[MaintenanceJob, float], now_s: float
) -> list[MaintenanceJob]:
    """The enabled jobs whose interval has passed since their last run (or that never ran), in order."""
    due = []
    for job in job_intervals(spec):
        when = next_due_s(spec, job, last_runs.get(job), now_s)
        if when is not None and when <= now_s:
            due.append(job)
    return due
