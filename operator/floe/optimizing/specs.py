"""An optimizing process on the driver side: a plan turned into task specs, each with the order
its rows are written in (`output_order`).

The executor side (`floe.rewrite`) only sees `RewriteTaskSpec`; the committer only sees
`RewriteRequest` (`floe.optimizing.commit_request`). This module translates the plan into the
first.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.schema import Accessor, Schema, build_position_accessors
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.types import PrimitiveType

from floe.api.table import ClusteringSpec
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingPlan, PlannedTask
from floe.protocol.rewrite_task import InputDataFile, InputDeleteFile, OutputOrder, RewriteTaskSpec
from floe.protocol.storage import task_io_properties
from floe.rewrite.parquet_options import (
    COMPRESSION_CODEC,
    DEFAULT_CODEC,
    check_write_properties,
    write_properties,
)
from floe.tables.scan import ScannedTable

DEFAULT_DELETE_MEMORY_LIMIT = 1024 * 1024 * 1024
UNSORTED_ORDER_ID = 0
"""Iceberg's sort order id meaning "unsorted", which z-ordered files carry."""


@dataclass(frozen=True)
class PlannedProcess:
    """The tasks of one plan, ready to ship, and how to map their results back."""

    process_id: str
    table_name: str
    plan: OptimizingPlan
    specs: tuple[RewriteTaskSpec, ...]
    tasks: dict[str, PlannedTask]
    scanned: ScannedTable
    started_at: float

    @property
    def starting_snapshot_id(self) -> int:
        """Snapshot the plan was made on."""
        if self.plan.snapshot_id is None:
            raise ValueError("a process needs a snapshot to start from")
        return self.plan.snapshot_id


def new_process_id(table_name: str) -> str:
    """Unique, readable id: ``db.orders-20240101T120000-1a2b3c``."""
    return f"{table_name}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


def build_process(
    table: Table,
    table_name: str,
    scanned: ScannedTable,
    plan: OptimizingPlan,
    config: OptimizingConfig,
    delete_memory_limit: int = DEFAULT_DELETE_MEMORY_LIMIT,
    process_id: str | None = None,
    clustering: ClusteringSpec | None = None,
    storage_secret: str | None = None,
    secret_properties: Mapping[str, str] | None = None,
) -> PlannedProcess:
    """Turn each planned task into a self-contained spec an executor can run.

    The tasks write their rows z-ordered by `clustering` when it is set, else in the
    table's sort order, if any. Raises ValueError when the clustering names a column
    the table lacks, or the sort order cannot be applied. The tasks never carry the
    catalog's own authentication; with a `storage_secret`, the storage credentials among
    its `secret_properties` stay out of them too (`floe.protocol.storage`).
    """
    metadata = table.metadata
    process_id = process_id or new_process_id(table_name)
    data_root = metadata.properties.get("write.data.path", f"{metadata.location.rstrip('/')}/data")
    schema_json = metadata.schema().model_dump_json()
    compression = metadata.properties.get(COMPRESSION_CODEC, DEFAULT_CODEC)
    properties = write_properties(metadata.properties)
    # Refused here, with the property named, rather than by every task.
    check_write_properties(metadata.properties, metadata.schema())
    name_mapping = metadata.name_mapping()
    name_mapping_json = name_mapping.model_dump_json() if name_mapping is not None else None
    order = output_order(metadata, clustering)
    io_properties, secret = task_io_properties(table.io.properties, storage_secret, secret_properties or {})
    specs: list[RewriteTaskSpec] = []
    tasks: dict[str, PlannedTask] = {}
    for index, task in enumerate(plan.tasks):
        task_id = f"{process_id}-t{index:04d}"
        partition_path = scanned.partition_path(metadata, task.partition)
        output_dir = f"{data_root}/{partition_path}" if partition_path else data_root
        specs.append(
            RewriteTaskSpec(
                task_id=task_id,
                kind=task.kind,
                io_properties=io_properties,
                storage_secret=secret,
                table_schema_json=schema_json,
                name_mapping_json=name_mapping_json,
                partition_spec_json=metadata.specs()[task.partition.spec_id].model_dump_json(),
                output_dir=output_dir,
                data_files=[
                    InputDataFile(
                        path=f.path,
                        record_count=f.record_count,
                        size_bytes=f.size_bytes,
                        data_sequence_number=f.data_sequence_number,
                        first_row_id=f.first_row_id,
                    )
                    for f in task.data_files
                ],
                delete_files=[
                    InputDeleteFile(
                        path=f.location,
                        kind=int(f.kind),
                        record_count=f.record_count,
                        size_bytes=f.size_bytes,
                        data_sequence_number=f.data_sequence_number,
                        equality_ids=list(f.equality_ids),
                        content_offset=f.content_offset,
                        content_size_in_bytes=f.content_size,
                        referenced_data_file=f.referenced_data_file if f.content_offset is not None else None,
                        kept=f.path in task.kept_delete_paths,
                    )
                    for f in task.delete_files
                ],
                target_file_size_bytes=config.target_size,
                delete_memory_limit_bytes=delete_memory_limit,
                parquet_compression=compression,
                write_properties=properties,
                file_name_prefix=f"{process_id}-t{index:04d}-{uuid.uuid4().hex[:8]}",
                output_order=order,
                format_version=scanned.files.format_version,
            )
        )
        tasks[task_id] = task
    return PlannedProcess(
        process_id=process_id,
        table_name=table_name,
        plan=plan,
        specs=tuple(specs),
        tasks=tasks,
        scanned=scanned,
        started_at=time.time(),
    )


