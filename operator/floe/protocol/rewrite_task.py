"""Wire format of one rewrite task: what the driver ships into a Spark task and gets back.

Everything is JSON-serialisable (pydantic v2) so the same models travel through the
task service to the optimizers. Schemas and partition specs are carried as
Iceberg JSON so the executor needs no catalog access, only FileIO.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from floe.kit.redaction import MAX_SECRET_NAME, STORAGE_SECRET_NAME
from floe.planning.plan import POSITIONS, REWRITE, TaskKind

OUT_OF_MEMORY = "ExecutorOutOfMemory"
"""How a task's error starts when its executor, or the Python worker in it, was killed for memory."""


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InputDataFile(_Wire):
    """A data file the task rewrites."""

    path: str
    record_count: int
    size_bytes: int
    data_sequence_number: int
    # Left out of the JSON when unset (before format v3), as the fields below.
    first_row_id: int | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="format v3: the _row_id of its first row (a row without one: this plus its position)",
    )


class InputDeleteFile(_Wire):
    """A delete file that applies to at least one of the task's data files.

    kind is 1 (position deletes) or 2 (equality deletes). The executor re-checks the
    sequence-number rule per data file: an equality delete applies to data files with
    a strictly smaller data sequence number, a position delete to smaller or equal.
    """

    path: str
    kind: int = Field(ge=1, le=2)
    record_count: int
    size_bytes: int
    data_sequence_number: int
    equality_ids: list[int] = Field(default_factory=list)
    content_offset: int | None = Field(
        default=None,
        ge=0,
        exclude_if=lambda value: value is None,
        description="a deletion vector: where its blob starts in the Puffin file `path`",
    )
    content_size_in_bytes: int | None = Field(
        default=None,
        gt=0,
        exclude_if=lambda value: value is None,
        description="a deletion vector: its blob's length",
    )
    referenced_data_file: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="a deletion vector: the data file it deletes from",
    )
    # Left out of the JSON when False, so optimizers from before it keep working; an older
    # optimizer refuses a spec carrying it (extra="forbid") rather than write its rows again.
    kept: bool = Field(
        default=False,
        exclude_if=lambda kept: not kept,
        description="a positions task's position-delete file that stays in the table: the task writes "
        "only the rows it does not hold",
    )

    @model_validator(mode="after")
    def _whole_deletion_vector(self) -> InputDeleteFile:
        parts = (self.content_offset, self.content_size_in_bytes, self.referenced_data_file)
        if any(p is not None for p in parts) and (None in parts or self.kind != 1):
            raise ValueError(
                "a deletion vector is a position delete with content_offset, content_size_in_bytes "
                "and referenced_data_file all set"
            )
        if self.kept and (self.kind != 1 or self.content_offset is not None):
            raise ValueError("only a position-delete file (not a deletion vector) can be kept")
        return self


class OutputOrder(_Wire):
    """How a task orders its output rows: by an Iceberg sort order, or along a z-order curve.

    Exactly one of the two is set. Field ids refer to ``table_schema_json`` of the task.
    """

    sort_order_json: str | None = Field(
        default=None, description="Iceberg JSON of the table sort order the output rows follow"
    )
    zorder_field_ids: list[int] = Field(
        default_factory=list,
        max_length=8,
        description="columns (field ids) whose values are bit-interleaved into a Morton code",
    )

    @model_validator(mode="after")
    def _one_order(self) -> OutputOrder:
        if (self.sort_order_json is None) == (not self.zorder_field_ids):
            raise ValueError("an output order has either sort_order_json or zorder_field_ids")
        return self


