"""The rewrite one Spark task runs: read a bin of data files, drop deleted rows, write target-sized files.

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

import logging
import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import ResolveError
from pyiceberg.io import FileIO, InputStream, OutputStream, load_file_io
from pyiceberg.io.pyarrow import (
    StatisticsCollector,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Accessor, Schema, build_position_accessors, prune_columns, sanitize_column_names
from pyiceberg.table.name_mapping import NameMapping, parse_mapping_from_json
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import DoubleType, FloatType, ListType, MapType

from floe.kit.files import delete_paths
from floe.optimizer.encodings import choose_encodings
from floe.optimizer.layout import OrderedRows
from floe.optimizer.lineage import fill_lineage, with_lineage
from floe.optimizer.parquet_options import ParquetOptions, task_parquet_options
from floe.planning.files import MERGED_POSITIONS_SUFFIX, MERGED_VECTOR_SUFFIX, FileKind
from floe.planning.plan import POSITIONS
from floe.protocol.rewrite_task import (
    InputDataFile,
    InputDeleteFile,
    RewriteTaskResult,
    RewriteTaskSpec,
    WrittenFile,
)
from floe.protocol.storage import executor_io_properties
from floe.tables.deletion_vectors import (
    DeletionVectorError,
    WrittenVector,
    deletion_vector_data_file,
    read_deletion_vector,
    write_deletion_vector,
)
from floe.tables.pyiceberg_compat import ROW_LINEAGE_VERSION, to_requested_schema
from floe.tables.writer import (
    POS_DELETE_FILE_PATH,
    POS_DELETE_POS,
    POSITION_DELETE_METRICS,
    POSITION_DELETE_SCHEMA,
)

logger = logging.getLogger(__name__)

READ_BATCH_ROWS = 64 * 1024
"""Rows per record batch read from a data or delete file."""

ROW_GROUP_MAX_BYTES = 256 * 1024 * 1024
"""Arrow (in-memory) bytes buffered at most before a row group is written: a task's write memory.

A row group's rows are held as Arrow data until it is written, and each row group repeats
its columns' dictionaries, so fewer, larger row groups make smaller files: this bound lets a
row group reach Iceberg's default 128 MiB written at the compression ratios of typical
tables (about a third of the Arrow size), one row group for most files, as Iceberg writes them.
"""

EQUALITY_CHUNK_FACTOR = 4
"""Data rows matched per call against equality deletes, as a multiple of the delete rows.

Each call hashes the delete keys again; matching at least 4 data rows per delete row keeps
that from dominating when data files are small next to the delete set.
"""

EQUALITY_CHUNK_MAX_BYTES = 64 * 1024 * 1024
"""Arrow bytes of data rows collected at most before they are matched against equality deletes."""

ROLL_AT_FRACTION = 0.9
"""A file is closed once this fraction of the target size has been written to it."""


class RewriteError(RuntimeError):
    """A rewrite task cannot be carried out; nothing it wrote is left behind."""


class DeleteSetTooLarge(RewriteError):
    """The task's delete sets do not fit in `delete_memory_limit_bytes`."""


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
    rules) converted into positions. The data files stay as they are.

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
        for batch in source.batches(key_schema, READ_BATCH_ROWS):
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


class _PositionDeleteWriter:
    """Writes one position-delete file per data file, with full metrics: its ``file_path``
    bounds name the one data file, which keeps conflict checks and readers precise."""

    def __init__(self, io: FileIO, spec: RewriteTaskSpec) -> None:
        self._io = io
        self._directory = spec.output_dir.rstrip("/")
        self._prefix = spec.file_name_prefix
        options = _parquet_options(spec)
        # The table's codec and level; the rest of its write properties describe its data files.
        self._writer_options = options.writer_options(0, columns=False)
        self._arrow_schema = schema_to_pyarrow(POSITION_DELETE_SCHEMA)
        self._stats_plan = compute_statistics_plan(POSITION_DELETE_SCHEMA, POSITION_DELETE_METRICS)
        self._parquet_paths = parquet_path_to_id_mapping(POSITION_DELETE_SCHEMA)
        self.files: list[WrittenFile] = []
        self._created: list[str] = []

    def write(self, data_path: str, positions: pa.Array) -> None:
        """Write the position-delete file of `data_path` (`positions` sorted, distinct)."""
        path = f"{self._directory}/{self._prefix}-{len(self._created):05d}{MERGED_POSITIONS_SUFFIX}"
        rows = pa.table(
            {
                POS_DELETE_FILE_PATH: pa.array([data_path] * len(positions), pa.string()),
                POS_DELETE_POS: positions,
            },
            schema=self._arrow_schema,
        )
        stream = self._io.new_output(path).create(overwrite=False)
        self._created.append(path)
        with stream:
            writer = pq.ParquetWriter(
                cast(IO[Any], stream), schema=self._arrow_schema, **self._writer_options
            )
            writer.write_table(rows)
            writer.close()
            size = stream.tell()
        self.files.append(
            _written_file(
                path, size, writer, self._stats_plan, self._parquet_paths, {}, referenced_data_file=data_path
            )
        )

    def abort(self) -> None:
        """Delete every file this writer created."""
        _delete_created(self._io, self._created)


