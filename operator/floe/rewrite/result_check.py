"""Trust no task result: what an optimizer reports is checked against the plan and the files.

A completion names the files a task wrote and counts the rows it read and deleted; the
commit would take those files into the table as they are described. Before a result is
accepted, `check_result` holds it to:

- **its own files**: every file lies in the task's output directory and is named with the
  attempt's prefix, and no file is listed twice;
- **row conservation**: the task read exactly the rows its input data files hold (their
  record counts come from the manifests, through the plan), wrote exactly the rows it read
  minus the rows it deleted, and deleted no more than its delete files can remove;
- **the files as stored**: each exists, has the size the result claims, and its Parquet
  footer holds the claimed row count, the table's field ids with their types, and the very
  column metrics (value and null counts, bounds, sizes, split offsets) the result carries,
  which readers use to skip files. Only the footer is read, never the data.

A failed check raises `ResultCheckFailed`, whose `check` names which rule was broken (for
metrics) and whose message names the numbers or the file.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    StatisticsCollector,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
)
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.types import FixedType, IcebergType, ListType, MapType, NestedField, StructType, UUIDType

from floe.planning.files import FileKind
from floe.planning.plan import POSITIONS
from floe.protocol.rewrite_task import InputDataFile, RewriteTaskResult, RewriteTaskSpec, WrittenFile
from floe.rewrite.lineage import with_lineage
from floe.rewrite.parquet_options import metrics_properties
from floe.tables.deletion_vectors import DeletionVectorError, puffin_blob_properties, read_deletion_vector
from floe.tables.pyiceberg_compat import ROW_LINEAGE_VERSION
from floe.tables.writer import (
    POS_DELETE_FILE_PATH,
    POS_DELETE_FILE_PATH_ID,
    POS_DELETE_POS,
    POS_DELETE_POS_ID,
    POSITION_DELETE_METRICS,
    POSITION_DELETE_SCHEMA,
)


class ResultCheckFailed(ValueError):
    """A task result failed a check; nothing of it may be committed.

    ``check`` is one of ``rows``, ``location``, ``missing``, ``size``, ``footer``,
    ``schema``, ``metrics`` and ``positions``.
    """

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check


def check_result(spec: RewriteTaskSpec, result: RewriteTaskResult, io: FileIO) -> None:
    """Raise ResultCheckFailed unless `result` is exactly what `spec`'s attempt may produce."""
    check_locations(spec, result)
    if spec.kind == POSITIONS and spec.format_version >= ROW_LINEAGE_VERSION:
        check_position_accounting(spec, result)
        kept = {f.referenced_data_file or "": check_stored_vector(spec, f, io) for f in result.files}
        check_replaced_positions(spec, kept, io)
        return
    if spec.kind == POSITIONS:
        check_position_accounting(spec, result)
        for written in result.files:
            check_stored_file(
                written,
                io,
                POSITION_DELETE_SCHEMA,
                compute_statistics_plan(POSITION_DELETE_SCHEMA, POSITION_DELETE_METRICS),
            )
        check_position_targets(spec, result)
        kept = {f.referenced_data_file or "": _stored_positions(f, io) for f in result.files}
        check_replaced_positions(spec, kept, io)
        return
    check_row_accounting(spec, result)
    table_schema = Schema.model_validate_json(spec.table_schema_json)
    if spec.format_version >= ROW_LINEAGE_VERSION:
        # Every row keeps its lineage, so every file has the two columns.
        table_schema = with_lineage(table_schema)
    # The metrics the writer keeps: by field id, under the table's metrics modes.
    stats_plan = compute_statistics_plan(table_schema, metrics_properties(spec.write_properties))
    schema = sanitize_column_names(table_schema)
    for written in result.files:
        check_stored_file(written, io, schema, stats_plan)


def check_position_accounting(spec: RewriteTaskSpec, result: RewriteTaskResult) -> None:
    """For a positions task: one position-delete file per data file at most, each no longer than
    its data file; positions written = rows deleted <= what the task's delete files can remove."""
    check_rows_read(spec, result)
    records = {f.path: f.record_count for f in spec.data_files}
    targets: set[str] = set()
    for written in result.files:
        target = written.referenced_data_file
        if written.content != FileKind.POSITION_DELETES or target not in records:
            raise ResultCheckFailed(
                "rows",
                f"{written.path} is not a position-delete file of one of task {spec.task_id}'s data files",
            )
        if target in targets:
            raise ResultCheckFailed(
                "rows", f"task {spec.task_id} wrote two position-delete files for {target}"
            )
        targets.add(target)
        if written.record_count > records[target]:
            raise ResultCheckFailed(
                "rows",
                f"{written.path} deletes {written.record_count} rows of {target}, "
                f"which holds {records[target]}",
            )
    positions = sum(f.record_count for f in result.files)
    removable = removable_rows(spec)
    if positions != result.rows_deleted or positions > removable:
        raise ResultCheckFailed(
            "rows",
            f"task {spec.task_id} wrote {positions} positions and reports {result.rows_deleted} rows "
            f"deleted; its delete files can remove at most {removable}",
        )


