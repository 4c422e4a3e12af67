"""The deletes of a rewrite task: position deletes and deletion vectors by data file, equality
deletes matched against the rows streamed past them, all within the task's delete memory."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    schema_to_pyarrow,
)
from pyiceberg.schema import Accessor, Schema, build_position_accessors, prune_columns

from floe.planning.files import FileKind
from floe.protocol.rewrite_task import (
    InputDataFile,
    InputDeleteFile,
    RewriteTaskSpec,
)
from floe.rewrite import limits
from floe.rewrite.data_writer import _RollingParquetWriter
from floe.rewrite.errors import DeleteSetTooLarge, RewriteError
from floe.rewrite.source import _column, _Context, _mask_at, _ParquetSource, _row_numbers, _stream
from floe.tables.deletion_vectors import (
    DeletionVectorError,
    read_deletion_vector,
)
from floe.tables.writer import (
    POS_DELETE_FILE_PATH,
    POS_DELETE_POS,
)


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
    kept: dict[str, list[pa.Array]] = field(default_factory=lambda: defaultdict(list))
    """The positions of the kept position-delete files (`InputDeleteFile.kept`), by data file."""
    equality: list[_EqualityDeletes] = field(default_factory=list)
    bytes_read: int = 0
    _matchers_key: tuple[int, ...] | None = None
    _matchers: list[_EqualityMatcher] = field(default_factory=list)

    def positions_for(self, data_file: InputDataFile) -> pa.Array:
        """Sorted, distinct deleted row positions (int64) of a data file.

        Two position-delete files may name the same row (v2 allows it; Java's readers fold them
        into one bitmap): counted twice, the row would be one deleted row too many.
        """
        return _distinct(self.positions.get(data_file.path, []))

    def kept_for(self, data_file: InputDataFile) -> pa.Array:
        """Sorted, distinct row positions (int64) the task's kept files delete from a data file."""
        return _distinct(self.kept.get(data_file.path, []))

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
        self._chunk_rows = max(limits.READ_BATCH_ROWS, limits.EQUALITY_CHUNK_FACTOR * delete_rows)

    def write(self, batch: pa.RecordBatch) -> None:
        """Pass a batch on, minus its deleted rows, now or with the next chunk."""
        if not self._matchers:
            self._writer.write(batch)
            return
        self._buffer.append(batch)
        self._buffered_rows += batch.num_rows
        self._buffered_bytes += batch.nbytes
        if self._buffered_rows >= self._chunk_rows or self._buffered_bytes >= limits.EQUALITY_CHUNK_MAX_BYTES:
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


def _distinct(arrays: list[pa.Array]) -> pa.Array:
    if not arrays:
        return pa.array([], type=pa.int64())
    return pc.unique(pa.concat_arrays([a.cast(pa.int64()) for a in arrays])).sort()


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
            into = index.kept if delete_file.kept else index.positions
            _load_position_deletes(context.io, delete_file, targets, into, budget)
        else:
            index.equality.append(_load_equality_deletes(context, delete_file, budget))
        index.bytes_read += delete_file.size_bytes
    return index


def _load_position_deletes(
    io: FileIO,
    delete_file: InputDeleteFile,
    targets: list[str],
    into: dict[str, list[pa.Array]],
    budget: _MemoryBudget,
) -> None:
    """Load the positions a delete file holds for `targets`, the data files it applies to, into
    `into` by data file."""
    with io.new_input(delete_file.path).open() as stream:
        parquet = pq.ParquetFile(cast(Any, stream))
        for batch in _stream(parquet, limits.READ_BATCH_ROWS, [POS_DELETE_FILE_PATH, POS_DELETE_POS]):
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
                into[path].append(positions)


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
        for batch in source.batches(requested, limits.READ_BATCH_ROWS):
            budget.charge(batch.nbytes, delete_file)
            batches.append(batch)
    return _EqualityDeletes(delete_file.data_sequence_number, field_ids, batches)