class _DeletionVectorWriter:
    """Writes one Puffin file per data file, holding its deletion vector: every position deleted
    from it, those of its earlier vector included, so it never has two."""

    def __init__(self, io: FileIO, spec: RewriteTaskSpec) -> None:
        self._io = io
        self._directory = spec.output_dir.rstrip("/")
        self._prefix = spec.file_name_prefix
        self.files: list[WrittenFile] = []
        self._created: list[str] = []

    def write(self, data_path: str, positions: pa.Array) -> None:
        """Write the deletion vector of `data_path` (`positions` sorted, distinct)."""
        path = f"{self._directory}/{self._prefix}-{len(self._created):05d}{MERGED_VECTOR_SUFFIX}"
        self._created.append(path)
        written = write_deletion_vector(self._io, path, data_path, positions)
        self.files.append(
            WrittenFile(
                path=path,
                content=1,
                referenced_data_file=data_path,
                content_offset=written.offset,
                content_size_in_bytes=written.length,
                record_count=written.cardinality,
                size_bytes=written.file_size,
                column_sizes={},
                value_counts={},
                null_value_counts={},
                nan_value_counts={},
                lower_bounds={},
                upper_bounds={},
                split_offsets=[],
            )
        )

    def abort(self) -> None:
        """Delete every file this writer created."""
        _delete_created(self._io, self._created)


def _widest_row_bytes(rows: pa.Table) -> float:
    """Arrow bytes per row of the widest column of `rows`."""
    widest: int = max((column.nbytes for column in rows.columns), default=0)
    rows_count: int = rows.num_rows
    return widest / max(rows_count, 1)


def _parquet_options(spec: RewriteTaskSpec) -> ParquetOptions:
    """How the task writes Parquet, from its codec and its table's write properties."""
    table_schema = Schema.model_validate_json(spec.table_schema_json)
    return task_parquet_options(spec.parquet_compression, spec.write_properties, table_schema)


def _written_file(
    path: str,
    size: int,
    writer: pq.ParquetWriter,
    stats_plan: dict[int, StatisticsCollector],
    parquet_paths: dict[str, int],
    nan_counts: dict[int, int],
    referenced_data_file: str | None = None,
) -> WrittenFile:
    """A closed file's `WrittenFile`, its metrics read from the writer's footer: a data file, or
    with `referenced_data_file`, the position-delete file of that one data file."""
    stats = data_file_statistics_from_parquet_metadata(writer.writer.metadata, stats_plan, parquet_paths)
    metrics = stats.to_serialized_dict()
    return WrittenFile(
        path=path,
        content=0 if referenced_data_file is None else 1,
        referenced_data_file=referenced_data_file,
        record_count=stats.record_count,
        size_bytes=size,
        column_sizes=stats.column_sizes,
        value_counts=stats.value_counts,
        null_value_counts=stats.null_value_counts,
        nan_value_counts=nan_counts,
        lower_bounds={k: v.hex() for k, v in metrics["lower_bounds"].items()},
        upper_bounds={k: v.hex() for k, v in metrics["upper_bounds"].items()},
        split_offsets=stats.split_offsets,
    )


def _delete_created(io: FileIO, created: list[str]) -> None:
    """Delete the files an aborted task's writer created, and forget them; a file that cannot be
    deleted is logged and left for orphan cleanup."""
    delete_paths(io, created, on_error=_warn_not_deleted)
    created.clear()


def _warn_not_deleted(path: str, exc: Exception) -> None:
    # An abort runs while another error is on its way out: warn, never raise over it.
    logger.warning("could not delete %s of an aborted task", path, exc_info=exc)


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