def check_stored_vector(spec: RewriteTaskSpec, written: WrittenFile, io: FileIO) -> pa.Array:
    """A positions task's deletion vector (format v3) is what `written` says: a Puffin file of
    the claimed size whose footer names its data file, holding at the claimed offset and length
    a well-formed vector of `record_count` positions, all within its data file. Returns them."""
    if written.content_offset is None or written.content_size_in_bytes is None:
        raise ResultCheckFailed("rows", f"{written.path} is not a deletion vector: it has no blob location")
    _check_size(written, io)
    target = written.referenced_data_file or ""
    try:
        named = [blob.get("referenced-data-file") for blob in puffin_blob_properties(io, written.path)]
        positions = read_deletion_vector(
            io, written.path, written.content_offset, written.content_size_in_bytes
        )
    except DeletionVectorError as exc:
        raise ResultCheckFailed("footer", str(exc)) from None
    if named != [target]:
        raise ResultCheckFailed("rows", f"{written.path} holds vectors of {named}, not of {target} alone")
    records = {f.path: f.record_count for f in spec.data_files}
    if len(positions) != written.record_count:
        raise ResultCheckFailed(
            "metrics",
            f"{written.path} deletes {len(positions)} positions, "
            f"but the result claims {written.record_count}",
        )
    if len(positions) and not 0 <= positions[0].as_py() <= positions[-1].as_py() < records[target]:
        raise ResultCheckFailed(
            "rows",
            f"{written.path} deletes rows {positions[0]}..{positions[-1]} of {target}, "
            f"which holds {records[target]}",
        )
    return positions


def check_replaced_positions(
    spec: RewriteTaskSpec, written_by_file: Mapping[str, pa.Array], io: FileIO
) -> None:
    """Each data file's new position deletes (`written_by_file`: the positions written for each
    data file) hold every position that the task's position-delete files and deletion vectors
    delete from it, but those its kept files hold: the commit replaces the others, so a position
    left out is a deleted row come back. No written position is one a kept file holds: it would
    be counted twice. The rows of equality deletes cannot be checked without reading the data;
    these are read here (a vector is one blob, a position-delete file is filtered to the task's
    data files)."""
    held = _replaced_positions(spec, io, kept=True)
    for path, positions in held.items():
        written = written_by_file.get(path)
        if written is not None and pc.any(pc.is_in(written, value_set=positions)).as_py():
            raise ResultCheckFailed(
                "positions", f"the new position deletes of {path} repeat positions a kept file holds"
            )
    for path, replaced in _replaced_positions(spec, io).items():
        if path in held:
            replaced = replaced.filter(pc.invert(pc.is_in(replaced, value_set=held[path])))
            if not len(replaced):
                continue
        written = written_by_file.get(path)
        if written is None:
            raise ResultCheckFailed(
                "positions",
                f"task {spec.task_id} wrote no position deletes for {path}, "
                f"of which its delete files delete {len(replaced)} rows",
            )
        missing = replaced.filter(pc.invert(pc.is_in(replaced, value_set=written)))
        if len(missing):
            raise ResultCheckFailed(
                "positions",
                f"the new position deletes of {path} leave out {len(missing)} of the {len(replaced)} "
                f"positions the deletes they replace remove (position {missing[0]} first)",
            )


