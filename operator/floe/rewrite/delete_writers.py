"""The writers of a positions task: one position-delete file, or one deletion vector (v3), per
data file whose deletes it merges."""

from __future__ import annotations

from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)

from floe.planning.files import MERGED_POSITIONS_SUFFIX, MERGED_VECTOR_SUFFIX
from floe.protocol.rewrite_task import (
    RewriteTaskSpec,
    WrittenFile,
)
from floe.rewrite.data_writer import _delete_created, _parquet_options, _written_file
from floe.tables.deletion_vectors import (
    write_deletion_vector,
)
from floe.tables.writer import (
    POS_DELETE_FILE_PATH,
    POS_DELETE_POS,
    POSITION_DELETE_METRICS,
    POSITION_DELETE_SCHEMA,
)


class _PositionDeleteWriter:
    """Writes one position-delete file per data file, with full metrics: its ``file_path``
    bounds name the one data file, which keeps conflict checks and readers precise."""

    def __init__(self, io: FileIO, spec: RewriteTaskSpec) -> None:
        self._io = io
        self._directory = spec.output_dir.rstrip("/")
        self._prefix = spec.file_name_prefix
        options = _parquet_options(spec)
        # The table's codec and level; the rest of its write properties describe its data files.
        # Positions are sorted: delta-encoded they take under half a byte each at CDC densities,
        # against two with the codec alone, and a conversion rewrites every position of its
        # data file each time.
        self._writer_options = options.writer_options(0, columns=False) | {
            "use_dictionary": [POS_DELETE_FILE_PATH],
            "column_encoding": {POS_DELETE_POS: "DELTA_BINARY_PACKED"},
        }
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
