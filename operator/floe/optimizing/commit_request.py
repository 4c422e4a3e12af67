"""Finished tasks of an optimizing process turned into one commit request: the results' written
files become the pyiceberg `DataFile`s the commit adds, beside the files it replaces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from floe.commit.request import RewriteRequest
from floe.optimizing.specs import PlannedProcess, output_sort_order_id
from floe.planning.files import FileKind
from floe.planning.plan import POSITIONS
from floe.protocol.rewrite_task import RewriteTaskResult, WrittenFile
from floe.tables.deletion_vectors import WrittenVector, deletion_vector_data_file


class ProcessFailed(RuntimeError):
    """Some tasks failed and partial commit is not allowed: nothing is committed."""


def commit_request(
    process: PlannedProcess,
    results: Sequence[RewriteTaskResult],
    failures: Mapping[str, str],
    allow_partial_commit: bool,
) -> RewriteRequest:
    """The commit of the finished tasks; raises ProcessFailed if failures forbid it.

    With partial commit, only succeeded tasks' input files are replaced: the failed
    tasks' files stay live and are picked up by a later plan. A positions task's data files
    stay, converted: its position-delete files are added beside them, and the delete files it
    kept are no candidates for removal.
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
        deletes.update(f.path for f in task.delete_files if f.path not in task.kept_delete_paths)
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


def written_file_to_data_file(
    written: WrittenFile, spec_id: int, partition: Record, sort_order_id: int | None = None
) -> DataFile:
    """Build the pyiceberg `DataFile` (Parquet; content DATA, or POSITION_DELETES for the file of a
    positions task; a Puffin deletion vector on a v3 table) a commit adds for a written file."""
    if written.content_offset is not None and written.content_size_in_bytes and written.referenced_data_file:
        vector = WrittenVector(
            file_size=written.size_bytes,
            offset=written.content_offset,
            length=written.content_size_in_bytes,
            cardinality=written.record_count,
        )
        return deletion_vector_data_file(
            written.path, written.referenced_data_file, vector, spec_id, partition
        )
    data_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES
        if written.content == FileKind.POSITION_DELETES
        else DataFileContent.DATA,
        file_path=written.path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=written.record_count,
        file_size_in_bytes=written.size_bytes,
        column_sizes=dict(written.column_sizes),
        value_counts=dict(written.value_counts),
        null_value_counts=dict(written.null_value_counts),
        nan_value_counts=dict(written.nan_value_counts),
        lower_bounds={k: bytes.fromhex(v) for k, v in written.lower_bounds.items()},
        upper_bounds={k: bytes.fromhex(v) for k, v in written.upper_bounds.items()},
        split_offsets=list(written.split_offsets),
        equality_ids=None,
        sort_order_id=sort_order_id if written.content == FileKind.DATA else None,
        key_metadata=None,
    )
    # from_args only binds the manifest struct's fields; the spec id is kept beside them.
    data_file.spec_id = spec_id
    return data_file