def _replaced_positions(spec: RewriteTaskSpec, io: FileIO, kept: bool = False) -> dict[str, pa.Array]:
    """The distinct positions the task's position deletes remove from each of its data files, by
    the sequence-number rule (a delete applies to data not newer than itself); positions beyond a
    file's rows delete nothing and are left out, as the task leaves them out. With `kept`, those
    of the kept files; else those of the others."""
    found: dict[str, list[pa.Array]] = {}
    for delete in spec.delete_files:
        if delete.kind != FileKind.POSITION_DELETES or delete.kept != kept:
            continue
        targets = {f.path for f in spec.data_files if f.data_sequence_number <= delete.data_sequence_number}
        vector = delete.referenced_data_file
        try:
            if vector is not None and delete.content_offset is not None and delete.content_size_in_bytes:
                if vector in targets:
                    positions = read_deletion_vector(
                        io, delete.path, delete.content_offset, delete.content_size_in_bytes
                    )
                    found.setdefault(vector, []).append(positions)
            elif targets:
                for path, positions in _positions_naming(io, delete.path, targets):
                    found.setdefault(path, []).append(positions)
        except (DeletionVectorError, pa.ArrowInvalid) as exc:
            raise ResultCheckFailed(
                "positions", f"the replaced delete file {delete.path} cannot be read: {exc}"
            ) from None
    records = {f.path: f.record_count for f in spec.data_files}
    replaced = {}
    for path, arrays in found.items():
        positions = pc.unique(pa.concat_arrays([a.cast(pa.int64()) for a in arrays]))
        positions = positions.filter(pc.less(positions, records[path]))
        if len(positions):
            replaced[path] = positions
    return replaced


def _positions_naming(io: FileIO, path: str, targets: set[str]) -> Iterator[tuple[str, pa.Array]]:
    """(data file, positions) for each of `targets` that position-delete file `path` names; row
    groups whose ``file_path`` statistics exclude every target are not read."""
    with io.new_input(path).open(seekable=True) as stream:
        rows = pq.read_table(
            stream,
            columns=[POS_DELETE_FILE_PATH, POS_DELETE_POS],
            filters=[(POS_DELETE_FILE_PATH, "in", sorted(targets))],
        )
    grouped = rows.group_by(POS_DELETE_FILE_PATH).aggregate([(POS_DELETE_POS, "list")])
    lists = grouped.column(f"{POS_DELETE_POS}_list").combine_chunks()
    for i, target in enumerate(grouped.column(POS_DELETE_FILE_PATH).to_pylist()):
        yield target, lists[i].values


def _stored_positions(written: WrittenFile, io: FileIO) -> pa.Array:
    """The positions a position-delete file the task wrote deletes (it names one data file)."""
    with io.new_input(written.path).open(seekable=True) as stream:
        return pq.read_table(stream, columns=[POS_DELETE_POS]).column(POS_DELETE_POS).combine_chunks()


def check_position_targets(spec: RewriteTaskSpec, result: RewriteTaskResult) -> None:
    """Each position-delete file names only its data file, and only rows it has (by the footer's
    bounds, which `check_stored_file` matched against the claimed ones)."""
    records = {f.path: f.record_count for f in spec.data_files}
    for written in result.files:
        target = written.referenced_data_file or ""
        path_bounds = {
            bytes.fromhex(written.lower_bounds.get(POS_DELETE_FILE_PATH_ID, "")).decode("utf-8", "replace"),
            bytes.fromhex(written.upper_bounds.get(POS_DELETE_FILE_PATH_ID, "")).decode("utf-8", "replace"),
        }
        if path_bounds != {target}:
            raise ResultCheckFailed("rows", f"{written.path} names other data files than {target}")
        lowest = int.from_bytes(
            bytes.fromhex(written.lower_bounds.get(POS_DELETE_POS_ID, "")), "little", signed=True
        )
        highest = int.from_bytes(
            bytes.fromhex(written.upper_bounds.get(POS_DELETE_POS_ID, "")), "little", signed=True
        )
        if written.record_count and not 0 <= lowest <= highest < records[target]:
            raise ResultCheckFailed(
                "rows",
                f"{written.path} deletes rows {lowest}..{highest} of {target}, which holds {records[target]}",
            )


def check_row_accounting(spec: RewriteTaskSpec, result: RewriteTaskResult) -> None:
    """Rows read = the inputs' record counts; rows written = read - deleted; deleted <= removable."""
    check_rows_read(spec, result)
    removable = removable_rows(spec)
    if not 0 <= result.rows_deleted <= removable:
        raise ResultCheckFailed(
            "rows",
            f"task {spec.task_id} reports {result.rows_deleted} rows deleted, but its delete files can "
            f"remove at most {removable}",
        )
    written = sum(f.record_count for f in result.files)
    expected = result.rows_read - result.rows_deleted
    if written != expected:
        raise ResultCheckFailed(
            "rows",
            f"task {spec.task_id} wrote {written} rows, but read {result.rows_read} and deleted "
            f"{result.rows_deleted}, which leaves {expected}",
        )


