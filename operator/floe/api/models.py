"""The two resources of API group ``floe.dev/v1alpha1``: OptimizerGroup and OptimizedTable.

These pydantic models are the single source of truth: embedded mode loads manifests with
them, and the CRD schemas are generated from them. Field names are Kubernetes-style
camelCase on the wire and snake_case in Python.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from floe.api.units import Duration, Quantity
from floe.planning.config import MiB, OptimizingConfig

API_GROUP = "floe.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ObjectMeta(_Model):
    """The subset of Kubernetes metadata floe reads."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    namespace: str = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class SchedulingPolicy(StrEnum):
    """How a group picks the next table to plan."""

    QUOTA = "quota"
    BALANCED = "balanced"


FreeFormObject = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]
"""A Kubernetes object passed through as it is (a toleration, an affinity)."""


class ExecutorTemplate(_Model):
    """Scheduling fields copied into the group's driver and executor pods."""

    node_selector: dict[str, str] = Field(default_factory=dict, description="pod nodeSelector")
    tolerations: list[FreeFormObject] = Field(default_factory=list, description="pod tolerations")
    affinity: FreeFormObject | None = Field(default=None, description="pod affinity")


class OptimizerGroupSpec(_Model):
    """A pool of Spark executors and the policy that shares it between tables."""

    policy: SchedulingPolicy = Field(
        default=SchedulingPolicy.QUOTA,
        description="quota: plan the table with the lowest quota occupation first; "
        "balanced: the table optimized longest ago first",
    )
    executors: int = Field(default=1, ge=0, description="executor pods (0 scales to zero)")
    executor_cores: int = Field(default=1, ge=1, description="task threads per executor")
    executor_memory: Quantity = Field(default=2048 * MiB, description="memory limit of an executor pod")
    executor_cpu_request: str | None = Field(
        default=None,
        pattern=r"^([0-9]+m|[0-9]+(\.[0-9]+)?)$",
        description="CPU an executor pod requests, a Kubernetes quantity such as 250m (default: "
        "executorCores); its limit stays executorCores, so small nodes can run executors that burst",
    )
    image: str | None = Field(default=None, description="optimizer image; the chart's default when unset")
    executor_template: ExecutorTemplate = Field(
        default_factory=ExecutorTemplate, description="tolerations, nodeSelector and affinity of the pods"
    )
    heartbeat_timeout: Duration = Field(
        default=60.0, description="an optimizer silent for longer is dropped and its tasks go back"
    )
    ack_timeout: Duration = Field(
        default=30.0, description="a task scheduled but not acked within this goes back to PLANNED"
    )
    execute_timeout: Duration = Field(
        default=3600.0, description="an acked task not completed within this goes back to PLANNED"
    )

    @property
    def threads(self) -> int:
        """Total task threads of the group."""
        return self.executors * self.executor_cores


class CatalogRef(_Model):
    """Where a table lives: a pyiceberg catalog, by inline properties or a Secret.

    Embedded mode uses ``properties`` (or the CLI's ``--catalog-config``); on Kubernetes
    the properties come from the Secret named in ``secretRef`` and never reach status.
    """

    name: str = Field(min_length=1, description="catalog name as the catalog knows itself")
    properties: dict[str, str] = Field(default_factory=dict, description="pyiceberg catalog properties")
    secret_ref: str | None = Field(default=None, description="Secret holding the catalog properties")


class MinorSpec(_Model):
    """Minor optimizing thresholds."""

    trigger_file_count: int = Field(
        default=12, ge=1, description="fragments + equality-delete files of a partition that trigger minor"
    )
    trigger_interval: Duration = Field(
        default=3600.0, description="minor also after this long, if a partition has more than one such file"
    )


class MajorSpec(_Model):
    """Major optimizing thresholds."""

    duplicate_ratio: float = Field(
        default=0.1, gt=0, description="a segment's deleted records / its records that trigger major"
    )