@dataclass(frozen=True)
class _Projection:
    """How the columns of files with one Parquet schema are read as a requested Iceberg schema."""

    projected: Schema
    columns: list[str]
    target: pa.Schema
    identity: bool
    """The file's columns already are the requested ones, in order, with the target Arrow types."""


@dataclass
class _SchemaResolver:
    """Field-id resolution of Parquet schemas against the table schema, done once per distinct file schema.

    The files of one task nearly always share a Parquet schema, and resolving it (pyiceberg's
    schema visitors) costs about as much as reading a small file's rows.
    """

    name_mapping: NameMapping | None
    _file_schemas: dict[str, Schema] = field(default_factory=dict)
    _projections: dict[tuple[str, int], tuple[Schema, _Projection]] = field(default_factory=dict)

    def file_schema(self, arrow_schema: pa.Schema) -> Schema:
        """The Iceberg schema of a file (ids from its field metadata, else the name mapping)."""
        key = _schema_key(arrow_schema)
        if key not in self._file_schemas:
            self._file_schemas[key] = pyarrow_to_schema(
                arrow_schema, self.name_mapping, downcast_ns_timestamp_to_us=True
            )
        return self._file_schemas[key]

    def projection(self, arrow_schema: pa.Schema, requested: Schema) -> _Projection:
        """How to read a file with this Arrow schema as `requested`."""
        # Keyed by id(): the entry holds `requested`, so its id cannot be reused while cached.
        key = (_schema_key(arrow_schema), id(requested))
        if key not in self._projections:
            projected = prune_columns(
                self.file_schema(arrow_schema), _selectable_ids(requested), select_full_types=False
            )
            # The projection keeps a file's string/large_string flavour; one Arrow type per field
            # lets batches of different files be compared and written together.
            target = schema_to_pyarrow(requested)
            columns = [column.name for column in projected.columns]
            read_types = pa.schema([arrow_schema.field(name) for name in columns])
            identity = _same_fields(projected, requested) and read_types.equals(target, check_metadata=False)
            self._projections[key] = (requested, _Projection(projected, columns, target, identity))
        return self._projections[key][1]


def _selectable_ids(schema: Schema) -> set[int]:
    """The schema's field ids that `prune_columns` may be asked for: a list or map is selected
    through its element, key and value ids, never by its own (pyiceberg refuses that)."""
    return {
        field_id
        for field_id in schema.field_ids
        if not isinstance(schema.find_type(field_id), ListType | MapType)
    }


def _schema_key(arrow_schema: pa.Schema) -> str:
    """A key telling Arrow schemas apart by their field ids too (Arrow's equality ignores metadata)."""
    return str(arrow_schema.to_string(truncate_metadata=False, show_schema_metadata=False))


def _same_fields(file_schema: Schema, requested: Schema) -> bool:
    """Whether two schemas have the same top-level fields in order: ids, names, types, requiredness."""
    return len(file_schema.columns) == len(requested.columns) and all(
        (a.field_id, a.name, a.field_type, a.required) == (b.field_id, b.name, b.field_type, b.required)
        for a, b in zip(file_schema.columns, requested.columns, strict=True)
    )


@dataclass(frozen=True)
class _Context:
    io: FileIO
    schema: Schema
    partition_spec: PartitionSpec
    resolver: _SchemaResolver


class _ParquetSource:
    """An open Parquet file whose columns are resolved against an Iceberg schema by field id."""

    def __init__(self, stream: InputStream, path: str, resolver: _SchemaResolver) -> None:
        self.path = path
        self.parquet = pq.ParquetFile(cast(Any, stream))
        self._resolver = resolver
        try:
            self.file_schema = resolver.file_schema(self.parquet.schema_arrow)
        except ValueError as exc:
            raise RewriteError(f"{path}: {exc}") from exc

    def batches(self, requested: Schema, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """Yield the file's rows in order as `schema_to_pyarrow(requested)` (absent optional fields null)."""
        projection = self._resolver.projection(self.parquet.schema_arrow, requested)
        for batch in _stream(self.parquet, batch_rows, projection.columns):
            if projection.identity:
                # Nothing to project: only the target's field metadata is attached.
                yield batch.cast(projection.target)
                continue
            try:
                shaped = to_requested_schema(requested, projection.projected, batch)
            except (ResolveError, ValueError) as exc:
                raise RewriteError(f"{self.path} cannot be read as the table schema: {exc}") from exc
            yield shaped.cast(projection.target)


def _stream(parquet: pq.ParquetFile, batch_rows: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """Record batches of a Parquet file, in row order, holding at most one row group in memory.

    A reader per row group: over the whole file, Arrow pre-buffers every row group's
    column chunks up front, i.e. reads the whole file into memory.
    """
    for row_group in range(parquet.num_row_groups):
        yield from parquet.iter_batches(batch_size=batch_rows, row_groups=[row_group], columns=columns)


def _column(data: pa.RecordBatch | pa.Table, accessor: Accessor) -> Any:
    """The leaf column an accessor points at, following struct nesting (a null struct gives null)."""
    path = [accessor.position]
    inner = accessor.inner
    while inner is not None:
        path.append(inner.position)
        inner = inner.inner
    column = data.column(path[0])
    return pc.struct_field(column, path[1:]) if len(path) > 1 else column


def _row_numbers(count: int) -> pa.Array:
    """The int64 sequence 0, 1, ..., count - 1, without a Python loop."""
    return pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), count), start=-1)


