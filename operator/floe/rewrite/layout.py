"""The order of a task's output rows: the table's Iceberg sort order, or a z-order curve.

On the driver, `floe.optimizing.specs.output_order` turns the table's sort order, or the
spec's clustering, into the `OutputOrder` every task of a process carries. In the Spark task, `OrderedRows`
buffers the rows that survive the deletes and hands them to the rolling writer sorted,
so each output file holds a narrow slice of the order and the files' ranges on the
ordering columns barely overlap.

Memory: rows are buffered as Arrow batches up to `SORT_RUN_MAX_BYTES`, which a task of
the default 128 MB of Parquet stays under; a larger task is sorted in runs of that size
(each run's files are sorted, runs overlap each other). Beside the buffer, only the sort
keys and a permutation are allocated, and the rows are taken out `TAKE_ROWS` at a time,
so no whole sorted copy of the buffer exists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Accessor, Schema, build_position_accessors
from pyiceberg.table.sorting import NullOrder, SortDirection, SortOrder

from floe.planning.config import MiB
from floe.protocol.rewrite_task import OutputOrder

SORT_RUN_MAX_BYTES = 1024 * MiB
"""Arrow bytes of rows buffered at most before they are sorted and written as one run."""

TAKE_ROWS = 64 * 1024
"""Rows gathered at a time from the buffer in sorted order."""

_SIGN = np.uint64(1 << 63)
_PREFIX_BYTES = 8
_Codes = npt.NDArray[np.uint64]


class OrderedRows:
    """Buffers a task's rows and emits them in the task's output order.

    `add` emits a sorted run once `SORT_RUN_MAX_BYTES` are buffered; `flush` emits the
    rest. The emitted batches are slices of at most `TAKE_ROWS` rows.
    """

    def __init__(self, order: OutputOrder, schema: Schema, emit: Callable[[pa.RecordBatch], None]) -> None:
        self._emit = emit
        accessors = build_position_accessors(schema)
        self._sort_order: list[_SortKey] = []
        self._zorder: list[Accessor] = [accessors[field_id] for field_id in order.zorder_field_ids]
        if order.sort_order_json is not None:
            sort_order = SortOrder.model_validate_json(order.sort_order_json)
            self._sort_order = [
                _SortKey(
                    accessor=accessors[f.source_id],
                    transform=f.transform.pyarrow_transform(schema.find_type(f.source_id)),
                    ascending=f.direction == SortDirection.ASC,
                    nulls_first=f.null_order == NullOrder.NULLS_FIRST,
                )
                for f in sort_order.fields
            ]
        self._batches: list[pa.RecordBatch] = []
        self._buffered_bytes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Buffer rows; a full buffer is emitted as one sorted run."""
        if batch.num_rows == 0:
            return
        self._batches.append(batch)
        self._buffered_bytes += batch.nbytes
        if self._buffered_bytes >= SORT_RUN_MAX_BYTES:
            self.flush()

    def flush(self) -> None:
        """Emit every buffered row in order and empty the buffer."""
        if not self._batches:
            return
        rows = pa.Table.from_batches(self._batches)
        self._batches = []
        self._buffered_bytes = 0
        permutation = self._permutation(rows)
        for start in range(0, rows.num_rows, TAKE_ROWS):
            for batch in rows.take(permutation.slice(start, TAKE_ROWS)).to_batches():
                self._emit(batch)

    def _permutation(self, rows: pa.Table) -> pa.Array:
        if self._zorder:
            codes = zorder_codes([_leaf(rows, accessor) for accessor in self._zorder])
            return pc.sort_indices(pa.array(codes))
        columns: dict[str, pa.ChunkedArray | pa.Array] = {}
        keys: list[tuple[str, str]] = []
        for i, key in enumerate(self._sort_order):
            values = key.transform(_leaf(rows, key.accessor))
            direction = "ascending" if key.ascending else "descending"
            # pyarrow places nulls (and NaNs) by one option for all keys while Iceberg's
            # null order is per field: a key of its own puts a field's nulls first or last.
            columns[f"null{i}"] = pc.is_valid(values) if key.nulls_first else pc.is_null(values)
            keys.append((f"null{i}", "ascending"))
            if pa.types.is_floating(values.type):
                # Iceberg orders NaN above every number, so it comes last ascending, first descending.
                columns[f"nan{i}"] = pc.fill_null(pc.is_nan(values), False)
                keys.append((f"nan{i}", direction))
            columns[f"value{i}"] = values
            keys.append((f"value{i}", direction))
        # sort_indices is stable: rows equal on every key keep their input order.
        return pc.sort_indices(pa.table(columns), sort_keys=keys)


