"""The resources of API group ``floe.dev/v1alpha1``: OptimizerGroup, OptimizedTable and
OptimizedTableSet (the OptimizedTables of every catalog table that matches its patterns).

These pydantic models are the single source of truth: embedded mode loads manifests with
them, and the CRD schemas are generated from them. Field names are Kubernetes-style
camelCase on the wire and snake_case in Python.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from floe.api.table_properties import integer_property
from floe.api.units import (
    CpuQuantity,
    Duration,
    Quantity,
    cpu_cores,
    format_duration,
    whole_number,
)
from floe.planning.config import MiB, OptimizingConfig

DEFAULT_TARGET_SIZE = 128 * MiB
TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"

MANUAL_OR_AUTOSCALED = "set spec.executors (a fixed count) or spec.autoscaling, not both"
STARTUP_CPU_ABOVE_CORES = "executorStartupCpuLimit must be above executorCores"
STARTUP_CPU_NEEDS_BURSTABLE = (
    "executorStartupCpuLimit needs executorCpuRequest below executorCores: a pod whose CPU request "
    "equals its limit once resized would change its QoS class, which Kubernetes refuses"
)

API_GROUP = "floe.dev"
VERSION = "v1alpha1"
API_VERSION = f"{API_GROUP}/{VERSION}"
# The resources' plural names, as the API server's paths and kopf's handlers name them.
GROUP_PLURAL = "optimizergroups"
TABLE_PLURAL = "optimizedtables"
TABLE_SET_PLURAL = "optimizedtablesets"

# --------------------------------------------------------------------------------------------------
# Bounds. Every string, list and map of both kinds has one, so that the API server refuses a
# runaway value (a pasted file, a newline in an image) at `kubectl apply`, with the field named,
# instead of the operator failing on it later. The patterns use only what Go's RE2 (the API
# server) and Rust's regex (pydantic) read alike: explicit ASCII classes and \p{..} categories,
# never \s, \w or \d, whose meaning differs between the two (Unicode in Rust, ASCII in Go).

#: A DNS-1123 subdomain: what the name of a Kubernetes object (a Secret, an OptimizedTable) must be.
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MAX_SUBDOMAIN_LENGTH = 253
#: A DNS-1123 label: a namespace, or an OptimizerGroup (its name goes into Service names).
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_LABEL_LENGTH = 63
#: An OptimizerGroup's driver Service is ``floe-NAME-driver``, and a Service name is a DNS-1035
#: label of at most 63 characters: so a group name has at most 63 - len("floe--driver") = 51.
MAX_GROUP_NAME_LENGTH = MAX_LABEL_LENGTH - len("floe--driver")
#: A label or annotation key: an optional DNS subdomain prefix and a name of at most 63 characters.
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
MAX_QUALIFIED_NAME_LENGTH = MAX_SUBDOMAIN_LENGTH + 1 + MAX_LABEL_LENGTH
#: A label value: empty, or up to 63 alphanumerics, '-', '_' and '.' that start and end alphanumeric.
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
#: Annotations of one object may hold 256 KiB in all (the API server's limit).
MAX_ANNOTATION_LENGTH = 256 * 1024
#: The keys a Secret may hold; inline catalog properties follow the same rule, so that either
#: source can hold any property.
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
#: Catalog properties are short (URIs, regions, keys); a token or a credentials blob fits in 8 KiB.
MAX_PROPERTY_LENGTH = 8 * 1024
MAX_PROPERTIES = 128
#: Iceberg names have no limit of their own, but the catalogs do: the SQL and JDBC catalogs store a
#: namespace and a table name in VARCHAR(255) columns each, Glue and the Hive Metastore cap names
#: (and columns) at 255 characters. An identifier is ``namespace.table``, namespaces nested by '.'.
MAX_NAME_LENGTH = 255
MAX_TABLE_IDENTIFIER_LENGTH = 2 * MAX_NAME_LENGTH + 1
#: ``namespace.table``: at least two non-empty parts, without whitespace or control characters.
TABLE_IDENTIFIER = r"^[^.\p{Z}\p{Cc}]+(\.[^.\p{Z}\p{Cc}]+)+$"
#: A glob over ``namespace.table`` identifiers: dot-separated parts of any characters but dots,
#: brackets, whitespace and control characters, or ``[...]``/``[!...]`` classes of such characters;
#: ``*``, ``**`` and ``?`` are characters like others here (`floe.tables.selection` gives their meaning).
_GLOB_PART = r"([^.\[\]\p{Z}\p{Cc}]|\[!?[^.\[\]\p{Z}\p{Cc}]+\])+"
TABLE_PATTERN = rf"^{_GLOB_PART}(\.{_GLOB_PART})*$"
MAX_PATTERNS = 256
#: A name as a catalog knows it: no whitespace or control characters.
CATALOG_NAME = r"^[^\p{Z}\p{Cc}]+$"
#: A column name (or a dotted path to a nested one): spaces are legal in Iceberg, control characters
#: never are in anything a person typed.
COLUMN_NAME = r"^[^\p{Cc}]+$"

#: An OCI image reference, as the distribution/reference grammar has it:
#: ``[registry[:port]/]path[:tag][@algorithm:hex]``. No whitespace or control characters anywhere.
_DOMAIN_COMPONENT = r"([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = rf"({_DOMAIN_COMPONENT}(\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(:[0-9]+)?/"
_PATH_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = rf"^({_REGISTRY})?{_PATH_COMPONENT}(/{_PATH_COMPONENT})*(:{_TAG})?(@{_DIGEST})?$"
#: distribution caps a repository name (registry included) at 255 characters and a tag at 128; the
#: longest digest in use is sha512's 128 hex digits.
MAX_IMAGE_LENGTH = 255 + len(":") + 128 + len("@sha512:") + 128
#: Tolerations and affinity are passed to the pods as they are (the pod API validates them); these
#: bound only their size. A Toleration has 5 fields, an Affinity 3.
MAX_TOLERATIONS = 64
MAX_OBJECT_FIELDS = 16
MAX_NODE_SELECTOR = 64
#: Integers that are counts without a natural ceiling stay within int32, which every Kubernetes
#: client reads without loss (the scale subresource even requires it of spec.executors).
INT32_MAX = 2**31 - 1
#: A group beyond a thousand executor pods, or executors beyond 256 cores, is a typo or a second group.
MAX_EXECUTORS = 1000
MAX_EXECUTOR_CORES = 256
#: A retry reruns the whole task; past a hundred, retrying does not help.
MAX_RETRIES = 100
#: Status text: as metav1.Condition bounds a condition's message, its type and its reason.
MAX_MESSAGE_LENGTH = 32 * 1024
MAX_CONDITION_TYPE_LENGTH = 316
MAX_REASON_LENGTH = 1024
MAX_TIME_LENGTH = 64
MAX_CONDITIONS = 16
#: Spark refuses an executor whose memory is below 1.5 x its 300 MiB reserved memory.
SPARK_MIN_EXECUTOR_MEMORY = 450 * 1024 * 1024


def _without_nulls(value: Any) -> Any:
    """A map with its null values left out, as the API server prunes them (see `_Model`)."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v is not None}
    return value