def _mask_at(indices: pa.Array, length: int) -> pa.BooleanArray:
    """A boolean mask of `length` rows, true at `indices`."""
    return pc.fill_null(pc.scatter(pa.repeat(True, len(indices)), indices, max_index=length - 1), False)


class _MemoryBudget:
    """Running estimate of the delete sets' memory, checked against the task's limit as they load."""

    def __init__(self, spec: RewriteTaskSpec, files: Sequence[InputDeleteFile]) -> None:
        self._spec = spec
        self._files = files
        self.used = 0

    def charge(self, nbytes: int, delete_file: InputDeleteFile) -> None:
        self.used += nbytes
        limit = self._spec.delete_memory_limit_bytes
        if self.used > limit:
            position = self._files.index(delete_file) + 1
            raise DeleteSetTooLarge(
                f"task {self._spec.task_id}: delete sets need more than delete_memory_limit_bytes={limit} "
                f"bytes of memory: {self.used} bytes loaded when reading {delete_file.path} "
                f"(delete file {position} of {len(self._files)}, "
                f"{sum(f.size_bytes for f in self._files)} bytes on disk in all)"
            )


@dataclass(frozen=True)
class _EqualityDeletes:
    """The rows of one equality delete file, projected onto the table schema."""

    sequence_number: int
    field_ids: tuple[int, ...]
    batches: list[pa.RecordBatch]


class _EqualityMatcher:
    """Null-safe membership test of data rows in the delete rows of one set of equality fields.

    Every delete column is reduced to its distinct values (a null included), and a data
    value is looked up by its index in them with `index_in(skip_nulls=False)`, so a null
    finds the null of the delete set exactly as a value finds its equal. A single column
    is then a plain `is_in`; several columns become tuples of those int32 indices, and a
    data row is deleted when its tuple is among the delete rows' tuples (a hash semi join).
    This is type-agnostic: no per-type sentinel stands in for null.
    """

    def __init__(self, accessors: list[Accessor], requested: Schema, deletes: list[_EqualityDeletes]) -> None:
        self._accessors = accessors
        delete_accessors = build_position_accessors(requested)
        columns = [
            pa.chunked_array(
                [_column(batch, delete_accessors[field_id]) for d in deletes for batch in d.batches],
                type=schema_to_pyarrow(requested.find_type(field_id)),
            )
            for field_id in deletes[0].field_ids
        ]
        self.delete_rows = len(columns[0])
        self._distinct = [pc.unique(column) for column in columns]
        self._key_names = [f"k{i}" for i in range(len(columns))]
        self._delete_keys: pa.Table | None = None
        if len(columns) > 1:
            keys = pa.table(
                {
                    name: pc.index_in(column, value_set=distinct, skip_nulls=False)
                    for name, column, distinct in zip(self._key_names, columns, self._distinct, strict=True)
                }
            )
            self._delete_keys = keys.group_by(self._key_names).aggregate([])

    def deleted(self, rows: pa.Table) -> pa.BooleanArray | pa.ChunkedArray:
        """Boolean mask of the rows equal to a delete row."""
        values = [_column(rows, accessor) for accessor in self._accessors]
        if self._delete_keys is None:
            return pc.is_in(values[0], value_set=self._distinct[0], skip_nulls=False)
        probe = {
            name: pc.index_in(value, value_set=distinct, skip_nulls=False)
            for name, value, distinct in zip(self._key_names, values, self._distinct, strict=True)
        }
        probe["row"] = _row_numbers(rows.num_rows)
        matched = pa.table(probe).join(self._delete_keys, keys=self._key_names, join_type="left semi")
        return _mask_at(matched.column("row").combine_chunks(), rows.num_rows)