def output_order(metadata: TableMetadata, clustering: ClusteringSpec | None) -> OutputOrder | None:
    """The order a process's tasks write rows in: z-order by `clustering` if set, else the sort order.

    None when neither is set (the table is unsorted). Raises ValueError naming the
    column when a clustering column, or a sort order's source column, is not a
    primitive column of the current schema outside lists and maps, or when a sort
    transform cannot apply to its column.
    """
    schema = metadata.schema()
    reachable = build_position_accessors(schema)
    if clustering is not None:
        return OutputOrder(
            zorder_field_ids=[_clustering_field_id(schema, reachable, c) for c in clustering.columns]
        )
    sort_order = metadata.sort_order()
    if sort_order.is_unsorted:
        return None
    for sort_field in sort_order.fields:
        name = schema.find_column_name(sort_field.source_id)
        if name is None or sort_field.source_id not in reachable:
            raise ValueError(
                f"sort order {sort_order.order_id}: source field id {sort_field.source_id} is not a column "
                "of the current schema outside lists and maps"
            )
        source_type = schema.find_type(sort_field.source_id)
        if not sort_field.transform.can_transform(source_type):
            raise ValueError(
                f"sort order {sort_order.order_id}: transform {sort_field.transform} "
                f"cannot apply to column {name!r} of type {source_type}"
            )
    return OutputOrder(sort_order_json=sort_order.model_dump_json())


def output_sort_order_id(order: OutputOrder | None) -> int | None:
    """The sort order id of files written in `order`: the sort order's, 0 for z-order, None without one."""
    if order is None:
        return None
    if order.sort_order_json is None:
        return UNSORTED_ORDER_ID
    return SortOrder.model_validate_json(order.sort_order_json).order_id


def _clustering_field_id(schema: Schema, reachable: dict[int, Accessor], column: str) -> int:
    try:
        field = schema.find_field(column)
    except ValueError:
        raise ValueError(
            f"clustering column {column!r} is not a column of the table; columns: {schema.column_names}"
        ) from None
    if not isinstance(field.field_type, PrimitiveType) or field.field_id not in reachable:
        raise ValueError(
            f"clustering column {column!r} ({field.field_type}) is not a primitive column outside "
            "lists and maps, so it has no single value per row to interleave"
        )
    return field.field_id
