"""Results are checked before they are accepted: rows conserved, files where and what they claim.

Every check runs on a real rewrite's output (files in storage, read through pyiceberg's
FileIO), once as written, where it must pass, and once forged, where it must refuse with the
rule and the numbers named.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO, schema_to_pyarrow
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from floe.planning.plan import POSITIONS
from floe.protocol.rewrite_task import InputDataFile, InputDeleteFile, RewriteTaskResult, RewriteTaskSpec
from floe.rewrite.result_check import ResultCheckFailed, check_result, is_own_file, removable_rows
from floe.rewrite.task import run_rewrite_task, run_task
from floe.service.results import ResultChecker
from floe.tables.deletion_vectors import write_deletion_vector

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "s", StructType(NestedField(3, "a", IntegerType()), NestedField(4, "b", StringType()))),
    NestedField(5, "l", ListType(6, DoubleType())),
    NestedField(7, "m", MapType(8, StringType(), 9, LongType())),
    NestedField(10, "u", UUIDType()),
    NestedField(11, "d", DecimalType(10, 2)),
    NestedField(12, "ts", TimestamptzType()),
    NestedField(13, "t", TimestampType()),
    NestedField(14, "dt", DateType()),
    NestedField(15, "bin", BinaryType()),
    NestedField(16, "fx", FixedType(4)),
    NestedField(17, "f", FloatType()),
    NestedField(18, "bo", BooleanType()),
    NestedField(19, "tm", TimeType()),
)
ROWS = 50
PREFIX = "db.t-20260101T000000-abcdef-t0000-0a1b2c3d-a1"


def _data_file(tmp_path: Path, name: str, ids: range, seq: int) -> InputDataFile:
    n = len(ids)
    table = pa.table(
        {
            "id": list(ids),
            "s": [{"a": i, "b": str(i)} for i in ids],
            "l": [[float(i), float("nan")] for i in ids],
            "m": [[("k", i)] for i in ids],
            "u": [uuid.UUID(int=i).bytes for i in ids],
            "d": [decimal.Decimal(f"{i}.25") for i in ids],
            "ts": [datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)] * n,
            "t": [datetime.datetime(2024, 1, 1)] * n,
            "dt": [datetime.date(2024, 1, 1)] * n,
            "bin": [b"x"] * n,
            "fx": [b"abcd"] * n,
            "f": [None if i % 10 == 5 else 1.5 for i in ids],
            "bo": [True] * n,
            "tm": [datetime.time(1, 2, 3)] * n,
        },
        schema=schema_to_pyarrow(SCHEMA),
    )
    path = tmp_path / name
    pq.write_table(table, path)
    return InputDataFile(
        path=str(path), record_count=n, size_bytes=path.stat().st_size, data_sequence_number=seq
    )


def _position_deletes(tmp_path: Path, data: InputDataFile, positions: list[int], seq: int) -> InputDeleteFile:
    path = tmp_path / f"pos-{seq}.parquet"
    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": b"2147483546"}),
            pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"2147483545"}),
        ]
    )
    pq.write_table(
        pa.table({"file_path": [data.path] * len(positions), "pos": positions}, schema=schema), path
    )
    return InputDeleteFile(
        path=str(path),
        kind=1,
        record_count=len(positions),
        size_bytes=path.stat().st_size,
        data_sequence_number=seq,
    )


def _spec(tmp_path: Path, data: list[InputDataFile], deletes: list[InputDeleteFile]) -> RewriteTaskSpec:
    return RewriteTaskSpec(
        task_id="db.t-20260101T000000-abcdef-t0000",
        io_properties={},
        table_schema_json=SCHEMA.model_dump_json(),
        partition_spec_json=UNPARTITIONED_PARTITION_SPEC.model_dump_json(),
        output_dir=str(tmp_path / "out"),
        data_files=data,
        delete_files=deletes,
        target_file_size_bytes=128 * 1024 * 1024,
        delete_memory_limit_bytes=64 * 1024 * 1024,
        file_name_prefix=PREFIX,
    )


@pytest.fixture
def rewritten(tmp_path: Path) -> tuple[RewriteTaskSpec, RewriteTaskResult]:
    """A real rewrite of two files, three rows removed by a position delete."""
    a = _data_file(tmp_path, "a.parquet", range(0, ROWS), seq=1)
    b = _data_file(tmp_path, "b.parquet", range(ROWS, 2 * ROWS), seq=2)
    spec = _spec(tmp_path, [a, b], [_position_deletes(tmp_path, a, [0, 1, 7], seq=2)])
    result = run_rewrite_task(spec)
    assert (result.rows_read, result.rows_deleted, len(result.files)) == (2 * ROWS, 3, 1)
    return spec, result


def _refusal(spec: RewriteTaskSpec, result: RewriteTaskResult) -> ResultCheckFailed:
    with pytest.raises(ResultCheckFailed) as refused:
        check_result(spec, result, PyArrowFileIO())
    return refused.value


def test_a_real_result_of_every_column_type_passes(
    rewritten: tuple[RewriteTaskSpec, RewriteTaskResult],
) -> None:
    spec, result = rewritten
    check_result(spec, result, PyArrowFileIO())
    ResultChecker().check(spec, result)


def test_rows_read_must_be_what_the_input_files_hold(
    rewritten: tuple[RewriteTaskSpec, RewriteTaskResult],
) -> None:
    spec, result = rewritten
    refused = _refusal(spec, result.model_copy(update={"rows_read": 2 * ROWS - 1, "rows_deleted": 2}))
    assert refused.check == "rows"
    assert "99 rows read, but its 2 data files hold 100 rows" in str(refused)


def test_rows_deleted_cannot_exceed_what_the_delete_files_remove(
    rewritten: tuple[RewriteTaskSpec, RewriteTaskResult],
) -> None:
    spec, result = rewritten
    # A task "deleting" 4 rows with a 3-row position delete, and writing one row fewer to match.
    forged_file = result.files[0].model_copy(update={"record_count": result.files[0].record_count - 1})
    refused = _refusal(spec, result.model_copy(update={"rows_deleted": 4, "files": [forged_file]}))
    assert refused.check == "rows" and "4 rows deleted" in str(refused) and "at most 3" in str(refused)


def test_rows_written_must_be_rows_read_minus_rows_deleted(
    rewritten: tuple[RewriteTaskSpec, RewriteTaskResult],
) -> None:
    spec, result = rewritten
    refused = _refusal(spec, result.model_copy(update={"rows_deleted": 2}))
    assert refused.check == "rows"
    assert "wrote 97 rows, but read 100 and deleted 2, which leaves 98" in str(refused)


def test_the_footer_row_count_must_match_the_claim(
    rewritten: tuple[RewriteTaskSpec, RewriteTaskResult],
) -> None:
    spec, result = rewritten
    # Consistent accounting around a file that claims a row it does not hold: rows vanish.
    written = result.files[0].model_copy(update={"record_count": result.files[0].record_count + 1})
    refused = _refusal(spec, result.model_copy(update={"rows_deleted": 2, "files": [written]}))
    assert refused.check == "footer" and "holds 97 rows, but the result claims 98" in str(refused)


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "{out}/../{prefix}-00000.parquet",
        "{out}/{prefix}-00000.parquet/../../a.parquet",
        "{out}/other-process-t0000-00000.parquet",
        "{out}/sub/{prefix}-00000.parquet",
        "{out}/{prefix}-00000.avro",
    ],
)
def test_a_file_outside_the_attempts_names_is_refused(
    rewritten: tuple[RewriteTaskSpec, RewriteTaskResult], path: str
) -> None:
    spec, result = rewritten
    forged = path.format(out=spec.output_dir, prefix=PREFIX)
    assert not is_own_file(spec, forged)
    refused = _refusal(
        spec, result.model_copy(update={"files": [result.files[0].model_copy(update={"path": forged})]})
    )
    assert refused.check == "location" and forged in str(refused)


def test_a_file_named_twice_is_refused(rewritten: tuple[RewriteTaskSpec, RewriteTaskResult]) -> None:
    spec, result = rewritten
    refused = _refusal(spec, result.model_copy(update={"files": result.files * 2}))
    assert refused.check == "location" and "twice" in str(refused)


def test_a_file_that_does_not_exist_is_refused(rewritten: tuple[RewriteTaskSpec, RewriteTaskResult]) -> None:
    spec, result = rewritten
    Path(result.files[0].path).unlink()
    refused = _refusal(spec, result)
    assert refused.check == "missing" and "does not exist" in str(refused)


def test_a_truncated_file_is_refused(rewritten: tuple[RewriteTaskSpec, RewriteTaskResult]) -> None:
    spec, result = rewritten
    path = Path(result.files[0].path)
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)
    refused = _refusal(spec, result)
    assert refused.check == "size" and "but the result claims" in str(refused)
    # Claiming the truncated size: the footer is gone.
    truncated = result.files[0].model_copy(update={"size_bytes": path.stat().st_size})
    refused = _refusal(spec, result.model_copy(update={"files": [truncated]}))
    assert refused.check == "footer" and "no readable Parquet footer" in str(refused)


def test_a_forged_bound_that_would_hide_rows_from_filtered_reads_is_refused(
    rewritten: tuple[RewriteTaskSpec, RewriteTaskResult],
) -> None:
    spec, result = rewritten
    written = result.files[0]
    # An upper bound on id below the real maximum: a reader filtering id > 10 would skip the file.
    forged = written.model_copy(
        update={"upper_bounds": {**written.upper_bounds, 1: (10).to_bytes(8, "little").hex()}}
    )
    refused = _refusal(spec, result.model_copy(update={"files": [forged]}))
    assert refused.check == "metrics"
    assert "upper_bounds of field 1 is 0a00000000000000, the footer's 6300000000000000" in str(refused)


@pytest.mark.parametrize("metric", ["value_counts", "null_value_counts", "column_sizes"])
def test_forged_counts_are_refused(rewritten: tuple[RewriteTaskSpec, RewriteTaskResult], metric: str) -> None:
    spec, result = rewritten
    written = result.files[0]
    counts = dict(getattr(written, metric))
    counts[1] = counts.get(1, 0) + 1
    refused = _refusal(
        spec, result.model_copy(update={"files": [written.model_copy(update={metric: counts})]})
    )
    assert refused.check == "metrics" and f"{metric} of field 1" in str(refused)


def test_more_nans_than_values_are_refused(rewritten: tuple[RewriteTaskSpec, RewriteTaskResult]) -> None:
    spec, result = rewritten
    written = result.files[0]
    assert written.nan_value_counts[17] == 0 and written.value_counts[17] == 2 * ROWS - 3
    nans = {**written.nan_value_counts, 17: 2 * ROWS - 2}
    refused = _refusal(
        spec, result.model_copy(update={"files": [written.model_copy(update={"nan_value_counts": nans})]})
    )
    assert refused.check == "metrics" and "98 NaN values claimed for field 17" in str(refused)


def test_more_nans_than_non_null_values_are_refused(
    rewritten: tuple[RewriteTaskSpec, RewriteTaskResult],
) -> None:
    spec, result = rewritten
    written = result.files[0]
    values, nulls = written.value_counts[17], written.null_value_counts[17]
    assert (values, nulls) == (2 * ROWS - 3, 10)
    # As many NaNs as values would tell Iceberg Java's metrics evaluators the column holds no
    # number, and a filter on it would skip the file; the nulls are not NaNs.
    nans = {**written.nan_value_counts, 17: values - nulls + 1}
    refused = _refusal(
        spec, result.model_copy(update={"files": [written.model_copy(update={"nan_value_counts": nans})]})
    )
    assert refused.check == "metrics"
    assert "88 NaN values claimed for field 17, which holds 87 non-null values" in str(refused)


def _replace_file(result: RewriteTaskResult, table: pa.Table) -> RewriteTaskResult:
    """Overwrite the result's file with `table`, and make the claims match the new file."""
    written = result.files[0]
    pq.write_table(table, written.path)
    size = Path(written.path).stat().st_size
    return result.model_copy(update={"files": [written.model_copy(update={"size_bytes": size})]})


