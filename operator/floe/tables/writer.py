"""Write Iceberg data and delete files without committing them (see `floe.commit.row_delta`).

CDC-style writers write delete files: the demo and the tests use these writers to produce
upserts (equality delete + insert in one snapshot) and the position deletes that optimizing
must then apply. Data retention writes its position deletes here too, as deletion vectors on a
format v3 table.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pyarrow as pa
from pyiceberg.io.pyarrow import (
    ParquetFormatWriter,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from floe.tables.deletion_vectors import deletion_vector_data_file, write_deletion_vector
from floe.tables.pyiceberg_compat import dataframe_to_data_files, determine_partitions

POS_DELETE_FILE_PATH_ID = 2147483546
"""Iceberg's reserved field id of the ``file_path`` column of position-delete files."""
POS_DELETE_POS_ID = 2147483545
"""Iceberg's reserved field id of the ``pos`` column of position-delete files."""
POS_DELETE_FILE_PATH = "file_path"
POS_DELETE_POS = "pos"
POSITION_DELETE_SCHEMA = Schema(
    NestedField(POS_DELETE_FILE_PATH_ID, POS_DELETE_FILE_PATH, StringType(), required=True),
    NestedField(POS_DELETE_POS_ID, POS_DELETE_POS, LongType(), required=True),
)
POSITION_DELETE_METRICS = {"write.metadata.metrics.default": "full"}
"""Metrics of position-delete files floe writes: full bounds, so ``file_path``'s name the data file."""


def _delete_path(table: Table, spec_id: int, partition: Record, suffix: str = ".parquet") -> str:
    metadata = table.metadata
    root = metadata.properties.get("write.data.path", f"{metadata.location.rstrip('/')}/data")
    spec = metadata.specs()[spec_id]
    partition_path = "" if spec.is_unpartitioned() else spec.partition_to_path(partition, metadata.schema())
    directory = f"{root}/{partition_path}" if partition_path else root
    return f"{directory}/{uuid.uuid4()}-deletes{suffix}"


def _write(
    table: Table,
    schema: Schema,
    rows: pa.Table,
    content: DataFileContent,
    spec_id: int,
    partition: Record,
    equality_ids: list[int] | None,
) -> DataFile:
    if rows.num_rows == 0:
        raise ValueError("a delete file needs at least one row")
    arrow_schema = schema_to_pyarrow(schema)
    rows = rows.select([f.name for f in arrow_schema]).cast(arrow_schema)
    path = _delete_path(table, spec_id, partition)
    output = table.io.new_output(path)
    writer = ParquetFormatWriter(output, schema, table.metadata.properties)
    writer.write(rows)
    statistics = writer.close()
    data_file = DataFile.from_args(
        content=content,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        file_size_in_bytes=len(output),
        sort_order_id=None,
        equality_ids=equality_ids,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
    # spec_id is not a field of the Avro struct, so from_args ignores it.
    data_file.spec_id = spec_id
    return data_file


def write_equality_deletes(
    table: Table, rows: pa.Table, equality_columns: Sequence[str], spec_id: int, partition: Record
) -> DataFile:
    """An equality-delete file: every row of `rows` deletes the rows with equal key columns."""
    schema = table.schema().select(*equality_columns)
    ids = [f.field_id for f in schema.fields]
    return _write(table, schema, rows, DataFileContent.EQUALITY_DELETES, spec_id, partition, ids)


def write_equality_deletes_by_partition(
    table: Table, rows: pa.Table, equality_columns: Sequence[str]
) -> list[DataFile]:
    """Equality deletes for full rows of the table, one file per partition of the default spec.

    `rows` must carry the partition source columns so each delete lands in the partition
    of the rows it deletes (a partitioned equality delete applies only there).
    """
    metadata = table.metadata
    spec = metadata.spec()
    if spec.is_unpartitioned():
        return [
            write_equality_deletes(
                table, rows.select(list(equality_columns)), equality_columns, spec.spec_id, Record()
            )
        ]
    return [
        write_equality_deletes(
            table,
            part.arrow_table_partition.select(list(equality_columns)),
            equality_columns,
            spec.spec_id,
            part.partition_key.partition,
        )
        for part in determine_partitions(spec, metadata.schema(), conform(table, rows))
    ]


def write_position_deletes(
    table: Table, positions: Sequence[tuple[str, int]], spec_id: int, partition: Record
) -> DataFile:
    """A position-delete file removing row `pos` (0-based) of data file `file_path`."""
    ordered = sorted(positions)
    rows = pa.table(
        {
            POS_DELETE_FILE_PATH: pa.array([p for p, _ in ordered], pa.string()),
            POS_DELETE_POS: pa.array([n for _, n in ordered], pa.int64()),
        }
    )
    return _write(
        table, POSITION_DELETE_SCHEMA, rows, DataFileContent.POSITION_DELETES, spec_id, partition, None
    )


def write_deletion_vector_file(table: Table, data_file: DataFile, positions: pa.Array) -> DataFile:
    """A Puffin file holding the deletion vector of `data_file` (format v3): `positions`, which
    must include those of its current vector, if it has one (a data file has one vector)."""
    path = _delete_path(table, data_file.spec_id, data_file.partition, ".puffin")
    written = write_deletion_vector(table.io, path, data_file.file_path, positions)
    return deletion_vector_data_file(
        path, data_file.file_path, written, data_file.spec_id, data_file.partition
    )


def conform(table: Table, rows: pa.Table) -> pa.Table:
    """`rows` cast to the table's Arrow schema (nullability included), as pyiceberg writes expect.

    Optional columns missing from `rows` are filled with nulls, as after a column was added.
    """
    target = table.schema().as_arrow()
    columns = []
    for field in target:
        if field.name in rows.column_names:
            columns.append(rows[field.name])
        elif field.nullable:
            columns.append(pa.nulls(rows.num_rows, field.type))
        else:
            raise ValueError(f"rows lack required column {field.name!r}")
    return pa.Table.from_arrays(columns, names=target.names).cast(target)


def write_data_files(table: Table, rows: pa.Table) -> list[DataFile]:
    """Data files holding `rows`, split by the table's partition spec, not yet committed."""
    files = list(dataframe_to_data_files(table.metadata, conform(table, rows), table.io))
    for f in files:
        # pyiceberg writes with the default spec but leaves spec_id unset on the DataFile.
        f.spec_id = table.metadata.default_spec_id
    return files
