"""Status of OptimizedTables, flushed in batches, and the conditions helper both kinds use.

The engine changes a table's state many times a minute under load; one API call per change
would flood the API server. `TableStatusFlusher.flush` runs every few seconds and patches
each table's ``status`` subresource once, with only the fields that changed since the last
successful flush.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from floe.api.models import MAX_MESSAGE_LENGTH, MAX_REASON_LENGTH
from floe.controller.kube import Kube
from floe.maintenance.report import MaintenanceJob
from floe.service.engine import OptimizingEngine, TableView
from floe.tables.runtime import MaintenanceRun, TableRuntime, TableState

log = logging.getLogger(__name__)

TABLES = "optimizedtables"
BUSY = {
    TableState.PLANNING,
    TableState.MINOR_OPTIMIZING,
    TableState.MAJOR_OPTIMIZING,
    TableState.FULL_OPTIMIZING,
    TableState.COMMITTING,
}

Status = dict[str, Any]


def timestamp(seconds: float | None) -> str | None:
    """RFC 3339 UTC time of an epoch timestamp, as Kubernetes writes times."""
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(text: Any) -> float | None:
    """Inverse of `timestamp`; None for anything that is not such a time."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def clip(text: str, limit: int = MAX_MESSAGE_LENGTH) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut): the CRD bounds status text,
    and a status patch with a longer value would be refused whole."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def condition(type_: str, true: bool, reason: str, message: str = "") -> dict[str, str]:
    """A condition without its transition time (see `with_transition_times`)."""
    return {
        "type": type_,
        "status": "True" if true else "False",
        "reason": clip(reason, MAX_REASON_LENGTH),
        "message": clip(message),
    }


def with_transition_times(
    conditions: list[dict[str, str]], previous: Any, now: Callable[[], float]
) -> list[dict[str, str]]:
    """Conditions with ``lastTransitionTime`` kept from ``previous`` when the status did not flip."""
    before = {c.get("type"): c for c in previous or [] if isinstance(c, dict)}
    out = []
    for c in conditions:
        old = before.get(c["type"])
        if old is not None and old.get("status") == c["status"] and old.get("lastTransitionTime"):
            out.append({**c, "lastTransitionTime": old["lastTransitionTime"]})
        else:
            out.append({**c, "lastTransitionTime": timestamp(now()) or ""})
    return out


def table_status(runtime: TableRuntime, view: TableView | None, redact: Callable[[str], str]) -> Status:
    """A table's status fields (camelCase), every free text redacted."""
    state = runtime.state
    error = redact(runtime.last_error)
    return {
        "state": state.value,
        "snapshotId": runtime.snapshot_id,
        "quotaOccupation": round(view.occupation, 4) if view else 0.0,
        "dataFiles": runtime.data_files,
        "deleteFiles": runtime.delete_files,
        "lastMinorOptimizing": timestamp(runtime.last_minor_s),
        "lastMajorOptimizing": timestamp(runtime.last_major_s),
        "lastFullOptimizing": timestamp(runtime.last_full_s),
        "lastOptimized": timestamp(runtime.last_optimized_s),
        "lastResult": clip(redact(runtime.last_result)) or None,
        "currentProcess": runtime.process_id,
        "maintenance": maintenance_status(runtime, redact),
        "conditions": [
            condition("Optimizing", state in BUSY, state.value if state in BUSY else "Idle"),
            condition(
                "Pending",
                state == TableState.PENDING,
                "Pending" if state == TableState.PENDING else "NotPending",
                redact(runtime.pending_reason),
            ),
            condition("Degraded", bool(error), degraded_reason(runtime), error),
        ],
    }


def maintenance_status(runtime: TableRuntime, redact: Callable[[str], str]) -> Status:
    """Per job that ran: its last run, result and reclaimed files and bytes, and when it is due next."""
    out: Status = {}
    for job, run in sorted(runtime.maintenance_runs.items()):
        out[job.value] = {
            "lastRun": timestamp(run.finished_s),
            "nextDue": timestamp(runtime.next_maintenance_s(job, run.finished_s)),
            "lastResult": clip(redact(run.result)),
            "filesReclaimed": run.files_removed,
            "bytesReclaimed": run.bytes_removed,
        }
    return out


def restore_maintenance(runtime: TableRuntime, status: Mapping[str, Any]) -> None:
    """Last runs recorded in a table's status, so a restarted operator keeps each job's schedule."""
    recorded = status.get("maintenance")
    if not isinstance(recorded, Mapping):
        return
    for name, job_status in recorded.items():
        finished = epoch(job_status.get("lastRun")) if isinstance(job_status, Mapping) else None
        try:
            job = MaintenanceJob(name)
        except ValueError:
            continue  # a job this version does not know
        if finished is None:
            continue
        result = str(job_status.get("lastResult") or "")
        runtime.restore_maintenance_run(
            job,
            MaintenanceRun(
                finished,
                result,
                int(job_status.get("filesReclaimed") or 0),
                int(job_status.get("bytesReclaimed") or 0),
                failed=result.startswith("failed:"),
            ),
        )


def degraded_reason(runtime: TableRuntime) -> str:
    """Why the table is Degraded, as a condition reason (``Healthy`` when it is not).

    ``TableUnavailable``: the catalog or the table cannot be read (wrong catalog properties
    or Secret, catalog down, table gone); ``PlanningFailed``; ``CommitDelayed``: the process's
    commit could not be finished yet and is being retried; ``OptimizingFailed``: the last
    process failed or its commit was refused, and nothing was committed.
    """
    error = runtime.last_error
    if not error:
        return "Healthy"
    if error.startswith("planning failed"):
        return "PlanningFailed"
    if runtime.state == TableState.COMMITTING:
        return "CommitDelayed"
    if runtime.last_result == f"failed: {error}":
        return "OptimizingFailed"
    return "TableUnavailable"


class TableStatusFlusher:
    """Writes changed table status fields back, one merge patch per table per flush."""

    def __init__(
        self,
        kube: Kube,
        engine: OptimizingEngine,
        redact: Callable[[str], str],
        now: Callable[[], float],
    ) -> None:
        self.kube = kube
        self.engine = engine
        self.redact = redact
        self.now = now
        self._written: dict[str, Status] = {}
        self.patches = 0
        """API calls made so far (tests check that flushing batches)."""

    def seed(self, table_id: str, status: Mapping[str, Any]) -> None:
        """What the resource's status already holds (at resume), so unchanged fields are not re-sent."""
        self._written[table_id] = dict(status)

    def forget(self, table_id: str) -> None:
        """The table is gone; stop writing its status."""
        self._written.pop(table_id, None)

    def flush(self) -> int:
        """Patch every table whose status changed; returns how many patches were sent."""
        views = {v.table_id: v for v in self.engine.table_views()}
        sent = 0
        for table_id, runtime in list(self.engine.runtimes.items()):
            written = self._written.setdefault(table_id, {})
            status = table_status(runtime, views.get(table_id), self.redact)
            status["conditions"] = with_transition_times(
                status["conditions"], written.get("conditions"), self.now
            )
            changed = {k: v for k, v in status.items() if written.get(k) != v}
            if not changed:
                continue
            namespace, name = table_id.split("/", 1)
            try:
                self.kube.patch_status(TABLES, name, namespace, changed)
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("status of %s not written: %s", table_id, exc.reason)
                continue
            written.update(changed)
            sent += 1
        self.patches += sent
        return sent