def test_a_file_without_field_ids_is_refused(rewritten: tuple[RewriteTaskSpec, RewriteTaskResult]) -> None:
    spec, result = rewritten
    rows = pq.read_table(result.files[0].path)
    plain = rows.cast(pa.schema([f.remove_metadata() for f in rows.schema]))
    refused = _refusal(spec, _replace_file(result, plain))
    assert refused.check == "schema" and "lacks Iceberg field ids" in str(refused)


def test_a_column_of_another_type_is_refused(rewritten: tuple[RewriteTaskSpec, RewriteTaskResult]) -> None:
    spec, result = rewritten
    rows = pq.read_table(result.files[0].path)
    index = rows.schema.get_field_index("id")
    as_string = rows.schema.field(index).with_type(pa.string())
    refused = _refusal(
        spec, _replace_file(result, rows.set_column(index, as_string, rows["id"].cast(pa.string())))
    )
    assert refused.check == "schema" and "field id 1 is string in the file, long in the table" in str(refused)


def test_a_missing_or_extra_column_is_refused(rewritten: tuple[RewriteTaskSpec, RewriteTaskResult]) -> None:
    spec, result = rewritten
    rows = pq.read_table(result.files[0].path)
    refused = _refusal(spec, _replace_file(result, rows.drop_columns(["bo"])))
    assert refused.check == "schema" and "no column with field id 18" in str(refused)
    extra = pa.field("x", pa.int32(), metadata={b"PARQUET:field_id": b"99"})
    refused = _refusal(
        spec, _replace_file(result, rows.append_column(extra, pa.array([1] * rows.num_rows, pa.int32())))
    )
    assert refused.check == "schema" and "field ids [99]" in str(refused)