def check_rows_read(spec: RewriteTaskSpec, result: RewriteTaskResult) -> None:
    """Rows read = the record counts of the task's data files (every row is read, whatever the kind)."""
    planned = sum(f.record_count for f in spec.data_files)
    if result.rows_read != planned:
        raise ResultCheckFailed(
            "rows",
            f"task {spec.task_id} reports {result.rows_read} rows read, but its {len(spec.data_files)} "
            f"data files hold {planned} rows",
        )


def removable_rows(spec: RewriteTaskSpec) -> int:
    """The most rows the task's delete files can remove from its data files.

    An equality delete may match every row of a data file it applies to (a strictly
    smaller data sequence number). A position delete removes at most one row per record,
    and only from data files with a data sequence number not above its own.
    """
    equality = [d for d in spec.delete_files if d.kind == FileKind.EQUALITY_DELETES]
    positions = [d for d in spec.delete_files if d.kind == FileKind.POSITION_DELETES]

    def has_equality_delete(data: InputDataFile) -> bool:
        return any(d.data_sequence_number > data.data_sequence_number for d in equality)

    def has_position_delete(data: InputDataFile) -> bool:
        return any(d.data_sequence_number >= data.data_sequence_number for d in positions)

    wholly = sum(f.record_count for f in spec.data_files if has_equality_delete(f))
    by_position = sum(
        f.record_count for f in spec.data_files if not has_equality_delete(f) and has_position_delete(f)
    )
    return wholly + min(by_position, sum(d.record_count for d in positions))


def check_locations(spec: RewriteTaskSpec, result: RewriteTaskResult) -> None:
    """Every file is directly in the task's output directory, named with the attempt's prefix."""
    seen: set[str] = set()
    for written in result.files:
        if not is_own_file(spec, written.path):
            raise ResultCheckFailed(
                "location",
                f"task {spec.task_id} names {written.path}, which is not a file of this attempt "
                f"(expected {spec.output_dir.rstrip('/')}/{spec.file_name_prefix}-*"
                f"{'.puffin' if _writes_vectors(spec) else '.parquet'})",
            )
        if written.path in seen:
            raise ResultCheckFailed("location", f"task {spec.task_id} names {written.path} twice")
        seen.add(written.path)


def _writes_vectors(spec: RewriteTaskSpec) -> bool:
    return spec.kind == POSITIONS and spec.format_version >= ROW_LINEAGE_VERSION


def is_own_file(spec: RewriteTaskSpec, path: str) -> bool:
    """Whether `path` is a name the attempt of `spec` may have written: only those are ever deleted."""
    directory, name = posixpath.split(path)
    return (
        directory == spec.output_dir.rstrip("/")
        and name.startswith(f"{spec.file_name_prefix}-")
        and name.endswith(".puffin" if _writes_vectors(spec) else ".parquet")
        and "/" not in name
        and ".." not in name
    )


def own_files(spec: RewriteTaskSpec, result: RewriteTaskResult) -> list[str]:
    """The files `result` names that the attempt of `spec` may have written (`is_own_file`): what
    a refused result's cleanup deletes, never a file named elsewhere."""
    return [written.path for written in result.files if is_own_file(spec, written.path)]


def check_stored_file(
    written: WrittenFile,
    io: FileIO,
    schema: Schema,
    stats_plan: dict[int, StatisticsCollector] | None = None,
) -> None:
    """The stored file is what `written` says: size, row count, field ids and types, metrics (those
    the writer keeps under `stats_plan`, from Iceberg's ``write.metadata.metrics.*``; by default
    all, truncated as Iceberg's default does)."""
    metadata = _read_footer(written, io)
    if metadata.num_rows != written.record_count:
        raise ResultCheckFailed(
            "footer",
            f"{written.path} holds {metadata.num_rows} rows, but the result claims {written.record_count}",
        )
    _check_schema(written.path, metadata.schema.to_arrow_schema(), schema)
    stats = data_file_statistics_from_parquet_metadata(
        metadata,
        stats_plan if stats_plan is not None else compute_statistics_plan(schema, {}),
        parquet_path_to_id_mapping(schema),
    )
    serialized = stats.to_serialized_dict()
    actual: dict[str, Any] = {
        "column_sizes": stats.column_sizes,
        "value_counts": stats.value_counts,
        "null_value_counts": stats.null_value_counts,
        "lower_bounds": {k: v.hex() for k, v in serialized["lower_bounds"].items()},
        "upper_bounds": {k: v.hex() for k, v in serialized["upper_bounds"].items()},
        "split_offsets": list(stats.split_offsets),
    }
    for name, value in actual.items():
        claimed = getattr(written, name)
        if claimed != value:
            raise ResultCheckFailed("metrics", f"{written.path}: {_difference(name, claimed, value)}")
    for field_id, nans in written.nan_value_counts.items():
        # NaN counts are not in the footer; they cannot exceed the column's non-null values
        # (value counts include nulls). Iceberg Java's metrics evaluators skip a file on them:
        # one whose NaN count equals its value count holds no number.
        values = stats.value_counts.get(field_id, 0) - stats.null_value_counts.get(field_id, 0)
        if not 0 <= nans <= values:
            raise ResultCheckFailed(
                "metrics",
                f"{written.path}: {nans} NaN values claimed for field {field_id}, "
                f"which holds {values} non-null values",
            )


