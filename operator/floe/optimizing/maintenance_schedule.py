"""When each maintenance job of a table is due: pure, from the spec, the last runs and a clock."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

from floe.api.table import MaintenanceSpec
from floe.maintenance.job import MaintenanceJob

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
    spec: MaintenanceSpec,
    job: MaintenanceJob,
    last_run_s: float | None,
    now_s: float,
    first_run_s: float = -math.inf,
) -> float | None:
    """When `job` runs next: one interval after its last run; if it never ran, at `first_run_s`
    or at once when that has passed; None when off."""
    interval = job_intervals(spec).get(job)
    if interval is None:
        return None
    return max(now_s, first_run_s) if last_run_s is None else last_run_s + interval


def due_jobs(
    spec: MaintenanceSpec,
    last_runs: Mapping[MaintenanceJob, float],
    now_s: float,
    first_runs: Mapping[MaintenanceJob, float] | None = None,
) -> list[MaintenanceJob]:
    """The enabled jobs whose interval has passed since their last run, or that never ran and
    whose first run (`first_runs`, else at once) has come, in order."""
    due = []
    for job in job_intervals(spec):
        first = (first_runs or {}).get(job, -math.inf)
        when = next_due_s(spec, job, last_runs.get(job), now_s, first)
        if when is not None and when <= now_s:
            due.append(job)
    return due


def spread_first_runs(table_id: str, spec: MaintenanceSpec, since_s: float) -> dict[MaintenanceJob, float]:
    """When each job of a table first seen at `since_s` first runs: a point within the job's
    interval that the table's id fixes, so that the tables' first runs spread evenly.

    Thousands of tables are registered at once when an operator starts or a set lists a
    catalog; were all their first runs due at once, they would queue for hours behind each
    other and compete with refreshes and commits for the operator's core. A hash (not a
    random draw) keeps the points the same for the same table.
    """
    return {
        job: since_s + interval * _share(f"{table_id}/{job}") for job, interval in job_intervals(spec).items()
    }


def _share(key: str) -> float:
    """A fraction in [0, 1) fixed by `key`, evenly distributed over keys."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64
