"""An optimizing process on the driver side: a plan turned into task specs, and finished
tasks turned into one commit request.

The executor side (`floe.optimizer.rewrite`) only sees `RewriteTaskSpec`; the committer
only sees `RewriteRequest`. This module is the translation between them and the plan.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from floe.api.models import ClusteringSpec
from floe.commit.rewrite import RewriteRequest
from floe.optimizer.layout import output_order, output_sort_order_id
from floe.optimizer.parquet_options import (
    COMPRESSION_CODEC,
    DEFAULT_CODEC,
    check_write_properties,
    write_properties,
)
from floe.optimizer.rewrite import written_file_to_data_file
from floe.planning.config import OptimizingConfig
from floe.planning.plan import POSITIONS, OptimizingPlan, PlannedTask
from floe.protocol.rewrite_task import InputDataFile, InputDeleteFile, RewriteTaskResult, RewriteTaskSpec
from floe.protocol.storage import task_io_properties
from floe.tables.scan import ScannedTable

DEFAULT_DELETE_MEMORY_LIMIT = 1024 * 1024 * 1024


class ProcessFailed(RuntimeError):
    """Some tasks failed and partial commit is not allowed: nothing is committed."""


@dataclass(frozen=True)
class OptimizingProcess:
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
) -> OptimizingProcess:
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
    return OptimizingProcess(
        process_id=process_id,
        table_name=table_name,
        plan=plan,
        specs=tuple(specs),
        tasks=tasks,
        scanned=scanned,
        started_at=time.time(),
    )


def commit_request(
    process: OptimizingProcess,
    results: Sequence[RewriteTaskResult],
    failures: Mapping[str, str],
    allow_partial_commit: bool,
) -> RewriteRequest:
    """The commit of the finished tasks; raises ProcessFailed if failures forbid it.

    With partial commit, only succeeded tasks' input files are replaced: the failed
    tasks' files stay live and are picked up by a later plan. A positions task's data files
    stay, converted: its position-delete files are added beside them.
    """
    if failures and not allow_partial_commit:
        first = min(failures)
        raise ProcessFailed(
            f"{len(failures)} of {len(process.specs)} tasks failed; partial commit is not allowed. "
            f"{first}: {failures[first]}"
        )
    if not results:
        raise ProcessFailed("no task of the process succeeded")
    rewritten: set[str] = set()
    converted: set[str] = set()
    deletes: set[str] = set()
    added: list[DataFile] = []
    first_row_ids: dict[str, int | None] = {}
    specs = {spec.task_id: spec for spec in process.specs}
    for result in results:
        task = process.tasks[result.task_id]
        record = process.scanned.partition_records[task.partition]
        sort_order_id = output_sort_order_id(specs[result.task_id].output_order)
        (converted if task.kind == POSITIONS else rewritten).update(f.path for f in task.data_files)
        first_row_ids.update((f.path, f.first_row_id) for f in task.data_files)
        deletes.update(f.path for f in task.delete_files)
        added.extend(
            written_file_to_data_file(w, task.partition.spec_id, record, sort_order_id) for w in result.files
        )
    optimizing_type = process.plan.optimizing_type
    return RewriteRequest(
        process_id=process.process_id,
        optimizing_type=optimizing_type.label if optimizing_type else "none",
        starting_snapshot_id=process.starting_snapshot_id,
        starting_sequence_number=process.plan.sequence_number,
        rewritten_data_paths=frozenset(rewritten),
        converted_data_paths=frozenset(converted),
        candidate_delete_paths=frozenset(deletes),
        added_files=tuple(added),
        format_version=process.scanned.files.format_version,
        deferred_partitions=process.plan.deferred_partitions,
        planned_first_row_ids=first_row_ids,
    )