def _check_size(written: WrittenFile, io: FileIO) -> None:
    source = io.new_input(written.path)
    try:
        size = len(source)
    except FileNotFoundError:
        raise ResultCheckFailed("missing", f"{written.path} does not exist") from None
    except OSError as exc:
        if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
            raise ResultCheckFailed("missing", f"{written.path} does not exist") from None
        raise
    if size != written.size_bytes:
        raise ResultCheckFailed(
            "size", f"{written.path} is {size} bytes, but the result claims {written.size_bytes}"
        )


def _read_footer(written: WrittenFile, io: FileIO) -> pq.FileMetaData:
    _check_size(written, io)
    source = io.new_input(written.path)
    try:
        with source.open(seekable=True) as stream:
            return pq.read_metadata(stream)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ResultCheckFailed("footer", f"{written.path} has no readable Parquet footer: {exc}") from None


def _check_schema(path: str, arrow_schema: pa.Schema, schema: Schema) -> None:
    """The file's columns are the table schema's, by field id and type."""
    try:
        file_schema = pyarrow_to_schema(arrow_schema)
    except ValueError as exc:
        raise ResultCheckFailed("schema", f"{path} lacks Iceberg field ids: {exc}") from None
    expected = dict(_leaf_types(schema.as_struct()))
    found = dict(_leaf_types(file_schema.as_struct()))
    for field_id, iceberg_type in expected.items():
        if field_id not in found:
            raise ResultCheckFailed(
                "schema", f"{path} has no column with field id {field_id} ({iceberg_type})"
            )
        if not _same_type(found[field_id], iceberg_type):
            raise ResultCheckFailed(
                "schema",
                f"{path}: field id {field_id} is {found[field_id]} in the file, {iceberg_type} in the table",
            )
    extra = sorted(set(found) - set(expected))
    if extra:
        raise ResultCheckFailed("schema", f"{path} has columns the table schema does not: field ids {extra}")


def _leaf_types(struct: StructType) -> Iterator[tuple[int, IcebergType | str]]:
    """(field id, type) of every field, nested ones included; containers by their kind only."""
    for field in struct.fields:
        yield from _field_types(field)


def _field_types(field: NestedField) -> Iterator[tuple[int, IcebergType | str]]:
    field_type = field.field_type
    if isinstance(field_type, StructType):
        yield field.field_id, "struct"
        yield from _leaf_types(field_type)
    elif isinstance(field_type, ListType):
        yield field.field_id, "list"
        yield from _field_types(field_type.element_field)
    elif isinstance(field_type, MapType):
        yield field.field_id, "map"
        yield from _field_types(field_type.key_field)
        yield from _field_types(field_type.value_field)
    else:
        yield field.field_id, field_type


def _same_type(found: IcebergType | str, expected: IcebergType | str) -> bool:
    # A UUID column reads back from Parquet as fixed[16] where no Arrow extension type survives.
    if isinstance(expected, UUIDType) and found == FixedType(16):
        return True
    return found == expected


def _difference(name: str, claimed: Any, actual: Any) -> str:
    """Where the result's metric `name` departs from the footer's, e.g. one field's bound."""
    if isinstance(claimed, Mapping) and isinstance(actual, Mapping):
        for field_id in sorted(set(claimed) | set(actual)):
            if claimed.get(field_id) != actual.get(field_id):
                return (
                    f"the result's {name} of field {field_id} is {claimed.get(field_id)}, "
                    f"the footer's {actual.get(field_id)}"
                )
    return f"the result's {name} are {claimed}, the footer's {actual}"
