"""``kind: OptimizerGroup``: a pool of Spark executors, its scheduling policy and its status."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, WithJsonSchema, field_validator, model_validator
from pydantic.alias_generators import to_camel

from floe.api.meta import (
    IMAGE_REFERENCE,
    MAX_CONDITIONS,
    MAX_EXECUTOR_CORES,
    MAX_EXECUTORS,
    MAX_IMAGE_LENGTH,
    MAX_MESSAGE_LENGTH,
    MAX_NODE_SELECTOR,
    MAX_OBJECT_FIELDS,
    MAX_TOLERATIONS,
    SPARK_MIN_EXECUTOR_MEMORY,
    GroupMeta,
    Integer,
    LabelMap,
    WireModel,
)
from floe.api.status import Condition, Message
from floe.api.table import OptimizedTableTemplate
from floe.api.units import CpuQuantity, Duration, Quantity, cpu_cores, format_duration, whole_number
from floe.planning.config import MiB

MANUAL_OR_AUTOSCALED = "set spec.executors (a fixed count) or spec.autoscaling, not both"
STARTUP_CPU_ABOVE_CORES = "executorStartupCpuLimit must be above executorCores"
STARTUP_CPU_NEEDS_BURSTABLE = (
    "executorStartupCpuLimit needs executorCpuRequest below executorCores: a pod whose CPU request "
    "equals its limit once resized would change its QoS class, which Kubernetes refuses"
)


class SchedulingPolicy(StrEnum):
    """How a group picks the next table to plan."""

    QUOTA = "quota"
    BALANCED = "balanced"


FreeFormObject = Annotated[
    dict[str, Any],
    Field(max_length=MAX_OBJECT_FIELDS),
    WithJsonSchema(
        {"type": "object", "maxProperties": MAX_OBJECT_FIELDS, "x-kubernetes-preserve-unknown-fields": True}
    ),
]
"""A Kubernetes object passed through as it is (a toleration, an affinity); the pod API validates it."""


class ExecutorTemplate(WireModel):
    """Scheduling fields copied into the group's driver and executor pods."""

    node_selector: LabelMap = Field(
        default_factory=dict, max_length=MAX_NODE_SELECTOR, description="pod nodeSelector"
    )
    tolerations: list[FreeFormObject] = Field(
        default_factory=list, max_length=MAX_TOLERATIONS, description="pod tolerations"
    )
    affinity: FreeFormObject | None = Field(default=None, description="pod affinity")


class AutoscalingSpec(WireModel):
    """Executors sized from the group's demand, between `min_executors` and `max_executors`."""

    min_executors: Integer = Field(
        default=0, ge=0, le=MAX_EXECUTORS, description="fewest executor pods (0 scales to zero when idle)"
    )
    max_executors: Integer = Field(ge=1, le=MAX_EXECUTORS, description="most executor pods")
    scale_down_delay: Duration = Field(
        default=300.0,
        description="demand must stay below the executors' threads this long before executors go",
    )

    @field_validator("scale_down_delay")
    @classmethod
    def _delay_not_negative(cls, value: float) -> float:
        # The same check as the CRD's CEL rule.
        if value < 0:
            raise ValueError("autoscaling.scaleDownDelay must not be negative")
        return value

    def bounded(self, executors: int) -> int:
        """`executors` kept between the minimum and the maximum."""
        return min(self.max_executors, max(self.min_executors, executors))

    @model_validator(mode="after")
    def _min_within_max(self) -> AutoscalingSpec:
        if self.min_executors > self.max_executors:
            raise ValueError(
                f"autoscaling.minExecutors ({self.min_executors}) must not exceed "
                f"autoscaling.maxExecutors ({self.max_executors})"
            )
        return self