class RewriteTaskSpec(_Wire):
    """One bin of files of one partition: rewritten into target-sized files (``kind`` rewrite),
    or their deletes turned into one position-delete file each (``kind`` positions)."""

    task_id: str
    # Left out of the JSON when "rewrite", so optimizers from before it keep working; an
    # older optimizer refuses a positions task (extra="forbid") rather than rewrite it.
    kind: TaskKind = Field(
        default=REWRITE,
        exclude_if=lambda kind: kind == REWRITE,
        description="rewrite: new data files; positions: one position-delete file per data file",
    )
    io_properties: dict[str, str] = Field(
        description="pyiceberg FileIO properties; never the catalog's own authentication, and no "
        "storage credential that `storage_secret` names"
    )
    table_schema_json: str = Field(description="Iceberg JSON of the table's current schema")
    partition_spec_json: str = Field(description="Iceberg JSON of the spec the files belong to")
    name_mapping_json: str | None = Field(
        default=None,
        description="Iceberg JSON of schema.name-mapping.default, to read files written without field ids",
    )
    output_dir: str = Field(description="directory (URI) new files are written under")
    data_files: list[InputDataFile]
    delete_files: list[InputDeleteFile] = Field(default_factory=list)
    target_file_size_bytes: int = Field(gt=0)
    delete_memory_limit_bytes: int = Field(gt=0, description="budget for the in-memory delete sets")
    parquet_compression: str = "zstd"
    # Left out of the JSON when empty, for optimizers older than it (as `output_order`).
    write_properties: dict[str, str] = Field(
        default_factory=dict,
        exclude_if=lambda properties: not properties,
        description="the table's write.parquet.* and write.metadata.metrics.* properties",
    )
    file_name_prefix: str = Field(description="unique per process and task attempt")
    # Optional and left out of the JSON when unset, so drivers and optimizers of either
    # side of this field's introduction keep working together on unsorted tables; an
    # older optimizer rejects a spec carrying it (extra="forbid") rather than ignore it.
    output_order: OutputOrder | None = Field(
        default=None,
        exclude_if=lambda order: order is None,
        description="order of the output rows; unset: input order",
    )
    # Left out of the JSON before v3, so optimizers from before it keep working on v1 and v2.
    format_version: int = Field(
        default=2,
        ge=1,
        le=3,
        exclude_if=lambda version: version < 3,
        description="the table's: on 3, output rows keep _row_id and _last_updated_sequence_number, "
        "and position deletes are written as deletion vectors",
    )
    storage_secret: str | None = Field(
        default=None,
        exclude_if=lambda name: name is None,
        max_length=MAX_SECRET_NAME,
        pattern=STORAGE_SECRET_NAME,
        description="the catalog Secret, mounted in the optimizer's pods, whose storage credentials "
        "complete `io_properties`; unset: `io_properties` are complete",
    )

    @model_validator(mode="after")
    def _kept_deletes_in_positions_tasks(self) -> RewriteTaskSpec:
        # A rewrite replaces every delete of its data files; a v3 data file has one vector.
        if any(d.kept for d in self.delete_files) and (self.kind != POSITIONS or self.format_version >= 3):
            raise ValueError("only a positions task of a format v1 or v2 table keeps delete files")
        return self


class WrittenFile(_Wire):
    """Metadata of one Parquet file a task wrote, enough to build an Iceberg DataFile.

    Bounds are Iceberg single-value binary serialisations, hex-encoded for JSON.
    """

    path: str
    content: int = Field(
        default=0,
        ge=0,
        le=1,
        exclude_if=lambda content: content == 0,
        description="0: data (rewrite tasks); 1: position deletes (positions tasks)",
    )
    referenced_data_file: str | None = Field(
        default=None,
        exclude_if=lambda path: path is None,
        description="for a position-delete file: the one data file all its rows name",
    )
    content_offset: int | None = Field(
        default=None,
        ge=0,
        exclude_if=lambda value: value is None,
        description="for a deletion vector (a Puffin file): where its blob starts",
    )
    content_size_in_bytes: int | None = Field(
        default=None,
        gt=0,
        exclude_if=lambda value: value is None,
        description="a deletion vector's blob length",
    )
    record_count: int
    size_bytes: int
    column_sizes: dict[int, int]
    value_counts: dict[int, int]
    null_value_counts: dict[int, int]
    nan_value_counts: dict[int, int]
    lower_bounds: dict[int, str]
    upper_bounds: dict[int, str]
    split_offsets: list[int]


class RewriteTaskResult(_Wire):
    """What a finished task returns to the driver."""

    kind: Literal["rewrite"] = Field(
        default="rewrite",
        description="what this is the result of; left out only by optimizers older than the field",
    )
    task_id: str
    files: list[WrittenFile]
    rows_read: int
    rows_deleted: int
    bytes_read: int