Integer = Annotated[int, BeforeValidator(whole_number)]
"""An integer field: an int, or a float with an integral value (``fragmentRatio: 8.0``), which
``kubectl apply`` sends as the integer it is."""
LabelKey = Annotated[str, StringConstraints(max_length=MAX_QUALIFIED_NAME_LENGTH, pattern=QUALIFIED_NAME)]
LabelValue = Annotated[str, StringConstraints(max_length=MAX_LABEL_LENGTH, pattern=LABEL_VALUE)]
LabelMap = Annotated[dict[LabelKey, LabelValue], BeforeValidator(_without_nulls)]
"""Labels (and a nodeSelector): qualified-name keys, label values; null values are dropped."""
AnnotationValue = Annotated[str, StringConstraints(max_length=MAX_ANNOTATION_LENGTH)]
AnnotationMap = Annotated[dict[LabelKey, AnnotationValue], BeforeValidator(_without_nulls)]
PropertyKey = Annotated[str, StringConstraints(max_length=MAX_SUBDOMAIN_LENGTH, pattern=SECRET_KEY)]
PropertyValue = Annotated[str, StringConstraints(max_length=MAX_PROPERTY_LENGTH)]
PropertyMap = Annotated[dict[PropertyKey, PropertyValue], BeforeValidator(_without_nulls)]
ColumnName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_LENGTH, pattern=COLUMN_NAME)]