class OptimizerGroupSpec(WireModel):
    """A pool of Spark executors and the policy that shares it between tables.

    The executors are either a fixed count (`executors`, 1 when unset; what ``kubectl scale``
    and an HPA edit) or sized by floe from the demand (`autoscaling`), never both.
    """

    policy: SchedulingPolicy = Field(
        default=SchedulingPolicy.QUOTA,
        strict=False,
        description="quota: plan the table with the lowest quota occupation first; "
        "balanced: the table optimized longest ago first",
    )
    # The bounds before the validator: pydantic renders them as minimum and maximum then.
    executors: Annotated[int, Field(ge=0, le=MAX_EXECUTORS), BeforeValidator(whole_number)] | None = Field(
        default=None,
        description="executor pods, a fixed count (default 1; 0 scales to zero); not with autoscaling",
    )
    autoscaling: AutoscalingSpec | None = Field(
        default=None, description="size the executors from the group's demand instead of spec.executors"
    )
    executor_cores: Integer = Field(
        default=1, ge=1, le=MAX_EXECUTOR_CORES, description="task threads per executor"
    )
    executor_memory: Quantity = Field(default=2048 * MiB, description="memory limit of an executor pod")
    executor_cpu_request: CpuQuantity | None = Field(
        default=None,
        description="CPU an executor pod requests, a Kubernetes quantity such as 250m (default: "
        "executorCores); its limit is executorCores (executorStartupCpuLimit while it starts), so small "
        "nodes can run executors that burst",
    )
    executor_startup_cpu_limit: CpuQuantity | None = Field(
        default=None,
        description="CPU limit of an executor pod while it starts, a quantity above executorCores such as "
        "2: once the executor registers with its driver, the driver resizes the pod in place to "
        "executorCores (Kubernetes 1.33 or later). A waking executor then starts on the node's idle CPU. "
        "Needs executorCpuRequest below executorCores, since a pod's QoS class cannot change",
    )
    image: str | None = Field(
        default=None,
        max_length=MAX_IMAGE_LENGTH,
        pattern=IMAGE_REFERENCE,
        description="optimizer image, [registry/]repository[:tag][@digest]; the chart's default when unset",
    )
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
    table_defaults: OptimizedTableTemplate | None = Field(
        default=None,
        description="OptimizedTable settings of the group's tables where neither the table nor its "
        "OptimizedTableSet sets them (quota, thresholds, maintenance); unset: floe's defaults",
    )

    @field_validator("heartbeat_timeout", "ack_timeout", "execute_timeout")
    @classmethod
    def _positive_timeout(cls, value: float, info: ValidationInfo) -> float:
        # The same check as the CRD's CEL rule: a timeout of 0 or -1 would take back every task.
        if value <= 0:
            raise ValueError(
                f"{to_camel(info.field_name or '')} must be greater than 0 (-1 does not turn it off)"
            )
        return value

    @field_validator("executor_memory")
    @classmethod
    def _spark_minimum_memory(cls, value: int) -> int:
        # The same check as the CRD's CEL rule: Spark refuses smaller executors.
        if value < SPARK_MIN_EXECUTOR_MEMORY:
            raise ValueError("executorMemory must be at least 450Mi (Spark refuses smaller executors)")
        return value

    @model_validator(mode="after")
    def _ack_before_execute(self) -> OptimizerGroupSpec:
        if self.ack_timeout >= self.execute_timeout:
            raise ValueError(
                f"ackTimeout ({format_duration(self.ack_timeout)}) must be shorter than "
                f"executeTimeout ({format_duration(self.execute_timeout)})"
            )
        return self

    @model_validator(mode="after")
    def _manual_or_autoscaled(self) -> OptimizerGroupSpec:
        if self.executors is not None and self.autoscaling is not None:
            raise ValueError(MANUAL_OR_AUTOSCALED)
        return self

    @model_validator(mode="after")
    def _startup_cpu_resizable(self) -> OptimizerGroupSpec:
        # The same checks as the CRD's CEL rules.
        if self.executor_startup_cpu_limit is None:
            return self
        if cpu_cores(self.executor_startup_cpu_limit) <= self.executor_cores:
            raise ValueError(f"{STARTUP_CPU_ABOVE_CORES} ({self.executor_cores})")
        if self.executor_cpu_request is None or cpu_cores(self.executor_cpu_request) >= self.executor_cores:
            raise ValueError(STARTUP_CPU_NEEDS_BURSTABLE)
        return self

    @property
    def initial_executors(self) -> int:
        """Executors a new group starts with: the fixed count, or autoscaling's minimum."""
        if self.autoscaling is not None:
            return self.autoscaling.min_executors
        return self._fixed_executors

    @property
    def max_threads(self) -> int:
        """Task threads of the group at its largest: the fixed count's, or autoscaling's maximum's."""
        executors = self.autoscaling.max_executors if self.autoscaling is not None else self._fixed_executors
        return executors * self.executor_cores

    @property
    def _fixed_executors(self) -> int:
        return 1 if self.executors is None else self.executors


class ExecutorCoreSeconds(WireModel):
    """What a group's executors cost since its first status (kept across operator restarts)."""

    held: int = Field(default=0, ge=0, description="core-seconds of its ready executor pods")
    static: int = Field(
        default=0,
        ge=0,
        description="core-seconds a group fixed at its peak (maxExecutors when autoscaled) would have held",
    )


class OptimizerGroupStatus(WireModel):
    """Executors and work of a group."""

    desired_executors: int = Field(
        default=0, description="executor pods wanted now: spec.executors, or autoscaling's choice"
    )
    ready_executors: int = Field(default=0, description="executor pods ready")
    demand: int = Field(
        default=0,
        description="tasks the group's tables want run: running, queued and due, each table's capped "
        "by its quota",
    )
    last_scale: Message = Field(default="", description="the last autoscaling decision and its reason")
    threads: int = Field(default=0, description="optimizer threads registered with the task service")
    tables: int = Field(default=0, description="OptimizedTables served by the group")
    running_tasks: int = Field(default=0, description="tasks scheduled or running now")
    pending_tasks: int = Field(default=0, description="tasks planned and waiting for a thread")
    executor_core_seconds: ExecutorCoreSeconds | None = Field(
        default=None,
        description="core-seconds the group's ready executors held, and what a group fixed at its peak "
        "would have held meanwhile",
    )
    selector: str = Field(
        default="",
        max_length=MAX_MESSAGE_LENGTH,
        description="label selector of the group's executor pods (the scale subresource's labelSelectorPath)",
    )
    conditions: list[Condition] = Field(default_factory=list, max_length=MAX_CONDITIONS)


class OptimizerGroup(WireModel):
    """``kind: OptimizerGroup``."""

    api_version: Literal["floe.dev/v1alpha1"]
    kind: Literal["OptimizerGroup"]
    metadata: GroupMeta
    spec: OptimizerGroupSpec = Field(default_factory=OptimizerGroupSpec)
    status: OptimizerGroupStatus | None = None