@dataclass(frozen=True)
class _SortKey:
    accessor: Accessor
    transform: Callable[[pa.ChunkedArray], pa.ChunkedArray]
    ascending: bool
    nulls_first: bool


def _leaf(rows: pa.Table, accessor: Accessor) -> pa.ChunkedArray:
    """The column an accessor points at, descending into structs."""
    column = rows.column(accessor.position)
    inner = accessor.inner
    while inner is not None:
        column = pc.struct_field(column, [inner.position])
        inner = inner.inner
    return column


def zorder_codes(columns: Sequence[pa.ChunkedArray | pa.Array]) -> _Codes:
    """Morton codes of the rows of `columns` (equal lengths, 1 to 8 columns), as uint64.

    Each column is mapped to an order-preserving unsigned integer, rebased on its
    smallest value and shifted right until its range fits in 64 / len(columns) bits, so
    every column gets the same share of the code whatever its range; the codes
    interleave those bits, most significant first. Nulls get the smallest value.
    """
    bits = 64 // len(columns)
    scaled = [_scaled(*_ordered_uint64(column), bits) for column in columns]
    codes = np.zeros(len(columns[0]), dtype=np.uint64)
    one = np.uint64(1)
    for bit in range(bits - 1, -1, -1):
        shift = np.uint64(bit)
        for values in scaled:
            codes = (codes << one) | ((values >> shift) & one)
    return codes


def _scaled(values: _Codes, valid: npt.NDArray[np.bool_], bits: int) -> _Codes:
    present = values[valid]
    if present.size == 0:
        return np.zeros(values.shape, dtype=np.uint64)
    low = present.min()
    shift = np.uint64(max(int(present.max() - low).bit_length() - bits, 0))
    # Null positions may hold values below `low`; their wrapped differences are discarded.
    return np.where(valid, (values - low) >> shift, np.uint64(0))


def _ordered_uint64(column: pa.ChunkedArray | pa.Array) -> tuple[_Codes, npt.NDArray[np.bool_]]:
    """Unsigned integers in the same order as the column's values, and which rows are not null."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind):
        return _prefix_uint64(array), valid
    if pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return _prefix_uint64(array), valid
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        floats = pc.fill_null(array.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        raw = np.ascontiguousarray(floats, dtype=np.float64).view(np.uint64)
        # IEEE 754 bits: flipping every bit of a negative number and the sign bit of a
        # positive one makes their unsigned order the numeric order.
        return np.where(raw >= _SIGN, ~raw, raw | _SIGN), valid
    if pa.types.is_boolean(kind):
        return pc.fill_null(array, False).cast(pa.uint64()).to_numpy(zero_copy_only=False), valid
    if pa.types.is_date32(kind):
        array = array.cast(pa.int32())
    # Integers, dates, times and timestamps: offsetting the sign bit orders negatives first.
    ints = pc.fill_null(array.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(ints, dtype=np.int64).view(np.uint64) ^ _SIGN, valid


def _prefix_uint64(array: pa.Array) -> _Codes:
    """The first 8 bytes, big-endian, of each value after the prefix all values share."""
    binary = array.cast(pa.large_binary())
    bounds = pc.min_max(binary)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    skip = 0
    if low is not None and high is not None:
        # Every value sorts between the smallest and the largest, so they all share these
        # two's common prefix, which orders nothing: the bytes after it are the ones that count.
        while skip < min(len(low), len(high)) and low[skip] == high[skip]:
            skip += 1
    heads = pc.fill_null(pc.binary_slice(binary, skip, skip + _PREFIX_BYTES), b"")
    offsets_buffer, data_buffer = heads.buffers()[1:3]
    codes = np.zeros(len(heads), dtype=np.uint64)
    if data_buffer is None or data_buffer.size == 0:
        return codes
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[heads.offset : heads.offset + len(heads) + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    for index in range(_PREFIX_BYTES):
        present = lengths > index
        byte = np.where(present, data[np.where(present, starts + index, 0)], 0).astype(np.uint64)
        codes = (codes << np.uint64(8)) | byte
    return codes