class FullSpec(_Model):
    """Full optimizing schedule; ``triggerInterval: "-1"`` turns it off."""

    trigger_interval: Duration = Field(default=-1.0, description="full optimizing every interval; -1: never")
    rewrite_all_files: bool = Field(
        default=True,
        description="rewrite every file of the partition (else fragments, undersized and files with deletes)",
    )


class ExecuteSpec(_Model):
    """How tasks of a process are retried."""

    num_retries: int = Field(default=5, ge=0, description="retries of a failed task before its process fails")


class ClusteringStrategy(StrEnum):
    """How rewritten rows are ordered when the table's own sort order is not enough."""

    ZORDER = "zorder"


class ClusteringSpec(_Model):
    """Order rows of rewritten files by a multi-column curve, so range filters skip more files.

    A table's Iceberg sort order is always honoured; clustering, when set, takes its place
    in the tasks' output (the files' sort order id is then 0, "unsorted", since Iceberg
    has no z-order sort order).
    """

    strategy: ClusteringStrategy = Field(description="zorder: interleave the columns' bits (Morton order)")
    columns: list[str] = Field(
        min_length=1, max_length=8, description="columns whose values are interleaved, by name"
    )


class SnapshotRetentionSpec(_Model):
    """Snapshot expiry: old snapshots and the files only they referenced are removed."""

    enabled: bool = Field(default=True, description="false: never expire snapshots")
    min_snapshots: int = Field(
        default=1, ge=1, description="newest snapshots of each branch always kept, whatever their age"
    )
    max_age: Duration = Field(
        default=5 * 86400.0, description="snapshots older than this expire (unless kept by minSnapshots)"
    )
    interval: Duration = Field(default=3600.0, description="how often expiry runs")

    @model_validator(mode="after")
    def _age_positive(self) -> SnapshotRetentionSpec:
        if self.max_age <= 0 or self.interval <= 0:
            raise ValueError("snapshotRetention.maxAge and snapshotRetention.interval must be positive")
        return self


MIN_ORPHAN_AGE_S = 3600.0


class OrphanFilesSpec(_Model):
    """Orphan-file cleanup: files under the table location that no metadata references."""

    enabled: bool = Field(default=True, description="false: never remove orphan files")
    older_than: Duration = Field(
        default=3 * 86400.0,
        description="only files older than this are removed (at least 1h, so files being written are safe)",
    )
    interval: Duration = Field(default=86400.0, description="how often orphan cleanup runs")

    @model_validator(mode="after")
    def _safe_age(self) -> OrphanFilesSpec:
        if self.older_than < MIN_ORPHAN_AGE_S:
            raise ValueError("orphanFiles.olderThan must be at least 1h: younger files may still be written")
        if self.interval <= 0:
            raise ValueError("orphanFiles.interval must be positive")
        return self


class ManifestsSpec(_Model):
    """Manifest rewrite: many small manifests are merged so planning stays fast."""

    enabled: bool = Field(default=True, description="false: never rewrite manifests")
    trigger_small_manifests: int = Field(
        default=100,
        ge=2,
        description="rewrite when the current snapshot has at least this many small manifests",
    )
    target_manifest_size: Quantity = Field(
        default=8 * MiB, description="a manifest smaller than this is small; rewritten manifests aim at it"
    )
    interval: Duration = Field(default=3600.0, description="how often the manifests are checked")

    @model_validator(mode="after")
    def _positive(self) -> ManifestsSpec:
        if self.target_manifest_size <= 0 or self.interval <= 0:
            raise ValueError("manifests.targetManifestSize and manifests.interval must be positive")
        return self


class DanglingDeletesSpec(_Model):
    """Removal of delete files that no live data file can be affected by."""

    enabled: bool = Field(default=True, description="false: never remove dangling delete files")
    interval: Duration = Field(default=3600.0, description="how often dangling deletes are looked for")

    @model_validator(mode="after")
    def _positive(self) -> DanglingDeletesSpec:
        if self.interval <= 0:
            raise ValueError("danglingDeletes.interval must be positive")
        return self