def _admits_none(annotation: Any) -> bool:
    """Whether a field of this type may hold null (``X | None``, ``Any``)."""
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_admits_none(arg) for arg in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _admits_none(typing.get_args(annotation)[0])
    return False


@functools.cache
def _non_nullable(model: type[BaseModel]) -> frozenset[str]:
    """The names and aliases of the model's fields that cannot hold null."""
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        if not _admits_none(info.annotation):
            keys.update({name, info.alias or name})
    return frozenset(keys)


class _Model(BaseModel):
    """Wire-format models, validated as the API server validates the CRD.

    * ``strict``: no coercion (``"2"`` is not an integer, ``1`` not a boolean, ``60`` not a
      duration), because the API server's schema allows none; enums opt back out of strictness,
      since strict pydantic would want enum instances rather than their strings.
    * No infinities or NaN: JSON has none, so no manifest that `kubectl apply` takes can hold one.
    * A null value of a field that cannot be null counts as absent (its default applies): the
      API server prunes such nulls before defaulting and validation.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _prune_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            dropped = _non_nullable(cls)
            return {k: v for k, v in data.items() if v is not None or k not in dropped}
        return data


class ObjectMeta(_Model):
    """Kubernetes metadata: what floe reads, bounded as the API server bounds it, and the fields the
    API server writes (a manifest from ``kubectl get -o yaml`` loads), passed over unchecked.

    Any other field is refused, as ``kubectl apply`` refuses it: a misspelt ``namespace`` must not
    go unnoticed in `floe run` either.
    """

    name: str = Field(min_length=1, max_length=MAX_SUBDOMAIN_LENGTH, pattern=DNS1123_SUBDOMAIN)
    namespace: str = Field(default="default", max_length=MAX_LABEL_LENGTH, pattern=DNS1123_LABEL)
    labels: LabelMap = Field(default_factory=dict)
    annotations: AnnotationMap = Field(default_factory=dict)
    generate_name: Any = None
    uid: Any = None
    resource_version: Any = None
    generation: Any = None
    creation_timestamp: Any = None
    deletion_timestamp: Any = None
    deletion_grace_period_seconds: Any = None
    owner_references: Any = None
    finalizers: Any = None
    managed_fields: Any = None
    self_link: Any = None


class GroupMeta(ObjectMeta):
    """An OptimizerGroup's metadata: its name is a DNS-1123 label short enough for its Service's."""

    name: str = Field(
        min_length=1,
        max_length=MAX_GROUP_NAME_LENGTH,
        pattern=DNS1123_LABEL,
        description=f"at most {MAX_GROUP_NAME_LENGTH} characters: the driver's Service is floe-NAME-driver",
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


class ExecutorTemplate(_Model):
    """Scheduling fields copied into the group's driver and executor pods."""

    node_selector: LabelMap = Field(
        default_factory=dict, max_length=MAX_NODE_SELECTOR, description="pod nodeSelector"
    )
    tolerations: list[FreeFormObject] = Field(
        default_factory=list, max_length=MAX_TOLERATIONS, description="pod tolerations"
    )
    affinity: FreeFormObject | None = Field(default=None, description="pod affinity")


class AutoscalingSpec(_Model):
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


class OptimizerGroupSpec(_Model):
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


class CatalogRef(_Model):
    """Where a table lives: a pyiceberg catalog, by inline properties or a Secret.

    Embedded mode uses ``properties`` (or the CLI's ``--catalog-config``); on Kubernetes
    the properties come from the Secret named in ``secretRef`` and never reach status.
    """

    name: str = Field(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=CATALOG_NAME,
        description="catalog name as the catalog knows itself",
    )
    properties: PropertyMap = Field(
        default_factory=dict, max_length=MAX_PROPERTIES, description="pyiceberg catalog properties"
    )
    secret_ref: str | None = Field(
        default=None,
        max_length=MAX_SUBDOMAIN_LENGTH,
        pattern=DNS1123_SUBDOMAIN,
        description="Secret holding the catalog properties, in the table's namespace",
    )
    secret_properties: list[PropertyKey] = Field(
        default_factory=list,
        max_length=MAX_PROPERTIES,
        description="names of further catalog properties (inline or from the Secret) whose values are "
        "secret: masked wherever floe writes text, as are those whose names suggest a secret",
    )

    def with_properties_under(self, properties: Mapping[str, str]) -> CatalogRef:
        """This catalog with `properties` (a Secret's) under its inline ones: inline wins, it is explicit."""
        return self.model_copy(update={"properties": {**properties, **self.properties}})