def _input(record_count: int, seq: int) -> InputDataFile:
    return InputDataFile(
        path=f"d{seq}-{record_count}", record_count=record_count, size_bytes=1, data_sequence_number=seq
    )


def _delete(kind: int, record_count: int, seq: int) -> InputDeleteFile:
    return InputDeleteFile(
        path=f"x{kind}-{seq}", kind=kind, record_count=record_count, size_bytes=1, data_sequence_number=seq
    )


@pytest.mark.parametrize(
    ("data", "deletes", "removable"),
    [
        ([_input(10, 1)], [], 0),
        # Position deletes remove one row per record, from data not newer than themselves.
        ([_input(10, 1), _input(10, 2)], [_delete(1, 3, 1)], 3),
        ([_input(10, 1), _input(10, 3)], [_delete(1, 30, 2)], 10),
        # An equality delete may remove every row of data strictly older than itself.
        ([_input(10, 1), _input(20, 2)], [_delete(2, 1, 2)], 10),
        ([_input(10, 1), _input(20, 2)], [_delete(2, 1, 3)], 30),
        ([_input(10, 1), _input(20, 2)], [_delete(2, 1, 2), _delete(1, 5, 2)], 15),
    ],
)
def test_what_delete_files_can_remove(
    tmp_path: Path, data: list[InputDataFile], deletes: list[InputDeleteFile], removable: int
) -> None:
    assert removable_rows(_spec(tmp_path, data, deletes)) == removable