@dataclass
class _DeleteIndex:
    """The delete sets of a task, looked up per data file by the sequence-number rules.

    Position deletes are kept only for the data files they apply to, so they need no
    sequence number here; equality deletes are filtered per data file.
    """

    schema: Schema
    positions: dict[str, list[pa.Array]] = field(default_factory=lambda: defaultdict(list))
    equality: list[_EqualityDeletes] = field(default_factory=list)
    bytes_read: int = 0
    _matchers_key: tuple[int, ...] | None = None
    _matchers: list[_EqualityMatcher] = field(default_factory=list)

    def positions_for(self, data_file: InputDataFile) -> pa.Array:
        """Sorted, distinct deleted row positions (int64) of a data file.

        Two position-delete files may name the same row (v2 allows it; Java's readers fold them
        into one bitmap): counted twice, the row would be one deleted row too many.
        """
        arrays = [positions.cast(pa.int64()) for positions in self.positions.get(data_file.path, [])]
        return pc.unique(pa.concat_arrays(arrays)).sort() if arrays else pa.array([], type=pa.int64())

    def matchers_for(
        self, data_file: InputDataFile, rows_schema: Schema | None = None
    ) -> list[_EqualityMatcher]:
        """One matcher per equality field set with deletes applying to a data file, for rows read
        as `rows_schema` (the table schema by default).

        The same list object is returned for consecutive data files to which the same
        equality delete files apply: building a matcher hashes every delete key, so it is
        rebuilt only when that set changes (once per distinct set when the data files come
        in sequence-number order). Only the latest set's matchers are kept in memory.
        """
        applying = [d for d in self.equality if data_file.data_sequence_number < d.sequence_number]
        rows_schema = rows_schema or self.schema
        key = (*(id(d) for d in applying), id(rows_schema))
        if key != self._matchers_key:
            by_ids: dict[tuple[int, ...], list[_EqualityDeletes]] = defaultdict(list)
            for deletes in applying:
                by_ids[deletes.field_ids].append(deletes)
            accessors = build_position_accessors(rows_schema)
            # Released before the next set is built, so two sets are never held at once.
            self._matchers = []
            self._matchers = [
                _EqualityMatcher(
                    [accessors[field_id] for field_id in field_ids],
                    prune_columns(self.schema, set(field_ids), select_full_types=False),
                    group,
                )
                for field_ids, group in by_ids.items()
            ]
            self._matchers_key = key
        return self._matchers


class _EqualityFilter:
    """Drops the rows equal to a delete row from batches on their way to the writer, many rows at a time.

    Matching hashes the delete keys on every call (`is_in`, `index_in` and hash joins keep
    no table between calls), which costs about as much as probing as many data rows. Data
    files are often far smaller than the delete set, so batches are collected, across data
    files with the same matchers, until they hold `EQUALITY_CHUNK_FACTOR` times the delete
    rows (at most `EQUALITY_CHUNK_MAX_BYTES` of Arrow data), and matched together.
    """

    def __init__(self, writer: _RollingParquetWriter) -> None:
        self._writer = writer
        self._matchers: list[_EqualityMatcher] = []
        self._chunk_rows = 0
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_rows = 0
        self._buffered_bytes = 0
        self.rows_deleted = 0

    def use(self, matchers: list[_EqualityMatcher]) -> None:
        """Match the batches written from now on against `matchers` (those buffered keep theirs)."""
        if matchers is self._matchers:
            return
        self.flush()
        self._matchers = matchers
        delete_rows = max((m.delete_rows for m in matchers), default=0)
        self._chunk_rows = max(READ_BATCH_ROWS, EQUALITY_CHUNK_FACTOR * delete_rows)

    def write(self, batch: pa.RecordBatch) -> None:
        """Pass a batch on, minus its deleted rows, now or with the next chunk."""
        if not self._matchers:
            self._writer.write(batch)
            return
        self._buffer.append(batch)
        self._buffered_rows += batch.num_rows
        self._buffered_bytes += batch.nbytes
        if self._buffered_rows >= self._chunk_rows or self._buffered_bytes >= EQUALITY_CHUNK_MAX_BYTES:
            self.flush()

    def flush(self) -> None:
        """Match what is buffered and write its surviving rows."""
        if not self._buffer:
            return
        chunk = pa.Table.from_batches(self._buffer)
        self._buffer = []
        self._buffered_rows = self._buffered_bytes = 0
        deleted = self._matchers[0].deleted(chunk)
        for matcher in self._matchers[1:]:
            deleted = pc.or_(deleted, matcher.deleted(chunk))
        dropped = pc.sum(deleted).as_py() or 0
        self.rows_deleted += dropped
        if dropped:
            # The mask has no nulls (null keys match null-safely); taking the kept rows in one
            # call copies them faster than filtering chunk by chunk.
            chunk = chunk.take(pc.indices_nonzero(pc.invert(deleted)))
        for batch in chunk.to_batches():
            self._writer.write(batch)


