"""An OptimizedTable's spec: the table, its catalog, its thresholds and its maintenance, and the
template of the same settings, each optional, that a table can inherit."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, StringConstraints, create_model, field_validator, model_validator
from pydantic.fields import FieldInfo

from floe.api.meta import (
    CATALOG_NAME,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    INT32_MAX,
    MAX_EXECUTOR_CORES,
    MAX_EXECUTORS,
    MAX_GROUP_NAME_LENGTH,
    MAX_NAME_LENGTH,
    MAX_PROPERTIES,
    MAX_RETRIES,
    MAX_SUBDOMAIN_LENGTH,
    MAX_TABLE_IDENTIFIER_LENGTH,
    TABLE_IDENTIFIER,
    ColumnName,
    Integer,
    PropertyKey,
    PropertyMap,
    WireModel,
)
from floe.api.table_properties import integer_property
from floe.api.units import Duration, Quantity
from floe.planning.config import AMORO, Favor, MiB, OptimizingConfig, Policy

DEFAULT_TARGET_SIZE = 128 * MiB
TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"


class CatalogRef(WireModel):
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


class MinorSpec(WireModel):
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


class MajorSpec(WireModel):
    """Major optimizing thresholds."""

    duplicate_ratio: float = Field(
        default=0.1, gt=0, description="a segment's deleted records / its records that trigger major"
    )


class FullSpec(WireModel):
    """Full optimizing schedule; ``triggerInterval: "-1"`` turns it off."""

    trigger_interval: Duration = Field(default=-1.0, description="full optimizing every interval; -1: never")
    rewrite_all_files: bool = Field(
        default=True,
        description="rewrite every file of the partition (else fragments, undersized and files with deletes)",
    )


class ExecuteSpec(WireModel):
    """How tasks of a process are retried."""

    num_retries: Integer = Field(
        default=5, ge=0, le=MAX_RETRIES, description="retries of a failed task before its process fails"
    )


class OptimizingSpec(WireModel):
    """Which rules decide what is rewritten, and where on the read/write trade-off."""

    policy: Policy = Field(
        default=AMORO,
        description="amoro: Amoro's triggers; floe, for CDC tables: equality deletes converted at every "
        "plan, fragments merged in levels, files rewritten at the deleted share favor sets "
        "(minor.triggerFileCount, minor.triggerInterval and major.duplicateRatio then do not apply)",
    )
    favor: Favor = Field(
        default="balanced",
        description="policy floe only: reads (fastest reads, more bytes rewritten), balanced, or writes "
        "(fewest bytes rewritten, slower reads)",
    )


class ClusteringStrategy(StrEnum):
    """How rewritten rows are ordered when the table's own sort order is not enough."""

    ZORDER = "zorder"


class ClusteringSpec(WireModel):
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


class SnapshotRetentionSpec(WireModel):
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


class OrphanFilesSpec(WireModel):
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


class ManifestsSpec(WireModel):
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


class DanglingDeletesSpec(WireModel):
    """Removal of delete files that no live data file can be affected by."""

    enabled: bool = Field(default=True, description="false: never remove dangling delete files")
    interval: Duration = Field(default=3600.0, description="how often dangling deletes are looked for")

    @model_validator(mode="after")
    def _positive(self) -> DanglingDeletesSpec:
        if self.interval <= 0:
            raise ValueError("danglingDeletes.interval must be positive")
        return self


class DataRetentionSpec(WireModel):
    """Data retention (TTL): rows whose column value is older than ``olderThan`` are deleted."""

    column: ColumnName = Field(description="a timestamp, timestamptz or date column (by name)")
    older_than: Duration = Field(description="rows older than this (against the current time) are deleted")
    interval: Duration = Field(default=3600.0, description="how often retention runs")

    @model_validator(mode="after")
    def _positive(self) -> DataRetentionSpec:
        if self.older_than <= 0 or self.interval <= 0:
            raise ValueError("dataRetention.olderThan and dataRetention.interval must be positive")
        return self


class MaintenanceSpec(WireModel):
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


class RefreshSpec(WireModel):
    """How often floe asks the table's catalog whether it changed."""

    min_interval: Duration | None = Field(
        default=None,
        description="the shortest interval between checks: with work queued, and while a change the table's "
        "writers make now and then is due; unset: the operator's --refresh-interval (10s)",
    )
    max_interval: Duration = Field(
        default=600.0,
        description="an unchanged table is checked less and less often, down to once per maxInterval; "
        "at or below minInterval: every minInterval",
    )

    @model_validator(mode="after")
    def _positive(self) -> RefreshSpec:
        if self.max_interval <= 0 or (self.min_interval is not None and self.min_interval <= 0):
            raise ValueError("refresh.minInterval and refresh.maxInterval must be positive")
        return self


class OptimizedTableSpec(WireModel):
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
    optimizing: OptimizingSpec = Field(default_factory=OptimizingSpec)
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
    refresh: RefreshSpec = Field(default_factory=RefreshSpec)

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
            policy=self.optimizing.policy,
            favor=self.optimizing.favor,
        )


SET_OWN_FIELDS = ("table", "catalog", "group")
"""What an OptimizedTableSet sets on each of its tables itself, not through its template."""


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
    OptimizedTableTemplate = WireModel
else:
    OptimizedTableTemplate = create_model(
        "OptimizedTableTemplate",
        __base__=WireModel,
        __doc__="OptimizedTable settings, each optional: an OptimizedTableSet's template, an "
        "OptimizerGroup's tableDefaults, a table's effective settings in its status.",
        # OptimizedTableSpec's own validators (its nested models bring theirs).
        __validators__={"_target_positive": field_validator("target_size")(_positive_target_size)},
        **_template_fields(),
    )