@pytest.fixture
def converted(tmp_path: Path) -> tuple[RewriteTaskSpec, RewriteTaskResult]:
    """A real positions task over two files: rows of "a" deleted twice over, "b" untouched."""
    a = _data_file(tmp_path, "a.parquet", range(0, ROWS), seq=1)
    b = _data_file(tmp_path, "b.parquet", range(ROWS, 2 * ROWS), seq=3)
    deletes = [_position_deletes(tmp_path, a, [0, 1], seq=1), _position_deletes(tmp_path, a, [7], seq=2)]
    spec = _spec(tmp_path, [a, b], deletes).model_copy(update={"kind": POSITIONS})
    result = run_task(spec)
    assert (result.rows_read, result.rows_deleted, len(result.files)) == (2 * ROWS, 3, 1)
    return spec, result


def test_a_real_positions_result_passes(converted: tuple[RewriteTaskSpec, RewriteTaskResult]) -> None:
    spec, result = converted
    check_result(spec, result, PyArrowFileIO())


def test_a_positions_result_must_read_every_row(converted: tuple[RewriteTaskSpec, RewriteTaskResult]) -> None:
    spec, result = converted
    refused = _refusal(spec, result.model_copy(update={"rows_read": 2 * ROWS - 1}))
    assert "99 rows read, but its 2 data files hold 100 rows" in str(refused)