def _load_deletes(context: _Context, spec: RewriteTaskSpec) -> _DeleteIndex:
    index = _DeleteIndex(schema=context.schema)
    if not spec.data_files:
        return index
    oldest = min(f.data_sequence_number for f in spec.data_files)
    # A delete file that can apply to none of the task's data files is not read at all.
    needed = [
        d
        for d in spec.delete_files
        if (d.kind == FileKind.POSITION_DELETES and oldest <= d.data_sequence_number)
        or (d.kind == FileKind.EQUALITY_DELETES and oldest < d.data_sequence_number)
    ]
    budget = _MemoryBudget(spec, needed)
    for delete_file in needed:
        if delete_file.referenced_data_file is not None:
            _load_deletion_vector(context.io, delete_file, spec.data_files, index, budget)
        elif delete_file.kind == FileKind.POSITION_DELETES:
            targets = [
                f.path for f in spec.data_files if f.data_sequence_number <= delete_file.data_sequence_number
            ]
            _load_position_deletes(context.io, delete_file, targets, index, budget)
        else:
            index.equality.append(_load_equality_deletes(context, delete_file, budget))
        index.bytes_read += delete_file.size_bytes
    return index


def _load_position_deletes(
    io: FileIO,
    delete_file: InputDeleteFile,
    targets: list[str],
    index: _DeleteIndex,
    budget: _MemoryBudget,
) -> None:
    """Load the positions a delete file holds for `targets`, the data files it applies to."""
    with io.new_input(delete_file.path).open() as stream:
        parquet = pq.ParquetFile(cast(Any, stream))
        for batch in _stream(parquet, READ_BATCH_ROWS, [POS_DELETE_FILE_PATH, POS_DELETE_POS]):
            paths = batch.column(POS_DELETE_FILE_PATH)
            ours = pc.is_in(paths, value_set=pa.array(targets, type=paths.type))
            relevant = pa.Table.from_batches([batch]).filter(ours)
            if relevant.num_rows == 0:
                continue
            grouped = relevant.group_by(POS_DELETE_FILE_PATH).aggregate([(POS_DELETE_POS, "list")])
            lists = grouped.column(f"{POS_DELETE_POS}_list").combine_chunks()
            for i, path in enumerate(grouped.column(POS_DELETE_FILE_PATH).to_pylist()):
                positions = lists[i].values
                budget.charge(positions.nbytes, delete_file)
                index.positions[path].append(positions)


def _load_deletion_vector(
    io: FileIO,
    delete_file: InputDeleteFile,
    data_files: list[InputDataFile],
    index: _DeleteIndex,
    budget: _MemoryBudget,
) -> None:
    """Load a deletion vector's positions, if its data file is one of the task's it applies to."""
    target = delete_file.referenced_data_file
    if target is None or not any(
        f.path == target and f.data_sequence_number <= delete_file.data_sequence_number for f in data_files
    ):
        return
    if delete_file.content_offset is None or delete_file.content_size_in_bytes is None:
        raise RewriteError(f"deletion vector {delete_file.path} has no blob location")
    try:
        positions = read_deletion_vector(
            io, delete_file.path, delete_file.content_offset, delete_file.content_size_in_bytes
        )
    except DeletionVectorError as exc:
        raise RewriteError(str(exc)) from exc
    budget.charge(positions.nbytes, delete_file)
    index.positions[target].append(positions)