class DataRetentionSpec(_Model):
    """Data retention (TTL): rows whose column value is older than ``olderThan`` are deleted."""

    column: str = Field(min_length=1, description="a timestamp, timestamptz or date column (by name)")
    older_than: Duration = Field(description="rows older than this (against the current time) are deleted")
    interval: Duration = Field(default=3600.0, description="how often retention runs")

    @model_validator(mode="after")
    def _positive(self) -> DataRetentionSpec:
        if self.older_than <= 0 or self.interval <= 0:
            raise ValueError("dataRetention.olderThan and dataRetention.interval must be positive")
        return self


class MaintenanceSpec(_Model):
    """Table maintenance beyond compaction; each job runs on its own interval."""

    snapshot_retention: SnapshotRetentionSpec = Field(default_factory=SnapshotRetentionSpec)
    orphan_files: OrphanFilesSpec = Field(default_factory=OrphanFilesSpec)
    manifests: ManifestsSpec = Field(default_factory=ManifestsSpec)
    dangling_deletes: DanglingDeletesSpec = Field(default_factory=DanglingDeletesSpec)
    data_retention: DataRetentionSpec | None = Field(default=None, description="unset: rows are kept forever")


class OptimizedTableSpec(_Model):
    """One Iceberg table kept optimized, with Amoro's self-optimizing properties."""

    table: str = Field(
        min_length=3,
        pattern=r"^[^.\s]+(\.[^.\s]+)+$",
        description="catalog identifier, namespace.table",
    )
    catalog: CatalogRef
    group: str = Field(default="default", description="the OptimizerGroup serving the table")
    enabled: bool = Field(default=True, description="false: never scheduled")
    quota: float = Field(default=0.5, gt=0, description="CPU share in threads (<= 1: fraction of group)")
    target_size: Quantity = Field(default=128 * MiB, description="size of the data files written")
    fragment_ratio: int = Field(
        default=8, ge=1, description="fragment: data file <= targetSize / fragmentRatio"
    )
    min_target_size_ratio: float = Field(
        default=0.75,
        gt=0,
        le=1,
        description="undersized segment: data file <= targetSize x minTargetSizeRatio",
    )
    max_task_size: Quantity = Field(
        default=128 * MiB,
        description="bin size for packing files into tasks (the larger of this and targetSize)",
    )
    minor: MinorSpec = Field(default_factory=MinorSpec)
    major: MajorSpec = Field(default_factory=MajorSpec)
    full: FullSpec = Field(default_factory=FullSpec)
    execute: ExecuteSpec = Field(default_factory=ExecuteSpec)
    min_plan_interval: Duration = Field(default=60.0, description="no replanning sooner")
    allow_partial_commit: bool = Field(
        default=False, description="commit the finished tasks of a process when others fail"
    )
    clustering: ClusteringSpec | None = Field(
        default=None, description="z-order rewritten rows by these columns (else the table's sort order)"
    )
    maintenance: MaintenanceSpec = Field(default_factory=MaintenanceSpec)

    @model_validator(mode="after")
    def _target_positive(self) -> OptimizedTableSpec:
        if self.target_size <= 0:
            raise ValueError("targetSize must be greater than 0")
        return self

    def optimizing_config(self) -> OptimizingConfig:
        """Thresholds for the pure evaluator and planner."""
        return OptimizingConfig(
            target_size=self.target_size,
            fragment_ratio=self.fragment_ratio,
            min_target_size_ratio=self.min_target_size_ratio,
            minor_trigger_file_count=self.minor.trigger_file_count,
            minor_trigger_interval_s=self.minor.trigger_interval,
            major_duplicate_ratio=self.major.duplicate_ratio,
            full_trigger_interval_s=self.full.trigger_interval,
            full_rewrite_all_files=self.full.rewrite_all_files,
            max_task_size_bytes=self.max_task_size,
        )