def test_a_position_file_must_name_a_data_file_of_the_task(
    converted: tuple[RewriteTaskSpec, RewriteTaskResult],
) -> None:
    spec, result = converted
    written = result.files[0]
    elsewhere = written.model_copy(update={"referenced_data_file": "file:///elsewhere.parquet"})
    assert "is not a position-delete file of one of task" in str(
        _refusal(spec, result.model_copy(update={"files": [elsewhere]}))
    )
    as_data = written.model_copy(update={"content": 0})
    assert "is not a position-delete file" in str(
        _refusal(spec, result.model_copy(update={"files": [as_data]}))
    )


def test_positions_written_must_be_the_rows_deleted(
    converted: tuple[RewriteTaskSpec, RewriteTaskResult],
) -> None:
    spec, result = converted
    refused = _refusal(spec, result.model_copy(update={"rows_deleted": 2}))
    assert "wrote 3 positions and reports 2 rows deleted" in str(refused)


def test_a_position_file_naming_another_data_file_in_its_bounds_is_refused(
    converted: tuple[RewriteTaskSpec, RewriteTaskResult],
) -> None:
    spec, result = converted
    b = spec.data_files[1].path
    # Claims "b" as its target, but its footer's file_path bounds name "a".
    forged = result.files[0].model_copy(update={"referenced_data_file": b})
    refused = _refusal(spec, result.model_copy(update={"files": [forged]}))
    assert f"names other data files than {b}" in str(refused)


def _deletion_vector(tmp_path: Path, data: InputDataFile, positions: list[int], seq: int) -> InputDeleteFile:
    path = tmp_path / f"dv-{seq}-{len(positions)}.puffin"
    written = write_deletion_vector(PyArrowFileIO(), str(path), data.path, pa.array(positions, pa.int64()))
    return InputDeleteFile(
        path=str(path),
        kind=1,
        record_count=len(positions),
        size_bytes=written.file_size,
        data_sequence_number=seq,
        content_offset=written.offset,
        content_size_in_bytes=written.length,
        referenced_data_file=data.path,
    )


