"""Reading a task's Parquet files: projected onto the table's current schema by field id,
streamed one record batch at a time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import ResolveError
from pyiceberg.io import FileIO, InputStream
from pyiceberg.io.pyarrow import (
    pyarrow_to_schema,
    schema_to_pyarrow,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Accessor, Schema, prune_columns
from pyiceberg.table.name_mapping import NameMapping
from pyiceberg.types import ListType, MapType

from floe.rewrite.errors import RewriteError
from floe.tables.pyiceberg_compat import to_requested_schema


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