class Condition(_Model):
    """A Kubernetes-style status condition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


class MaintenanceJobStatus(_Model):
    """What one maintenance job last did for a table."""

    last_run: str | None = Field(default=None, description="end of the last run (RFC 3339)")
    next_due: str | None = Field(default=None, description="when the job runs next (RFC 3339)")
    last_result: str | None = Field(default=None, description="outcome of the last run")
    files_reclaimed: int = Field(default=0, description="files the last run removed")
    bytes_reclaimed: int = Field(default=0, description="bytes the last run removed")


class OptimizedTableStatus(_Model):
    """What floe last saw and did for a table."""

    state: str = Field(
        default="IDLE",
        description="IDLE, PENDING, PLANNING, MINOR_OPTIMIZING, MAJOR_OPTIMIZING, FULL_OPTIMIZING, "
        "COMMITTING or DISABLED",
    )
    snapshot_id: int | None = Field(default=None, description="the table's snapshot floe last evaluated")
    quota_occupation: float = Field(
        default=0.0, description="task time of the last hour / 1 h / quota limit (1.0 = 100%)"
    )
    data_files: int = Field(default=0, description="live data files of the table")
    delete_files: int = Field(default=0, description="live delete files of the table")
    last_minor_optimizing: str | None = Field(default=None, description="end of the last minor optimizing")
    last_major_optimizing: str | None = Field(default=None, description="end of the last major optimizing")
    last_full_optimizing: str | None = Field(default=None, description="end of the last full optimizing")
    last_optimized: str | None = Field(
        default=None,
        description="the latest of the last minor, major and full optimizing times (RFC 3339); "
        "filled from them when unset",
        json_schema_extra={"format": "date-time"},
    )
    last_result: str | None = Field(default=None, description="outcome of the last optimizing process")
    current_process: str | None = Field(default=None, description="id of the optimizing process under way")
    maintenance: dict[str, MaintenanceJobStatus] = Field(
        default_factory=dict,
        description="by job (expire, orphans, manifests, dangling-deletes, retention): last run and next due",
    )
    conditions: list[Condition] = Field(default_factory=list)

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


class OptimizerGroupStatus(_Model):
    """Executors and work of a group."""

    ready_executors: int = Field(default=0, description="executor pods ready")
    threads: int = Field(default=0, description="optimizer threads registered with the task service")
    tables: int = Field(default=0, description="OptimizedTables served by the group")
    running_tasks: int = Field(default=0, description="tasks scheduled or running now")
    pending_tasks: int = Field(default=0, description="tasks planned and waiting for a thread")
    selector: str = Field(
        default="",
        description="label selector of the group's executor pods (the scale subresource's labelSelectorPath)",
    )
    conditions: list[Condition] = Field(default_factory=list)


class OptimizerGroup(_Model):
    """``kind: OptimizerGroup``."""

    api_version: Literal["floe.dev/v1alpha1"]
    kind: Literal["OptimizerGroup"]
    metadata: ObjectMeta
    spec: OptimizerGroupSpec = Field(default_factory=OptimizerGroupSpec)
    status: OptimizerGroupStatus | None = None


class OptimizedTable(_Model):
    """``kind: OptimizedTable``."""

    api_version: Literal["floe.dev/v1alpha1"]
    kind: Literal["OptimizedTable"]
    metadata: ObjectMeta
    spec: OptimizedTableSpec
    status: OptimizedTableStatus | None = None


Resource = OptimizerGroup | OptimizedTable
KINDS: dict[str, type[OptimizerGroup] | type[OptimizedTable]] = {
    "OptimizerGroup": OptimizerGroup,
    "OptimizedTable": OptimizedTable,
}


def resource_from_dict(document: dict[str, Any]) -> Resource:
    """Validate one manifest document into its model; raises ValueError naming the kind."""
    kind = document.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: expected one of {', '.join(KINDS)}")
    return KINDS[kind].model_validate(document)
