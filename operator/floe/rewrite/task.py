"""A rewrite task on an executor: a bin of files of one partition rewritten into target-sized
files, or their deletes turned into one position-delete file (or deletion vector) each.

It runs in a Python worker with no catalog access: the schema, partition spec and FileIO
properties all come in the `RewriteTaskSpec`. Data files are streamed record batch by
record batch and projected onto the current table schema by field id, so memory is
bounded by row groups (and, with equality deletes, a chunk of rows waiting to be matched),
not file sizes. Only the delete sets are held in memory, within `delete_memory_limit_bytes`.

Deletes follow Iceberg's sequence-number rules per data file: a position delete applies
when data_seq <= delete_seq, an equality delete when data_seq < delete_seq, and in
equality deletes null equals null.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema, prune_columns, sanitize_column_names
from pyiceberg.table.name_mapping import parse_mapping_from_json
from pyiceberg.transforms import IdentityTransform

from floe.planning.plan import POSITIONS
from floe.protocol.rewrite_task import (
    InputDataFile,
    RewriteTaskResult,
    RewriteTaskSpec,
)
from floe.protocol.storage import executor_io_properties
from floe.rewrite import limits
from floe.rewrite.data_writer import _RollingParquetWriter
from floe.rewrite.delete_writers import _DeletionVectorWriter, _PositionDeleteWriter
from floe.rewrite.deletes import _EqualityFilter, _EqualityMatcher, _load_deletes
from floe.rewrite.errors import RewriteError
from floe.rewrite.lineage import fill_lineage, with_lineage
from floe.rewrite.source import _Context, _mask_at, _ParquetSource, _SchemaResolver
from floe.tables.pyiceberg_compat import ROW_LINEAGE_VERSION


def run_rewrite_task(spec: RewriteTaskSpec) -> RewriteTaskResult:
    """Rewrite the task's data files, minus their deleted rows, into files of about the target size.

    Files written before a failure are deleted before the error propagates, so an
    abandoned task leaves nothing behind. Raises `DeleteSetTooLarge` when the delete
    sets exceed the task's memory budget and `RewriteError` when the inputs cannot be
    read consistently with the table schema.
    """
    context = _task_context(spec)
    io = context.io
    # The equality filter finds the table's columns at the same positions either way.
    lineage = spec.format_version >= ROW_LINEAGE_VERSION
    schema = with_lineage(context.schema) if lineage else context.schema
    deletes = _load_deletes(context, spec)
    writer = _RollingParquetWriter(io, spec, schema)
    sink = _EqualityFilter(writer)
    rows_read = rows_deleted = 0
    try:
        # In sequence-number order, data files to which the same equality deletes apply
        # come together, so each such set of delete keys is hashed into a matcher once.
        for data_file in sorted(spec.data_files, key=lambda f: f.data_sequence_number):
            sink.use(deletes.matchers_for(data_file))
            positions = deletes.positions_for(data_file)
            read, deleted = _rewrite_data_file(
                context, data_file, positions, sink, schema if lineage else None
            )
            rows_read += read
            rows_deleted += deleted
        sink.flush()
        rows_deleted += sink.rows_deleted
        files = writer.finish()
    except BaseException:
        writer.abort()
        raise
    return RewriteTaskResult(
        task_id=spec.task_id,
        files=files,
        rows_read=rows_read,
        rows_deleted=rows_deleted,
        bytes_read=sum(f.size_bytes for f in spec.data_files) + deletes.bytes_read,
    )


def _task_context(spec: RewriteTaskSpec) -> _Context:
    # Parquet column names must be the sanitized ones, as pyiceberg and Iceberg Java write them.
    return _Context(
        io=load_file_io(executor_io_properties(spec), location=spec.output_dir),
        schema=sanitize_column_names(Schema.model_validate_json(spec.table_schema_json)),
        partition_spec=PartitionSpec.model_validate_json(spec.partition_spec_json),
        resolver=_SchemaResolver(
            parse_mapping_from_json(spec.name_mapping_json) if spec.name_mapping_json else None
        ),
    )


def run_task(spec: RewriteTaskSpec) -> RewriteTaskResult:
    """Run a task of either kind (`RewriteTaskSpec.kind`)."""
    return run_position_task(spec) if spec.kind == POSITIONS else run_rewrite_task(spec)


def run_position_task(spec: RewriteTaskSpec) -> RewriteTaskResult:
    """Write, for each data file of the task, one position-delete file holding every row its
    delete files remove: its position deletes merged, its equality deletes (by the sequence-number
    rules) converted into positions, less the rows its kept position-delete files hold (they stay
    in the table). The data files stay as they are.

    Only the columns the equality deletes compare are read. A data file nothing deletes gets
    no file. ``rows_read`` counts the data files' rows, ``rows_deleted`` the positions written.
    Files written before a failure are deleted before the error propagates.
    """
    context = _task_context(spec)
    io, schema = context.io, context.schema
    deletes = _load_deletes(context, spec)
    keys = {field_id for d in deletes.equality for field_id in d.field_ids}
    # The equality deletes' columns only, and at least one column to count the rows by.
    key_schema = prune_columns(schema, keys or {schema.columns[0].field_id}, select_full_types=False)
    # A v3 table takes position deletes only as deletion vectors, one per data file.
    writer: _PositionDeleteWriter | _DeletionVectorWriter
    if spec.format_version >= ROW_LINEAGE_VERSION:
        writer = _DeletionVectorWriter(io, spec)
    else:
        writer = _PositionDeleteWriter(io, spec)
    rows_read = positions_written = 0
    try:
        for data_file in sorted(spec.data_files, key=lambda f: f.data_sequence_number):
            matchers = deletes.matchers_for(data_file, key_schema)
            read, matched = _equality_positions(context, data_file, key_schema, matchers)
            rows_read += read
            positions = pc.unique(pa.concat_arrays([deletes.positions_for(data_file), matched])).sort()
            # A position beyond the file (a stale delete) deletes nothing: it is not carried over.
            positions = positions.filter(pc.less(positions, data_file.record_count))
            # The kept files stay in force: the new file holds only the rows they do not.
            held = deletes.kept_for(data_file)
            if len(held):
                positions = positions.filter(pc.invert(pc.is_in(positions, value_set=held)))
            if len(positions):
                writer.write(data_file.path, positions)
                positions_written += len(positions)
    except BaseException:
        writer.abort()
        raise
    return RewriteTaskResult(
        task_id=spec.task_id,
        files=writer.files,
        rows_read=rows_read,
        rows_deleted=positions_written,
        bytes_read=deletes.bytes_read,
    )


def _equality_positions(
    context: _Context, data_file: InputDataFile, key_schema: Schema, matchers: list[_EqualityMatcher]
) -> tuple[int, pa.Array]:
    """Read a data file's `key_schema` columns; return its row count and the positions (int64,
    sorted) of the rows `matchers` match."""
    rows_read = 0
    matched: list[pa.Array] = []
    with context.io.new_input(data_file.path).open() as stream:
        source = _ParquetSource(stream, data_file.path, context.resolver)
        _check_readable(context, data_file, source)
        for batch in source.batches(key_schema, limits.READ_BATCH_ROWS):
            if matchers:
                rows = pa.Table.from_batches([batch])
                deleted = matchers[0].deleted(rows)
                for matcher in matchers[1:]:
                    deleted = pc.or_(deleted, matcher.deleted(rows))
                hits = pc.indices_nonzero(deleted)
                if len(hits):
                    matched.append(pc.add(hits.cast(pa.int64()), rows_read))
            rows_read += batch.num_rows
    return rows_read, pa.concat_arrays(matched) if matched else pa.array([], type=pa.int64())


def _rewrite_data_file(
    context: _Context,
    data_file: InputDataFile,
    positions: pa.Array,
    sink: _EqualityFilter,
    lineage_schema: Schema | None = None,
) -> tuple[int, int]:
    """Stream one data file, minus its position-deleted rows, into the sink; return (rows read, rows deleted).

    `positions` are the file's deleted row positions, sorted; the sink applies equality deletes.
    With `lineage_schema` (`with_lineage` of the table's) each row keeps its row lineage.
    """
    rows_read = rows_deleted = 0
    with context.io.new_input(data_file.path).open() as stream:
        source = _ParquetSource(stream, data_file.path, context.resolver)
        _check_readable(context, data_file, source)
        for batch in source.batches(lineage_schema or context.schema, limits.READ_BATCH_ROWS):
            if lineage_schema is not None:
                batch = fill_lineage(batch, rows_read, data_file.first_row_id, data_file.data_sequence_number)
            end = rows_read + batch.num_rows
            low, high = pc.search_sorted(positions, pa.array([rows_read, end], type=pa.int64())).to_pylist()
            in_batch = pc.subtract(positions.slice(low, high - low), rows_read)
            rows_read = end
            if len(in_batch) == 0:
                sink.write(batch)
                continue
            rows_deleted += len(in_batch)
            sink.write(batch.filter(pc.invert(_mask_at(in_batch, batch.num_rows))))
    return rows_read, rows_deleted


def _check_readable(context: _Context, data_file: InputDataFile, source: _ParquetSource) -> None:
    num_rows = source.parquet.metadata.num_rows
    # Position deletes address rows by their position: a different file under this path
    # would have the wrong rows deleted.
    if num_rows != data_file.record_count:
        raise RewriteError(
            f"data file {data_file.path} has {num_rows} rows, "
            f"but its manifest entry says {data_file.record_count}"
        )
    missing = context.schema.field_ids - source.file_schema.field_ids
    identity_sources = [
        context.schema.find_column_name(f.source_id)
        for f in context.partition_spec.fields
        if isinstance(f.transform, IdentityTransform) and f.source_id in missing
    ]
    if identity_sources:
        raise RewriteError(
            f"data file {data_file.path} lacks the identity partition source column(s) {identity_sources}, "
            "whose values live only in partition metadata the task does not carry; "
            "rewriting it would null them"
        )
