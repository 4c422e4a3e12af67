"""The two resources of API group ``floe.dev/v1alpha1``: OptimizerGroup and OptimizedTable.

These pydantic models are the single source of truth: embedded mode loads manifests with
them, and the CRD schemas are generated from them. Field names are Kubernetes-style
camelCase on the wire and snake_case in Python.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
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


class OptimizerGroupSpec(_Model):
    """A pool of Spark executors and the policy that shares it between tables."""

    policy: SchedulingPolicy = SchedulingPolicy.QUOTA
    executors: int = Field(default=1, ge=0, description="executor pods (0 scales to zero)")
    executor_cores: int = Field(default=1, ge=1, description="task threads per executor")
    executor_memory: Quantity = Field(default=2048 * MiB, description="memory limit of an executor pod")
    image: str | None = Field(default=None, description="optimizer image; the chart's default when unset")
    heartbeat_timeout: Duration = 60.0
    ack_timeout: Duration = 30.0
    execute_timeout: Duration = 3600.0

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

    trigger_file_count: int = Field(default=12, ge=1)
    trigger_interval: Duration = 3600.0


class MajorSpec(_Model):
    """Major optimizing thresholds."""

    duplicate_ratio: float = Field(default=0.1, gt=0)


class FullSpec(_Model):
    """Full optimizing schedule; ``triggerInterval: "-1"`` turns it off."""

    trigger_interval: Duration = -1.0
    rewrite_all_files: bool = True


class ExecuteSpec(_Model):
    """How tasks of a process are retried."""

    num_retries: int = Field(default=5, ge=0)


class OptimizedTableSpec(_Model):
    """One Iceberg table kept optimized, with Amoro's self-optimizing properties."""

    table: str = Field(
        min_length=3,
        pattern=r"^[^.\s]+(\.[^.\s]+)+$",
        description="catalog identifier, namespace.table",
    )
    catalog: CatalogRef
    group: str = "default"
    enabled: bool = True
    quota: float = Field(default=0.5, gt=0, description="CPU share in threads (<= 1: fraction of group)")
    target_size: Quantity = 128 * MiB
    fragment_ratio: int = Field(default=8, ge=1)
    min_target_size_ratio: float = Field(default=0.75, gt=0, le=1)
    max_task_size: Quantity = 128 * MiB
    minor: MinorSpec = Field(default_factory=MinorSpec)
    major: MajorSpec = Field(default_factory=MajorSpec)
    full: FullSpec = Field(default_factory=FullSpec)
    execute: ExecuteSpec = Field(default_factory=ExecuteSpec)
    min_plan_interval: Duration = 60.0
    allow_partial_commit: bool = False

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


class OptimizedTableStatus(_Model):
    """What floe last saw and did for a table."""

    state: str = "IDLE"
    snapshot_id: int | None = None
    quota_occupation: float = 0.0
    data_files: int = 0
    delete_files: int = 0
    last_minor_optimizing: str | None = None
    last_major_optimizing: str | None = None
    last_full_optimizing: str | None = None
    last_result: str | None = None
    conditions: list[Condition] = Field(default_factory=list)


class OptimizerGroupStatus(_Model):
    """Executors and work of a group."""

    ready_executors: int = 0
    tables: int = 0
    running_tasks: int = 0
    pending_tasks: int = 0
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