@pytest.mark.parametrize("format_version", [2, 3])
def test_new_position_deletes_must_keep_every_position_they_replace(
    tmp_path: Path, format_version: int
) -> None:
    """A positions task's file for "a" leaves out position 7, which a delete it replaces holds: the
    accounting adds up (2 positions written, 2 reported deleted, at most 3 removable), the file is
    what the result says, and only reading the replaced deletes shows the row would come back."""
    a = _data_file(tmp_path, "a.parquet", range(0, ROWS), seq=1)
    b = _data_file(tmp_path, "b.parquet", range(ROWS, 2 * ROWS), seq=3)
    if format_version == 2:
        first, second = (
            _position_deletes(tmp_path, a, [0, 1], seq=1),
            _position_deletes(tmp_path, a, [7], seq=2),
        )
        replaced, short = [first, second], [first]
    else:
        replaced = [_deletion_vector(tmp_path, a, [0, 1, 7], seq=2)]
        short = [_deletion_vector(tmp_path, a, [0, 1], seq=2)]
    update = {"kind": POSITIONS, "format_version": format_version}
    spec = _spec(tmp_path, [a, b], replaced).model_copy(update=update)
    # The result of a task that was given fewer deletes than the spec names, as if it lost one.
    forged = run_task(_spec(tmp_path, [a, b], short).model_copy(update=update))
    assert (forged.rows_deleted, len(forged.files)) == (2, 1)

    refused = _refusal(spec, forged)
    assert refused.check == "positions"
    assert f"the new position deletes of {a.path} leave out 1 of the 3 positions" in str(refused)
    assert "(position 7 first)" in str(refused)

    # A result without any file for "a" leaves all three out.
    refused = _refusal(spec, forged.model_copy(update={"files": [], "rows_deleted": 0}))
    assert refused.check == "positions"
    assert f"wrote no position deletes for {a.path}, of which its delete files delete 3 rows" in str(refused)

    # Stale positions, beyond the file's rows, delete nothing and need not be kept.
    stale = _position_deletes(tmp_path, a, [ROWS + 1], seq=5)
    honest = run_task(spec.model_copy(update={"file_name_prefix": f"{PREFIX}-h"}))
    check_result(
        spec.model_copy(update={"delete_files": [*spec.delete_files, stale]}), honest, PyArrowFileIO()
    )


def test_a_positions_task_writes_only_what_its_kept_files_do_not_hold(tmp_path: Path) -> None:
    """A kept position-delete file stays in the table (floe's levelled merges, format v2): the new
    file holds the other rows only. Writing a kept row again, or leaving out a replaced one, is
    refused."""
    a = _data_file(tmp_path, "a.parquet", range(0, ROWS), seq=1)
    kept = _position_deletes(tmp_path, a, [0, 1], seq=2).model_copy(update={"kept": True})
    replaced = _position_deletes(tmp_path, a, [1, 7], seq=3)
    spec = RewriteTaskSpec.model_validate(
        {**_spec(tmp_path, [a], []).model_dump(), "kind": POSITIONS, "delete_files": [kept, replaced]}
    )
    honest = run_task(spec)
    [written] = honest.files
    assert (written.record_count, honest.rows_deleted) == (1, 1)  # position 7 alone
    check_result(spec, honest, PyArrowFileIO())

    # As if the kept file were merged: rows 0 and 1 written again.
    merged = run_task(
        spec.model_copy(
            update={
                "delete_files": [kept.model_copy(update={"kept": False}), replaced],
                "file_name_prefix": f"{PREFIX}-m",
            }
        )
    )
    refused = _refusal(spec, merged)
    assert refused.check == "positions" and "repeat positions a kept file holds" in str(refused)

    # As if the replaced file were kept too: position 7 left out, and no file for "a" at all.
    refused = _refusal(spec, honest.model_copy(update={"files": [], "rows_deleted": 0}))
    assert refused.check == "positions" and f"wrote no position deletes for {a.path}" in str(refused)


@pytest.mark.parametrize(
    ("kind", "format_version"), [("rewrite", 2), (POSITIONS, 3)], ids=["rewrite task", "format v3"]
)
def test_only_a_positions_task_of_a_v2_table_keeps_delete_files(
    tmp_path: Path, kind: str, format_version: int
) -> None:
    a = _data_file(tmp_path, "a.parquet", range(0, ROWS), seq=1)
    kept = _position_deletes(tmp_path, a, [0], seq=2).model_copy(update={"kept": True})
    spec = _spec(tmp_path, [a], [])
    with pytest.raises(
        ValueError, match="only a positions task of a format v1 or v2 table keeps delete files"
    ):
        RewriteTaskSpec.model_validate(
            {
                **spec.model_dump(),
                "kind": kind,
                "format_version": format_version,
                "delete_files": [kept.model_dump()],
            }
        )
    with pytest.raises(ValueError, match="only a position-delete file"):
        InputDeleteFile.model_validate({**kept.model_dump(), "kind": 2, "equality_ids": [1]})