class MinorSpec(_Model):
    """Minor optimizing thresholds."""

    trigger_file_count: Integer = Field(
        default=12,
        ge=1,
        le=INT32_MAX,
        description="fragments + equality-delete files of a partition that trigger minor",
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

    num_retries: Integer = Field(
        default=5, ge=0, le=MAX_RETRIES, description="retries of a failed task before its process fails"
    )


class ClusteringStrategy(StrEnum):
    """How rewritten rows are ordered when the table's own sort order is not enough."""

    ZORDER = "zorder"


class ClusteringSpec(_Model):
    """Order rows of rewritten files by a multi-column curve, so range filters skip more files.

    A table's Iceberg sort order is always honoured; clustering, when set, takes its place
    in the tasks' output (the files' sort order id is then 0, "unsorted", since Iceberg
    has no z-order sort order).
    """

    strategy: ClusteringStrategy = Field(
        strict=False, description="zorder: interleave the columns' bits (Morton order)"
    )
    columns: list[ColumnName] = Field(
        min_length=1, max_length=8, description="columns whose values are interleaved, by name"
    )


class SnapshotRetentionSpec(_Model):
    """Snapshot expiry: old snapshots and the files only they referenced are removed."""

    enabled: bool = Field(default=True, description="false: never expire snapshots")
    min_snapshots: Integer = Field(
        default=1,
        ge=1,
        le=INT32_MAX,
        description="newest snapshots of each branch always kept, whatever their age",
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


MAX_ORPHAN_LOCATIONS = 16
MAX_LOCATION_LENGTH = 2048
#: A storage location (``s3://bucket/key``, ``/dir``): no control characters.
LOCATION = r"^[^\p{Cc}]+$"
Location = Annotated[str, StringConstraints(min_length=1, max_length=MAX_LOCATION_LENGTH, pattern=LOCATION)]


class OrphanFilesSpec(_Model):
    """Orphan-file cleanup: files under the table location (and `locations`) that no metadata references."""

    enabled: bool = Field(default=True, description="false: never remove orphan files")
    older_than: Duration = Field(
        default=3 * 86400.0,
        description="only files older than this are removed (at least 1h, so files being written are safe)",
    )
    interval: Duration = Field(default=86400.0, description="how often orphan cleanup runs")
    locations: list[Location] = Field(
        default_factory=list,
        max_length=MAX_ORPHAN_LOCATIONS,
        description="places outside the table location to list too, each the table's write.data.path, "
        "write.metadata.path (or an older write path) or inside one; refused when another table of the "
        "catalog writes there",
    )

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
    trigger_small_manifests: Integer = Field(
        default=100,
        ge=2,
        le=INT32_MAX,
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

    column: ColumnName = Field(description="a timestamp, timestamptz or date column (by name)")
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
    executors_at_files: Integer = Field(
        default=10000,
        ge=0,
        le=INT32_MAX,
        description="from this many live data and delete files on, the group's executors do the heavy "
        "file work: orphan cleanup's listing, manifest reading and deletes, and expiry's deletes "
        "(0: always, while the group has an optimizer running)",
    )


def _positive_target_size(value: int | None) -> int | None:
    if value is not None and value <= 0:
        raise ValueError("targetSize must be greater than 0")
    return value


class OptimizedTableSpec(_Model):
    """One Iceberg table kept optimized, with Amoro's self-optimizing properties."""

    table: str = Field(
        min_length=3,
        max_length=MAX_TABLE_IDENTIFIER_LENGTH,
        pattern=TABLE_IDENTIFIER,
        description="catalog identifier, namespace.table",
    )
    catalog: CatalogRef
    group: str = Field(
        default="default",
        max_length=MAX_GROUP_NAME_LENGTH,
        pattern=DNS1123_LABEL,
        description="the OptimizerGroup serving the table, in the table's namespace",
    )
    enabled: bool = Field(default=True, description="false: never scheduled")
    quota: float = Field(
        default=0.5,
        gt=0,
        # A table cannot use more threads than the largest group has.
        le=MAX_EXECUTORS * MAX_EXECUTOR_CORES,
        description="CPU share in threads (<= 1: fraction of group)",
    )
    target_size: Quantity | None = Field(
        default=None,
        description="size of the data files written; unset: the table's write.target-file-size-bytes, "
        "else 128Mi",
    )
    fragment_ratio: Integer = Field(
        default=8, ge=1, le=INT32_MAX, description="fragment: data file <= targetSize / fragmentRatio"
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

    @field_validator("target_size")
    @classmethod
    def _target_positive(cls, value: int | None) -> int | None:
        return _positive_target_size(value)

    def optimizing_config(self, table_properties: Mapping[str, str] | None = None) -> OptimizingConfig:
        """Thresholds for the pure evaluator and planner; the target size is the manifest's, else
        the table's ``write.target-file-size-bytes`` (from `table_properties`), else 128 MiB.
        Raises `InvalidTableProperty` when that property is not a positive integer."""
        return OptimizingConfig(
            target_size=self.target_size
            or integer_property(table_properties or {}, TARGET_FILE_SIZE_PROPERTY)
            or DEFAULT_TARGET_SIZE,
            fragment_ratio=self.fragment_ratio,
            min_target_size_ratio=self.min_target_size_ratio,
            minor_trigger_file_count=self.minor.trigger_file_count,
            minor_trigger_interval_s=self.minor.trigger_interval,
            major_duplicate_ratio=self.major.duplicate_ratio,
            full_trigger_interval_s=self.full.trigger_interval,
            full_rewrite_all_files=self.full.rewrite_all_files,
            max_task_size_bytes=self.max_task_size,
        )


SET_OWN_FIELDS = ("table", "catalog", "group")
"""What an OptimizedTableSet sets on each of its tables itself, not through its template."""
TABLE_SET_LABEL = "floe.dev/table-set"
"""The label on each OptimizedTable a set made: the set's name."""


def _template_fields() -> dict[str, Any]:
    """OptimizedTableSpec's fields but the table, its catalog and group, each optional and unset
    by default, with the same bounds: the settings a table can inherit."""
    fields: dict[str, Any] = {}
    for name, info in OptimizedTableSpec.model_fields.items():
        if name in SET_OWN_FIELDS:
            continue
        optional = FieldInfo.merge_field_infos(info, default=None)
        optional.default_factory = None
        annotation: Any = info.annotation
        fields[name] = (annotation | None, optional)
    return fields


if TYPE_CHECKING:
    OptimizedTableTemplate = _Model
else:
    OptimizedTableTemplate = create_model(
        "OptimizedTableTemplate",
        __base__=_Model,
        __doc__="OptimizedTable settings, each optional: an OptimizedTableSet's template, an "
        "OptimizerGroup's tableDefaults, a table's effective settings in its status.",
        # OptimizedTableSpec's own validators (its nested models bring theirs).
        __validators__={"_target_positive": field_validator("target_size")(_positive_target_size)},
        **_template_fields(),
    )
# The group's tableDefaults are a template too.
OptimizerGroupSpec.model_rebuild()


Message = Annotated[str, StringConstraints(max_length=MAX_MESSAGE_LENGTH)]
"""Free text in status (clipped to fit by `floe.controller.status.clip`)."""
Time = Annotated[str, StringConstraints(max_length=MAX_TIME_LENGTH)]
"""An RFC 3339 time in status."""


class Condition(_Model):
    """A Kubernetes-style status condition, bounded as metav1.Condition is."""

    type: str = Field(max_length=MAX_CONDITION_TYPE_LENGTH)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=MAX_REASON_LENGTH)
    message: Message = ""
    last_transition_time: Time | None = None


class MaintenanceJobStatus(_Model):
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


SettingPath = Annotated[str, StringConstraints(max_length=MAX_LABEL_LENGTH)]
"""A setting by its camelCase path: ``minor.triggerFileCount``."""
SettingSource = Annotated[str, StringConstraints(max_length=MAX_SUBDOMAIN_LENGTH + 32)]
"""``OptimizedTable``, or ``OptimizedTableSet/NAME`` or ``OptimizerGroup/NAME``."""
MAX_SETTINGS = 256
"""Far above the settings a table has (about 40)."""


class OptimizedTableStatus(_Model):
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


class OptimizerGroupStatus(_Model):
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
    selector: str = Field(
        default="",
        max_length=MAX_MESSAGE_LENGTH,
        description="label selector of the group's executor pods (the scale subresource's labelSelectorPath)",
    )
    conditions: list[Condition] = Field(default_factory=list, max_length=MAX_CONDITIONS)


class OptimizerGroup(_Model):
    """``kind: OptimizerGroup``."""

    api_version: Literal["floe.dev/v1alpha1"]
    kind: Literal["OptimizerGroup"]
    metadata: GroupMeta
    spec: OptimizerGroupSpec = Field(default_factory=OptimizerGroupSpec)
    status: OptimizerGroupStatus | None = None


class OptimizedTable(_Model):
    """``kind: OptimizedTable``."""

    api_version: Literal["floe.dev/v1alpha1"]
    kind: Literal["OptimizedTable"]
    metadata: ObjectMeta
    spec: OptimizedTableSpec
    status: OptimizedTableStatus | None = None


TablePattern = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_TABLE_IDENTIFIER_LENGTH, pattern=TABLE_PATTERN)
]


class OptimizedTableSetSpec(_Model):
    """Every table of a catalog whose ``namespace.table`` matches an include pattern and no exclude
    pattern, kept optimized: one OptimizedTable per table, made and removed by the operator."""

    catalog: CatalogRef
    include: list[TablePattern] = Field(
        min_length=1,
        max_length=MAX_PATTERNS,
        description="globs over namespace.table: * and ? within one dot-separated part, ** across "
        "parts (nested namespaces), [abc] and [!abc] classes; e.g. sales.*, raw.**, **",
    )
    exclude: list[TablePattern] = Field(
        default_factory=list, max_length=MAX_PATTERNS, description="globs of tables left out"
    )
    group: str = Field(
        default="default",
        max_length=MAX_GROUP_NAME_LENGTH,
        pattern=DNS1123_LABEL,
        description="the OptimizerGroup serving the tables, in the set's namespace",
    )
    template: OptimizedTableTemplate = Field(
        default_factory=OptimizedTableTemplate,
        description="OptimizedTable settings of every table of the set (quota, thresholds, maintenance)",
    )
    list_interval: Duration = Field(default=300.0, description="how often the catalog is listed again")

    @field_validator("list_interval")
    @classmethod
    def _interval_positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("listInterval must be greater than 0")
        return value

    def table_spec(self, identifier: str) -> OptimizedTableSpec:
        """The spec of the set's OptimizedTable for `identifier`: the table, the set's catalog and
        group. The template is not copied into it: it is inherited (`floe.api.inheritance`), so that
        what the table's own manifest sets wins, and a changed template reaches every table."""
        catalog = self.catalog.model_dump(by_alias=True, exclude_defaults=True)
        return OptimizedTableSpec.model_validate(
            {"table": identifier, "catalog": catalog, "group": self.group}
        )


class OptimizedTableSetStatus(_Model):
    """What the operator found at the set's last listing (written by the operator)."""

    observed_generation: int | None = None
    last_listed: Time | None = Field(
        default=None,
        description="when the operator last listed the catalog (RFC 3339)",
        json_schema_extra={"format": "date-time"},
    )
    matched_tables: int | None = Field(default=None, description="catalog tables the patterns match")
    managed_tables: int | None = Field(default=None, description="OptimizedTables the set owns")
    claimed_tables: int | None = Field(
        default=None,
        description="matching tables another OptimizedTable (hand-written, or another set's) serves",
    )
    message: Message | None = None
    conditions: list[Condition] = Field(default_factory=list, max_length=MAX_CONDITIONS)


class OptimizedTableSet(_Model):
    """``kind: OptimizedTableSet``."""

    api_version: Literal["floe.dev/v1alpha1"]
    kind: Literal["OptimizedTableSet"]
    metadata: ObjectMeta
    spec: OptimizedTableSetSpec
    status: OptimizedTableSetStatus | None = None


Resource = OptimizerGroup | OptimizedTable | OptimizedTableSet
KINDS: dict[str, type[OptimizerGroup] | type[OptimizedTable] | type[OptimizedTableSet]] = {
    "OptimizerGroup": OptimizerGroup,
    "OptimizedTable": OptimizedTable,
    "OptimizedTableSet": OptimizedTableSet,
}


def resource_from_dict(document: dict[str, Any]) -> Resource:
    """Validate one manifest document into its model; raises ValueError naming the kind."""
    kind = document.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: expected one of {', '.join(KINDS)}")
    return KINDS[kind].model_validate(document)