def _load_equality_deletes(
    context: _Context, delete_file: InputDeleteFile, budget: _MemoryBudget
) -> _EqualityDeletes:
    field_ids = tuple(sorted(set(delete_file.equality_ids)))
    if not field_ids:
        raise RewriteError(f"equality delete file {delete_file.path} has no equality_ids")
    reachable = build_position_accessors(context.schema)
    unknown = [i for i in field_ids if i not in reachable]
    if unknown:
        raise RewriteError(
            f"equality delete file {delete_file.path}: field ids {unknown} are not top-level or "
            "struct-nested columns of the current table schema"
        )
    requested = prune_columns(context.schema, set(field_ids), select_full_types=False)
    batches: list[pa.RecordBatch] = []
    with context.io.new_input(delete_file.path).open() as stream:
        source = _ParquetSource(stream, delete_file.path, context.resolver)
        # A missing column would read as null and delete every row whose value is null.
        absent = [i for i in field_ids if i not in source.file_schema.field_ids]
        if absent:
            raise RewriteError(f"equality delete file {delete_file.path} lacks equality field ids {absent}")
        for batch in source.batches(requested, READ_BATCH_ROWS):
            budget.charge(batch.nbytes, delete_file)
            batches.append(batch)
    return _EqualityDeletes(delete_file.data_sequence_number, field_ids, batches)


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
        for batch in source.batches(lineage_schema or context.schema, READ_BATCH_ROWS):
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


@dataclass
class _OpenFile:
    path: str
    stream: OutputStream
    writer: pq.ParquetWriter
    nan_counts: dict[int, int]


