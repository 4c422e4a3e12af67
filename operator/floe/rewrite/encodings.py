"""Parquet encodings chosen per column from the data itself.

pyarrow dictionary-encodes every column unless told otherwise, and keeps doing so on columns
of mostly distinct values, where the dictionary only adds bytes; parquet-mr falls back to
plain values once a dictionary stops paying. floe does better than either: for each column
of a new file it writes a sample of the file's first rows once per encoding the column's type
allows, compressed as the file will be, and keeps the smallest.

The candidates are the encodings every reader of Iceberg tables reads: dictionary and plain
for all, and delta-binary-packed for integers, dates, times and timestamps. Iceberg 1.10's
vectorized reader (Spark's default) refuses byte-stream-split floats and the delta byte-array
encodings of strings ("Cannot support vectorized reads ... with encoding"), so floe never
writes them. Nested columns and other types keep pyarrow's default (dictionary).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SAMPLE_ROWS = 16_384
"""Rows of the first row group the choice is made on; their order is kept (delta encodings
depend on it)."""
MIN_GAIN = 0.02
"""A column leaves the dictionary only for an encoding at least this much smaller, so that
near ties keep the encoding every reader has read longest."""
DICTIONARY = "DICTIONARY"
_INTEGER_LIKE: tuple[Callable[[pa.DataType], bool], ...] = (
    pa.types.is_integer,
    pa.types.is_date,
    pa.types.is_time,
    pa.types.is_timestamp,
)
_STRING_LIKE: tuple[Callable[[pa.DataType], bool], ...] = (
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
)


@dataclass(frozen=True)
class ColumnEncodings:
    """The encoding of each column of a file: dictionary, or the named one."""

    dictionary: tuple[str, ...]
    """Column paths (nested ones included) that use a dictionary."""
    encodings: dict[str, str] = field(default_factory=dict)
    """Column → encoding, for the top-level columns that do not."""

    def writer_options(self) -> dict[str, Any]:
        """Keyword arguments of `pyarrow.parquet.ParquetWriter`."""
        options: dict[str, Any] = {"use_dictionary": list(self.dictionary)}
        if self.encodings:
            options["column_encoding"] = dict(self.encodings)
        return options


def candidates(data_type: pa.DataType) -> tuple[str, ...]:
    """The encodings tried for a top-level column of `data_type`; empty: pyarrow's default."""
    if any(check(data_type) for check in _INTEGER_LIKE):
        return (DICTIONARY, "PLAIN", "DELTA_BINARY_PACKED")
    if pa.types.is_floating(data_type) or any(check(data_type) for check in _STRING_LIKE):
        return (DICTIONARY, "PLAIN")
    return ()


def choose_encodings(rows: pa.Table, compression: Mapping[str, Any]) -> ColumnEncodings:
    """Each column's smallest encoding on the first `SAMPLE_ROWS` of `rows`, written with
    `compression` (the writer's ``compression`` and ``compression_level`` options)."""
    sample = rows.slice(0, SAMPLE_ROWS)
    dictionary: list[str] = []
    encodings: dict[str, str] = {}
    for name in sample.column_names:
        column = sample.select([name])
        tried = candidates(column.schema.field(name).type)
        if not tried:
            dictionary.extend(_leaf_paths(column))
            continue
        sizes = {encoding: _written_size(column, encoding, compression) for encoding in tried}
        best = min(sizes, key=lambda encoding: sizes[encoding])
        if sizes[best] > (1 - MIN_GAIN) * sizes[DICTIONARY]:
            best = DICTIONARY
        if best == DICTIONARY:
            dictionary.append(name)
        else:
            encodings[name] = best
    return ColumnEncodings(tuple(dictionary), encodings)


def _written_size(column: pa.Table, encoding: str, compression: Mapping[str, Any]) -> int:
    buffer = io.BytesIO()
    name = column.column_names[0]
    options: dict[str, Any] = dict(compression)
    if encoding == DICTIONARY:
        options["use_dictionary"] = True
    else:
        options["use_dictionary"] = False
        options["column_encoding"] = {name: encoding}
    pq.write_table(column, buffer, **options)
    return buffer.tell()


def _leaf_paths(column: pa.Table) -> list[str]:
    """The Parquet column paths of a (possibly nested) column, as pyarrow names them."""
    buffer = io.BytesIO()
    pq.write_table(column.slice(0, 0), buffer)
    schema = pq.ParquetFile(io.BytesIO(buffer.getvalue())).schema
    return [schema.column(i).path for i in range(len(schema))]
