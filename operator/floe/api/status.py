"""What the operator writes back: status conditions, and an OptimizedTable's status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from floe.api.history import STATUS_HISTORY, RunRecord
from floe.api.meta import (
    MAX_CONDITION_TYPE_LENGTH,
    MAX_CONDITIONS,
    MAX_LABEL_LENGTH,
    MAX_MESSAGE_LENGTH,
    MAX_REASON_LENGTH,
    MAX_SUBDOMAIN_LENGTH,
    MAX_TIME_LENGTH,
    WireModel,
)
from floe.api.table import OptimizedTableTemplate

Message = Annotated[str, StringConstraints(max_length=MAX_MESSAGE_LENGTH)]
"""Free text in status (clipped to fit by `floe.api.meta.clip`)."""
Time = Annotated[str, StringConstraints(max_length=MAX_TIME_LENGTH)]
"""An RFC 3339 time in status."""


class Condition(WireModel):
    """A Kubernetes-style status condition, bounded as metav1.Condition is."""

    type: str = Field(max_length=MAX_CONDITION_TYPE_LENGTH)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=MAX_REASON_LENGTH)
    message: Message = ""
    last_transition_time: Time | None = None


class MaintenanceJobStatus(WireModel):
    """What one maintenance job last did for a table."""

    last_run: Time | None = Field(default=None, description="end of the last run (RFC 3339)")
    next_due: Time | None = Field(default=None, description="when the job runs next (RFC 3339)")
    last_result: Message | None = Field(default=None, description="outcome of the last run")
    files_reclaimed: int = Field(default=0, description="files the last run removed")
    bytes_reclaimed: int = Field(default=0, description="bytes the last run removed")
    refused: str | None = Field(
        default=None,
        max_length=MAX_REASON_LENGTH,
        description="why floe refused the last run (GcDisabled, LocationShared, LocationNotOwned); "
        "unset when it ran",
    )


class WaitingStatus(WireModel):
    """What the table waits for, in words (`floe explain` tells more)."""

    reason: str = Field(
        max_length=MAX_REASON_LENGTH,
        description="NothingDue, Queued, OverQuota, ExecutorsBusy, NoExecutors, WaitingForScaleUp, "
        "MinPlanInterval, MaintenanceRunning, GroupMissing, Planning, Optimizing, CommitRetrying, "
        "Refused, CatalogUnavailable, TableUnavailable or Disabled",
    )
    message: Message = Field(default="", description="the wait in words")
    queue_position: int | None = Field(
        default=None, ge=1, description="1 for the next table its group plans; unset outside the queue"
    )
    queue_length: int | None = Field(default=None, ge=0, description="tables waiting in its group's queue")


class HealthStatus(WireModel):
    """The table's health score (0 to 100) and what took points off it, each 0 (none) to 1."""

    score: int = Field(
        ge=0, le=100, description="100 - 40 x smallFiles - 40 x equalityDeletes - 20 x positionDeletes"
    )
    small_files: float = Field(
        ge=0, le=1, description="how small the average data file is against the target"
    )
    equality_deletes: float = Field(
        ge=0, le=1, description="equality-deleted rows over data rows, against the duplicate ratio"
    )
    position_deletes: float = Field(
        ge=0, le=1, description="position-deleted rows over data rows, against the duplicate ratio"
    )


class RefreshStatus(WireModel):
    """How often floe asks the table's catalog whether it changed (``spec.refresh``)."""

    interval_seconds: int = Field(
        ge=0,
        description="the interval its last check set: the shortest with work queued, the time to its "
        "writers' next commit (by its snapshot log) while one is expected, doubling while the table stays "
        "unchanged, up to refresh.maxInterval",
    )


SettingPath = Annotated[str, StringConstraints(max_length=MAX_LABEL_LENGTH)]
"""A setting by its camelCase path: ``minor.triggerFileCount``."""
SettingSource = Annotated[str, StringConstraints(max_length=MAX_SUBDOMAIN_LENGTH + 32)]
"""``OptimizedTable``, or ``OptimizedTableSet/NAME`` or ``OptimizerGroup/NAME``."""
MAX_SETTINGS = 256
"""Far above the settings a table has (about 40)."""