class _RollingParquetWriter:
    """Writes record batches into Parquet files of about the target size, rolling to a new file as needed.

    Sizes are measured on what is actually written: the output stream's position after each row group.
    Rows are buffered up to the point where, at the compression ratio observed so far in this task, the
    file would reach the target; that row group is then written (a batch is sliced to fit), and the file
    is closed once its real size reaches `ROLL_AT_FRACTION` of the target. A row group also never buffers
    more than `ROW_GROUP_MAX_BYTES` of Arrow data, nor more than ``write.parquet.row-group-size-bytes``
    (Iceberg's default, 128 MiB, when the table sets none) of written bytes at the same ratio. Before the
    first row group the ratio is the inputs' (their stored bytes per row against the Arrow bytes per row
    of the first batch), at most 1.0. Each file's writer options come from the table's write properties
    (`ParquetOptions`) and its column encodings from its first row group (`choose_encodings`).
    """

    def __init__(self, io: FileIO, spec: RewriteTaskSpec, schema: Schema) -> None:
        self._io = io
        self._directory = spec.output_dir.rstrip("/")
        self._prefix = spec.file_name_prefix
        self._target = spec.target_file_size_bytes
        self._options = _parquet_options(spec)
        # Stored bytes per row of the inputs: how many rows a row group will hold, before this
        # task has written any (what bloom filters are sized for).
        input_rows = sum(f.record_count for f in spec.data_files)
        self._input_row_bytes = sum(f.size_bytes for f in spec.data_files) / input_rows if input_rows else 0.0
        self._arrow_schema = schema_to_pyarrow(schema)
        # By field id: the table's metrics modes name its columns as the table does.
        table_schema = Schema.model_validate_json(spec.table_schema_json)
        self._stats_plan = compute_statistics_plan(
            with_lineage(table_schema) if spec.format_version >= ROW_LINEAGE_VERSION else table_schema,
            self._options.metrics_properties,
        )
        self._parquet_paths = parquet_path_to_id_mapping(schema)
        self._nan_columns = {
            field_id: accessor
            for field_id, accessor in build_position_accessors(schema).items()
            if isinstance(schema.find_type(field_id), FloatType | DoubleType)
        }
        self._created: list[str] = []
        self._files: list[WrittenFile] = []
        self._open: _OpenFile | None = None
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_bytes = 0
        self._flushed_arrow_bytes = 0
        self._flushed_file_bytes = 0
        # With an output order, rows go through the sort buffer, which hands them back in order.
        self._ordered = OrderedRows(spec.output_order, schema, self._write) if spec.output_order else None

    def write(self, batch: pa.RecordBatch) -> None:
        """Add rows; row groups and files are written as they fill up (in order, if the task has one)."""
        if self._ordered is not None:
            self._ordered.add(batch)
        else:
            self._write(batch)

    def _write(self, batch: pa.RecordBatch) -> None:
        while batch.num_rows > 0:
            row_bytes = max(batch.nbytes / batch.num_rows, 1.0)
            ratio = self._compression_ratio(row_bytes)
            written = self._open.stream.tell() if self._open is not None else 0
            row_group_limit = min(float(ROW_GROUP_MAX_BYTES), self._options.row_group_bytes / ratio)
            room = min(
                (self._target - written) / ratio - self._buffered_bytes,
                row_group_limit - self._buffered_bytes,
            )
            # At least one row goes into an empty buffer, so every pass makes progress.
            fitting = max(math.ceil(room / row_bytes), 0 if self._buffer else 1)
            if fitting >= batch.num_rows:
                self._buffer_rows(batch)
                return
            if fitting > 0:
                self._buffer_rows(batch.slice(0, fitting))
                batch = batch.slice(fitting)
            self._flush_row_group()

    def _compression_ratio(self, arrow_row_bytes: float) -> float:
        """Written bytes per Arrow byte: what this task's row groups have shown, or before any,
        the inputs' (stored bytes per row / `arrow_row_bytes`, at most 1.0: inputs compressed
        much better than floe writes would make the first row group overshoot)."""
        if self._flushed_arrow_bytes:
            return self._flushed_file_bytes / self._flushed_arrow_bytes
        if self._input_row_bytes <= 0:
            return 1.0
        return min(1.0, self._input_row_bytes / arrow_row_bytes)

    def finish(self) -> list[WrittenFile]:
        """Write what is buffered, close the last file and return every file written."""
        if self._ordered is not None:
            self._ordered.flush()
        self._flush_row_group()
        if self._open is not None:
            self._close_file(self._open)
        return self._files

    def abort(self) -> None:
        """Close the open file, if any, and delete every file this writer created."""
        if self._open is not None:
            current, self._open = self._open, None
            # The writer first: left open, it would write its footer to a closed stream when collected.
            for close in (current.writer.close, current.stream.close):
                try:
                    close()
                except Exception:
                    logger.warning("could not close %s while aborting", current.path, exc_info=True)
        _delete_created(self._io, self._created)

    def _buffer_rows(self, batch: pa.RecordBatch) -> None:
        self._buffer.append(batch)
        self._buffered_bytes += batch.nbytes

    def _flush_row_group(self) -> None:
        if not self._buffer:
            return
        table = pa.Table.from_batches(self._buffer)
        current = self._open if self._open is not None else self._open_file(table)
        before = current.stream.tell()
        current.writer.write_table(table, row_group_size=table.num_rows)
        self._flushed_file_bytes += current.stream.tell() - before
        self._flushed_arrow_bytes += self._buffered_bytes
        for field_id, accessor in self._nan_columns.items():
            nans = pc.sum(pc.is_nan(_column(table, accessor))).as_py() or 0
            current.nan_counts[field_id] += int(nans)
        self._buffer = []
        self._buffered_bytes = 0
        if current.stream.tell() >= ROLL_AT_FRACTION * self._target:
            self._close_file(current)

    def _expected_rows(self, first: pa.Table) -> int:
        """Rows the row groups of a new file may hold: twice what a row group of the size limit
        holds at the inputs' bytes per row (compression varies from file to file), and never
        fewer than the first row group's."""
        limit = min(self._target, self._options.row_group_bytes)
        estimate = 2 * limit / self._input_row_bytes if self._input_row_bytes else 0
        return max(int(first.num_rows), int(estimate))

    def _open_file(self, first: pa.Table) -> _OpenFile:
        """A new file, its encodings chosen on `first`, its first row group's rows."""
        path = f"{self._directory}/{self._prefix}-{len(self._created):05d}.parquet"
        # No overwrite: an existing file here may belong to a committed snapshot.
        stream = self._io.new_output(path).create(overwrite=False)
        self._created.append(path)
        try:
            encodings = choose_encodings(first, self._options.writer_options(0, columns=False))
            writer = pq.ParquetWriter(
                cast(IO[Any], stream),
                schema=self._arrow_schema,
                store_decimal_as_integer=True,
                **self._options.writer_options(self._expected_rows(first), True, _widest_row_bytes(first)),
                **encodings.writer_options(),
            )
        except BaseException:
            stream.close()
            raise
        self._open = _OpenFile(path, stream, writer, dict.fromkeys(self._nan_columns, 0))
        return self._open

    def _close_file(self, current: _OpenFile) -> None:
        current.writer.close()
        size = current.stream.tell()
        current.stream.close()
        self._open = None
        self._files.append(
            _written_file(
                current.path, size, current.writer, self._stats_plan, self._parquet_paths, current.nan_counts
            )
        )
