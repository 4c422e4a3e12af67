"""The rolling Parquet writer of a rewrite task: rows in, target-sized data files out, each
described (`WrittenFile`) by the metrics of its footer."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, OutputStream
from pyiceberg.io.pyarrow import (
    StatisticsCollector,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.schema import Schema, build_position_accessors
from pyiceberg.types import DoubleType, FloatType

from floe.kit.files import delete_paths
from floe.protocol.rewrite_task import (
    RewriteTaskSpec,
    WrittenFile,
)
from floe.rewrite import limits
from floe.rewrite.encodings import choose_encodings
from floe.rewrite.layout import OrderedRows
from floe.rewrite.lineage import with_lineage
from floe.rewrite.parquet_options import ParquetOptions, task_parquet_options
from floe.rewrite.source import _column
from floe.tables.pyiceberg_compat import ROW_LINEAGE_VERSION

logger = logging.getLogger(__name__)


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
            row_group_limit = min(float(limits.ROW_GROUP_MAX_BYTES), self._options.row_group_bytes / ratio)
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
        if current.stream.tell() >= limits.ROLL_AT_FRACTION * self._target:
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