class OptimizedTableStatus(WireModel):
    """What floe last saw and did for a table."""

    state: str = Field(
        default="IDLE",
        max_length=MAX_LABEL_LENGTH,
        description="IDLE, PENDING, PLANNING, MINOR_OPTIMIZING, MAJOR_OPTIMIZING, FULL_OPTIMIZING, "
        "COMMITTING or DISABLED",
    )
    snapshot_id: int | None = Field(default=None, description="the table's snapshot floe last evaluated")
    table_uuid: str | None = Field(
        default=None,
        max_length=MAX_LABEL_LENGTH,
        description="the table's UUID (table-uuid in its metadata), by which a set follows a renamed table",
    )
    quota_occupation: float = Field(
        default=0.0, description="task time of the last hour / 1 h / quota limit (1.0 = 100%)"
    )
    data_files: int = Field(default=0, description="live data files of the table")
    delete_files: int = Field(default=0, description="live delete files of the table")
    last_minor_optimizing: Time | None = Field(default=None, description="end of the last minor optimizing")
    last_major_optimizing: Time | None = Field(default=None, description="end of the last major optimizing")
    last_full_optimizing: Time | None = Field(default=None, description="end of the last full optimizing")
    last_optimized: Time | None = Field(
        default=None,
        description="the latest of the last minor, major and full optimizing times (RFC 3339); "
        "filled from them when unset",
        json_schema_extra={"format": "date-time"},
    )
    last_result: Message | None = Field(default=None, description="outcome of the last optimizing process")
    current_process: str | None = Field(
        default=None, max_length=MAX_LABEL_LENGTH, description="id of the optimizing process under way"
    )
    effective_spec: OptimizedTableTemplate | None = Field(
        default=None,
        description="the settings floe uses: the table's own, else its OptimizedTableSet's template, "
        "else its OptimizerGroup's tableDefaults, else floe's defaults",
    )
    spec_sources: dict[SettingPath, SettingSource] = Field(
        default_factory=dict,
        max_length=MAX_SETTINGS,
        description="where each setting of effectiveSpec that is not floe's default comes from, by "
        "path (minor.triggerFileCount): OptimizedTable, OptimizedTableSet/NAME or OptimizerGroup/NAME",
    )
    maintenance: dict[
        Annotated[str, StringConstraints(max_length=MAX_LABEL_LENGTH)], MaintenanceJobStatus
    ] = Field(
        default_factory=dict,
        max_length=MAX_CONDITIONS,
        description="by job (expire, orphans, manifests, dangling-deletes, retention): last run and next due",
    )
    waiting: WaitingStatus | None = Field(default=None, description="what the table waits for now")
    refresh: RefreshStatus | None = Field(default=None, description="how often its catalog is asked")
    health: HealthStatus | None = Field(
        default=None,
        description="how far the table's files are from optimized (100: as optimizing leaves them)",
    )
    history: list[RunRecord] = Field(
        default_factory=list,
        max_length=STATUS_HISTORY,
        description=f"the last {STATUS_HISTORY} optimizing processes and maintenance jobs, oldest first: "
        "trigger, files, bytes and rows in and out, time by phase, executor-seconds and outcome",
    )
    conditions: list[Condition] = Field(default_factory=list, max_length=MAX_CONDITIONS)

    @model_validator(mode="after")
    def _fill_last_optimized(self) -> OptimizedTableStatus:
        if self.last_optimized is None:
            times = [
                t
                for t in (self.last_minor_optimizing, self.last_major_optimizing, self.last_full_optimizing)
                if t
            ]
            if times:
                self.last_optimized = max(times, key=_instant)
        return self


def _instant(text: str) -> datetime:
    """An RFC 3339 time as an aware datetime (naive means UTC); the earliest time when unparsable."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
