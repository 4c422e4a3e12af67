"""The rewrite task on hand-made Parquet data and delete files: deletes, schema evolution, sizes, metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.conversions import from_bytes
from pyiceberg.io import InputFile, OutputFile
from pyiceberg.io.pyarrow import PyArrowFileIO, schema_to_pyarrow
from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import create_mapping_from_schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import (
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
)

from floe.optimizing.commit_request import written_file_to_data_file
from floe.protocol.rewrite_task import InputDataFile, InputDeleteFile, RewriteTaskResult, RewriteTaskSpec
from floe.rewrite import limits, source
from floe.rewrite.errors import DeleteSetTooLarge, RewriteError
from floe.rewrite.result_check import ResultCheckFailed, check_result
from floe.rewrite.task import run_position_task, run_rewrite_task

FIELD_ID = b"PARQUET:field_id"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "score", DoubleType(), required=False),
)


def _write(
    path: Path, schema: Schema, columns: dict[str, list[Any]], row_group_size: int | None = None
) -> Path:
    """Write a Parquet file whose columns carry the schema's field ids."""
    arrow_schema = schema_to_pyarrow(schema)
    pq.write_table(pa.table(columns, schema=arrow_schema), path, row_group_size=row_group_size)
    return path


def _data(
    tmp_path: Path, name: str, ids: list[int], *, seq: int, names: list[str | None] | None = None
) -> InputDataFile:
    path = _write(
        tmp_path / name,
        SCHEMA,
        {
            "id": ids,
            "name": names if names is not None else [f"n{i}" for i in ids],
            "score": [float(i) / 2 for i in ids],
        },
    )
    return InputDataFile(
        path=str(path), record_count=len(ids), size_bytes=path.stat().st_size, data_sequence_number=seq
    )


def _position_deletes(tmp_path: Path, name: str, rows: list[tuple[str, int]], *, seq: int) -> InputDeleteFile:
    path = tmp_path / name
    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), nullable=False, metadata={FIELD_ID: b"2147483546"}),
            pa.field("pos", pa.int64(), nullable=False, metadata={FIELD_ID: b"2147483545"}),
        ]
    )
    table = pa.table({"file_path": [r[0] for r in rows], "pos": [r[1] for r in rows]}, schema=schema)
    pq.write_table(table, path)
    return InputDeleteFile(
        path=str(path),
        kind=1,
        record_count=len(rows),
        size_bytes=path.stat().st_size,
        data_sequence_number=seq,
    )


def _equality_deletes(
    tmp_path: Path, name: str, schema: Schema, columns: dict[str, list[Any]], *, seq: int
) -> InputDeleteFile:
    path = _write(tmp_path / name, schema, columns)
    return InputDeleteFile(
        path=str(path),
        kind=2,
        record_count=len(next(iter(columns.values()))),
        size_bytes=path.stat().st_size,
        data_sequence_number=seq,
        equality_ids=[f.field_id for f in schema.fields],
    )


def _spec(
    tmp_path: Path,
    data: list[InputDataFile],
    deletes: list[InputDeleteFile] | None = None,
    *,
    schema: Schema = SCHEMA,
    partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
    target: int = 128 * 1024 * 1024,
    delete_limit: int = 64 * 1024 * 1024,
    name_mapping_json: str | None = None,
) -> RewriteTaskSpec:
    return RewriteTaskSpec(
        task_id="task-1",
        io_properties={},
        table_schema_json=schema.model_dump_json(),
        partition_spec_json=partition_spec.model_dump_json(),
        name_mapping_json=name_mapping_json,
        output_dir=str(tmp_path / "out"),
        data_files=data,
        delete_files=deletes or [],
        target_file_size_bytes=target,
        delete_memory_limit_bytes=delete_limit,
        file_name_prefix="p1-t1-a0",
    )


def _rows(result: RewriteTaskResult) -> list[dict[str, Any]]:
    tables = [pq.read_table(f.path) for f in result.files]
    rows: list[dict[str, Any]] = pa.concat_tables(tables).to_pylist() if tables else []
    return sorted(rows, key=lambda r: r["id"])


def _ids(result: RewriteTaskResult) -> list[int]:
    return [r["id"] for r in _rows(result)]


def _decode(iceberg_type: PrimitiveType, hex_bound: str) -> Any:
    return from_bytes(iceberg_type, bytes.fromhex(hex_bound))


def _output_files(tmp_path: Path) -> list[Path]:
    out = tmp_path / "out"
    return sorted(out.iterdir()) if out.exists() else []


def test_rewrites_data_files_into_one_file_without_deletes(tmp_path: Path) -> None:
    a = _data(tmp_path, "a.parquet", [1, 2, 3], seq=1)
    b = _data(tmp_path, "b.parquet", [4, 5], seq=2)

    result = run_rewrite_task(_spec(tmp_path, [a, b]))

    assert len(result.files) == 1
    assert result.files[0].path == f"{tmp_path}/out/p1-t1-a0-00000.parquet"
    assert _rows(result)[0] == {"id": 1, "name": "n1", "score": 0.5}
    assert _ids(result) == [1, 2, 3, 4, 5]
    assert (result.rows_read, result.rows_deleted) == (5, 0)
    assert result.bytes_read == a.size_bytes + b.size_bytes


def test_position_deletes_follow_sequence_numbers(tmp_path: Path) -> None:
    a = _data(tmp_path, "a.parquet", [10, 11, 12, 13], seq=3)
    b = _data(tmp_path, "b.parquet", [20, 21, 22], seq=5)
    # Same sequence number as a: applies to a, but not to b (newer).
    same_seq = _position_deletes(tmp_path, "d1.parquet", [(a.path, 0), (b.path, 2)], seq=3)
    older = _position_deletes(tmp_path, "d2.parquet", [(b.path, 0)], seq=4)
    newer = _position_deletes(
        tmp_path, "d3.parquet", [(b.path, 1), (a.path, 3), ("/elsewhere.parquet", 0)], seq=6
    )

    result = run_rewrite_task(_spec(tmp_path, [a, b], [same_seq, older, newer]))

    assert _ids(result) == [11, 12, 20, 22]
    assert (result.rows_read, result.rows_deleted) == (7, 3)
    assert result.bytes_read == sum(f.size_bytes for f in (a, b, same_seq, older, newer))


def test_a_row_two_position_delete_files_name_is_deleted_once(tmp_path: Path) -> None:
    data = _data(tmp_path, "a.parquet", [1, 2, 3, 4], seq=1)
    # Both name position 1 (v2 allows it: Spark's DELETE and a merged position-delete file can).
    first = _position_deletes(tmp_path, "d1.parquet", [(data.path, 1), (data.path, 2)], seq=2)
    second = _position_deletes(tmp_path, "d2.parquet", [(data.path, 1)], seq=3)
    spec = _spec(tmp_path, [data], [first, second])

    result = run_rewrite_task(spec)

    assert _ids(result) == [1, 4]
    assert (result.rows_read, result.rows_deleted) == (4, 2)
    check_result(spec, result, PyArrowFileIO())


def test_position_deletes_address_rows_across_row_groups_and_batches(tmp_path: Path) -> None:
    ids = list(range(200_000))
    path = _write(
        tmp_path / "big.parquet",
        SCHEMA,
        {"id": ids, "name": [None] * len(ids), "score": [None] * len(ids)},
        row_group_size=30_000,
    )
    data = InputDataFile(
        path=str(path), record_count=len(ids), size_bytes=path.stat().st_size, data_sequence_number=1
    )
    doomed = [0, 29_999, 30_000, 65_535, 65_536, 131_072, 199_999]
    deletes = _position_deletes(tmp_path, "d.parquet", [(data.path, p) for p in doomed], seq=1)

    result = run_rewrite_task(_spec(tmp_path, [data], [deletes]))

    surviving = _ids(result)
    assert len(surviving) == len(ids) - len(doomed)
    assert not set(doomed) & set(surviving)
    assert result.rows_deleted == len(doomed)


def test_equality_deletes_apply_only_to_strictly_older_data(tmp_path: Path) -> None:
    old = _data(tmp_path, "old.parquet", [1, 2, 3], seq=1)
    same = _data(tmp_path, "same.parquet", [4, 5, 6], seq=2)
    id_schema = Schema(NestedField(1, "id", LongType(), required=True))
    deletes = _equality_deletes(tmp_path, "eq.parquet", id_schema, {"id": [2, 5, 99]}, seq=2)

    result = run_rewrite_task(_spec(tmp_path, [old, same], [deletes]))

    assert _ids(result) == [1, 3, 4, 5, 6]
    assert result.rows_deleted == 1


def test_single_column_equality_delete_matches_null(tmp_path: Path) -> None:
    data = _data(tmp_path, "a.parquet", [1, 2, 3], seq=1, names=["x", None, "y"])
    name_schema = Schema(NestedField(2, "name", StringType(), required=False))
    deletes = _equality_deletes(tmp_path, "eq.parquet", name_schema, {"name": [None]}, seq=2)

    result = run_rewrite_task(_spec(tmp_path, [data], [deletes]))

    assert _ids(result) == [1, 3]


def test_multi_column_equality_deletes_are_null_safe(tmp_path: Path) -> None:
    data = _data(tmp_path, "a.parquet", [1, 1, 2, 2, 3, 3], seq=1, names=["a", None, "b", None, None, "c"])
    key_schema = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType(), required=False)
    )
    deletes = _equality_deletes(
        tmp_path,
        "eq.parquet",
        key_schema,
        # (1, null) deletes only the null row of id 1; (2, "zz") and (3, "b") match nothing.
        {"id": [1, 2, 3], "name": [None, "zz", "b"]},
        seq=2,
    )

    result = run_rewrite_task(_spec(tmp_path, [data], [deletes]))

    assert [(r["id"], r["name"]) for r in _rows(result)] == [
        (1, "a"),
        (2, "b"),
        (2, None),
        (3, None),
        (3, "c"),
    ]
    assert result.rows_deleted == 1


def test_several_equality_delete_files_with_different_field_sets(tmp_path: Path) -> None:
    a = _data(tmp_path, "a.parquet", [1, 2, 3, 4, 5, 6], seq=1, names=["a", "b", "c", "d", "e", None])
    b = _data(tmp_path, "b.parquet", [7, 8], seq=3, names=["a", "b"])
    by_id = _equality_deletes(
        tmp_path, "by_id.parquet", Schema(NestedField(1, "id", LongType(), required=True)), {"id": [1]}, seq=2
    )
    by_name = _equality_deletes(
        tmp_path,
        "by_name.parquet",
        Schema(NestedField(2, "name", StringType(), required=False)),
        {"name": ["b", None]},
        seq=4,
    )
    by_both = _equality_deletes(
        tmp_path,
        "by_both.parquet",
        Schema(
            NestedField(2, "name", StringType(), required=False),
            NestedField(1, "id", LongType(), required=True),
        ),
        {"name": ["d", "a"], "id": [4, 7]},
        seq=2,  # older than b: (7, "a") survives
    )

    result = run_rewrite_task(_spec(tmp_path, [a, b], [by_id, by_name, by_both]))

    assert _ids(result) == [3, 5, 7]
    assert (result.rows_read, result.rows_deleted) == (8, 5)


def test_multi_column_equality_deletes_across_row_groups(tmp_path: Path) -> None:
    rows = 200_000
    ids = pa.array(range(rows), pa.int64())
    names = pc.if_else(
        pc.equal(pc.bit_wise_and(ids, 7), 0), pa.scalar(None, pa.string()), pc.cast(ids, pa.string())
    )
    path = _write(
        tmp_path / "a.parquet", SCHEMA, {"id": ids, "name": names, "score": ids}, row_group_size=30_000
    )
    data = InputDataFile(
        path=str(path), record_count=rows, size_bytes=path.stat().st_size, data_sequence_number=1
    )
    doomed = pc.equal(pc.bit_wise_and(ids, 3), 0)  # every 4th row: half of them have a null name
    key_schema = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType(), required=False)
    )
    deletes = _equality_deletes(
        tmp_path,
        "eq.parquet",
        key_schema,
        {"id": ids.filter(doomed), "name": names.filter(doomed)},
        seq=2,
    )

    result = run_rewrite_task(_spec(tmp_path, [data], [deletes]))

    assert _ids(result) == ids.filter(pc.invert(doomed)).to_pylist()
    assert result.rows_deleted == rows // 4


def test_equality_deletes_follow_each_files_sequence_number_across_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny batches and chunks: rows of several data files are matched together, and chunks
    # end inside files and where the applying delete files change.
    monkeypatch.setattr(limits, "READ_BATCH_ROWS", 2)
    monkeypatch.setattr(limits, "EQUALITY_CHUNK_FACTOR", 1)
    seqs = [5, 1, 3, 1, 3]  # interleaved, so the task must not assume the spec's order
    data = [
        _data(
            tmp_path,
            f"d{n}.parquet",
            [n * 10 + i for i in range(5)],
            seq=seq,
            names=["k", None, "k", "x", "y"],
        )
        for n, seq in enumerate(seqs)
    ]
    name_schema = Schema(NestedField(2, "name", StringType(), required=False))
    id_schema = Schema(NestedField(1, "id", LongType(), required=True))
    older = _equality_deletes(tmp_path, "eq2.parquet", name_schema, {"name": [None, "zz"]}, seq=2)
    newer = _equality_deletes(tmp_path, "eq4.parquet", name_schema, {"name": ["k"]}, seq=4)
    by_id = _equality_deletes(tmp_path, "eq4id.parquet", id_schema, {"id": [3, 13, 23, 33, 43]}, seq=4)

    result = run_rewrite_task(_spec(tmp_path, data, [older, newer, by_id]))

    expected = []
    for n, seq in enumerate(seqs):
        for i, name in enumerate(["k", None, "k", "x", "y"]):
            deleted = (seq < 2 and name is None) or (seq < 4 and (name == "k" or i == 3))
            if not deleted:
                expected.append(n * 10 + i)
    assert _ids(result) == sorted(expected)
    assert (result.rows_read, result.rows_deleted) == (25, 25 - len(expected))


def test_files_differing_only_in_field_ids_are_projected_apart(tmp_path: Path) -> None:
    # "name" was dropped (field 2) and added again (field 5): same Arrow names and types,
    # different field ids, so the old file's values must not appear as the new column's.
    before = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType(), required=False)
    )
    current = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(5, "name", StringType(), required=False)
    )
    old_path = _write(tmp_path / "old.parquet", before, {"id": [1], "name": ["dropped"]})
    new_path = _write(tmp_path / "new.parquet", current, {"id": [2], "name": ["kept"]})
    data = [
        InputDataFile(path=str(p), record_count=1, size_bytes=p.stat().st_size, data_sequence_number=1)
        for p in (old_path, new_path, old_path)
    ]

    result = run_rewrite_task(_spec(tmp_path, data, schema=current))

    assert _rows(result) == [{"id": 1, "name": None}, {"id": 1, "name": None}, {"id": 2, "name": "kept"}]


def test_equality_delete_on_a_struct_field(tmp_path: Path) -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(
            2, "place", StructType(NestedField(3, "city", StringType(), required=False)), required=False
        ),
    )
    path = _write(
        tmp_path / "a.parquet",
        schema,
        {"id": [1, 2, 3, 4], "place": [{"city": "Oslo"}, {"city": "Rome"}, None, {"city": None}]},
    )
    data = InputDataFile(
        path=str(path), record_count=4, size_bytes=path.stat().st_size, data_sequence_number=1
    )
    city_schema = Schema(
        NestedField(
            2, "place", StructType(NestedField(3, "city", StringType(), required=False)), required=False
        )
    )
    path = _write(tmp_path / "eq.parquet", city_schema, {"place": [{"city": "Rome"}, {"city": None}]})
    deletes = InputDeleteFile(
        path=str(path),
        kind=2,
        record_count=2,
        size_bytes=path.stat().st_size,
        data_sequence_number=2,
        equality_ids=[3],
    )

    result = run_rewrite_task(_spec(tmp_path, [data], [deletes], schema=schema))

    # A null struct has a null city, so the null delete value matches it too.
    assert _ids(result) == [1]


def test_position_and_equality_deletes_together(tmp_path: Path) -> None:
    data = _data(tmp_path, "a.parquet", [1, 2, 3, 4], seq=1)
    positions = _position_deletes(tmp_path, "pos.parquet", [(data.path, 0), (data.path, 1)], seq=2)
    equality = _equality_deletes(
        tmp_path, "eq.parquet", Schema(NestedField(1, "id", LongType(), required=True)), {"id": [2, 3]}, seq=2
    )

    result = run_rewrite_task(_spec(tmp_path, [data], [positions, equality]))

    assert _ids(result) == [4]
    assert result.rows_deleted == 3


def test_schema_evolution_projects_by_field_id(tmp_path: Path) -> None:
    old_schema = Schema(
        NestedField(1, "id", IntegerType(), required=True),
        NestedField(2, "old_name", StringType(), required=False),
    )
    old_path = _write(tmp_path / "old.parquet", old_schema, {"id": [1, 2], "old_name": ["a", "b"]})
    current = Schema(
        NestedField(1, "id", LongType(), required=True),  # promoted int -> long
        NestedField(2, "new_name", StringType(), required=False),  # renamed
        NestedField(4, "added", DoubleType(), required=False),  # absent from the old file
    )
    new_path = _write(tmp_path / "new.parquet", current, {"id": [3], "new_name": ["c"], "added": [1.5]})
    data = [
        InputDataFile(path=str(p), record_count=n, size_bytes=p.stat().st_size, data_sequence_number=1)
        for p, n in ((old_path, 2), (new_path, 1))
    ]
    deletes = _equality_deletes(
        tmp_path,
        "eq.parquet",
        Schema(NestedField(2, "before_rename", StringType(), required=False)),
        {"before_rename": ["b"]},
        seq=2,
    )

    result = run_rewrite_task(_spec(tmp_path, data, [deletes], schema=current))

    assert _rows(result) == [
        {"id": 1, "new_name": "a", "added": None},
        {"id": 3, "new_name": "c", "added": 1.5},
    ]
    written_schema = pq.read_schema(result.files[0].path)
    assert [f.metadata[FIELD_ID] for f in written_schema] == [b"1", b"2", b"4"]
    assert written_schema.field("id").type == pa.int64()


def test_files_without_field_ids_need_a_name_mapping(tmp_path: Path) -> None:
    path = tmp_path / "imported.parquet"
    pq.write_table(pa.table({"id": [1, 2], "name": ["a", "b"], "score": [None, 2.0]}), path)
    data = InputDataFile(
        path=str(path), record_count=2, size_bytes=path.stat().st_size, data_sequence_number=1
    )

    with pytest.raises(RewriteError, match=r"imported\.parquet"):
        run_rewrite_task(_spec(tmp_path, [data]))

    mapping = create_mapping_from_schema(SCHEMA).model_dump_json()
    result = run_rewrite_task(_spec(tmp_path, [data], name_mapping_json=mapping))
    assert _rows(result) == [{"id": 1, "name": "a", "score": None}, {"id": 2, "name": "b", "score": 2.0}]


def test_missing_required_column_is_refused(tmp_path: Path) -> None:
    current = Schema(*SCHEMA.fields, NestedField(4, "region", StringType(), required=True))
    data = _data(tmp_path, "a.parquet", [1], seq=1)

    with pytest.raises(RewriteError, match=r"a\.parquet cannot be read as the table schema"):
        run_rewrite_task(_spec(tmp_path, [data], schema=current))


def test_missing_identity_partition_column_is_refused(tmp_path: Path) -> None:
    current = Schema(*SCHEMA.fields, NestedField(4, "region", StringType(), required=False))
    spec = PartitionSpec(
        PartitionField(source_id=4, field_id=1000, transform=IdentityTransform(), name="region")
    )
    data = _data(tmp_path, "a.parquet", [1], seq=1)  # written without the region column

    with pytest.raises(RewriteError, match="region"):
        run_rewrite_task(_spec(tmp_path, [data], schema=current, partition_spec=spec))


def test_record_count_mismatch_is_refused(tmp_path: Path) -> None:
    data = _data(tmp_path, "a.parquet", [1, 2], seq=1).model_copy(update={"record_count": 3})

    with pytest.raises(RewriteError, match="has 2 rows"):
        run_rewrite_task(_spec(tmp_path, [data]))


def _incompressible(tmp_path: Path, name: str, rows: int, seed: int) -> InputDataFile:
    random = pc.random(rows, initializer=seed)
    path = _write(
        tmp_path / name,
        SCHEMA,
        {
            "id": pa.array(range(rows), pa.int64()),
            "name": pc.cast(random, pa.string()),
            "score": random,
        },
        row_group_size=50_000,
    )
    return InputDataFile(
        path=str(path), record_count=rows, size_bytes=path.stat().st_size, data_sequence_number=1
    )


def test_output_rolls_at_the_target_size(tmp_path: Path) -> None:
    data = [_incompressible(tmp_path, f"d{i}.parquet", 100_000, seed=i) for i in range(2)]
    target = 512 * 1024

    result = run_rewrite_task(_spec(tmp_path, data, target=target))

    sizes = [f.size_bytes for f in result.files]
    assert len(sizes) >= 4
    assert [Path(f.path).name for f in result.files] == [
        f"p1-t1-a0-{i:05d}.parquet" for i in range(len(sizes))
    ]
    for size in sizes[:-1]:
        assert 0.9 * target <= size <= 1.1 * target, sizes
    assert sizes[-1] <= 1.1 * target
    assert sizes == [Path(f.path).stat().st_size for f in result.files]
    assert sum(f.record_count for f in result.files) == 200_000
    assert _ids(result) == sorted(list(range(100_000)) * 2)


def _compressible(tmp_path: Path, name: str, rows: int, seed: int) -> InputDataFile:
    """Random ids below a million, names from a thousand, scores from a hundred: about a quarter
    of their Arrow size once written."""
    draws = pc.multiply(pc.random(rows, initializer=seed), 1_000_000)
    thousands = pc.cast(pc.floor(pc.divide(draws, 1000)), pa.string())
    path = _write(
        tmp_path / name,
        SCHEMA,
        {
            "id": pc.cast(pc.floor(draws), pa.int64()),
            "name": pc.binary_join_element_wise("n", thousands, ""),
            "score": pc.floor(pc.divide(draws, 10_000)),
        },
    )
    return InputDataFile(
        path=str(path), record_count=rows, size_bytes=path.stat().st_size, data_sequence_number=1
    )


def _row_group_sizes(path: str) -> list[tuple[int, int]]:
    """(rows, written bytes) of each row group of a Parquet file."""
    metadata = pq.ParquetFile(path).metadata
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    written = [sum(g.column(c).total_compressed_size for c in range(g.num_columns)) for g in groups]
    return [(g.num_rows, size) for g, size in zip(groups, written, strict=True)]


def test_row_groups_fill_the_tables_row_group_size_from_the_first_one(tmp_path: Path) -> None:
    data = [_compressible(tmp_path, f"d{i}.parquet", 200_000, seed=i) for i in range(2)]
    limit = 64 * 1024
    spec = _spec(tmp_path, data).model_copy(
        update={"write_properties": {"write.parquet.row-group-size-bytes": str(limit)}}
    )

    (written,) = run_rewrite_task(spec).files

    sizes = _row_group_sizes(written.path)
    assert len(sizes) > 2
    # Sized at a ratio of 1.0, the first row group would hold about a quarter of the limit;
    # the inputs' ratio sizes it like the others.
    for _, size in sizes[:-1]:
        assert 0.5 * limit <= size <= 1.25 * limit, sizes
    assert sum(rows for rows, _ in sizes) == 400_000


def test_row_groups_stay_within_the_tasks_memory_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = [_compressible(tmp_path, f"d{i}.parquet", 200_000, seed=i) for i in range(2)]
    arrow_row_bytes = pq.read_table(data[0].path).nbytes / 200_000
    bound = 1024 * 1024
    monkeypatch.setattr(limits, "ROW_GROUP_MAX_BYTES", bound)

    # The table sets no row-group size: Iceberg's 128 MiB would take every row in one row group.
    (written,) = run_rewrite_task(_spec(tmp_path, data)).files

    sizes = _row_group_sizes(written.path)
    assert len(sizes) > 1
    assert max(rows for rows, _ in sizes) * arrow_row_bytes <= 1.01 * bound, sizes


def test_metrics_of_written_files(tmp_path: Path) -> None:
    data = _data(tmp_path, "a.parquet", [7, 3, 9, 5], seq=1, names=["kiwi", None, "mango", "apple"])
    nan_path = _write(
        tmp_path / "nan.parquet",
        SCHEMA,
        {"id": [11, 12], "name": [None, "zebra"], "score": [float("nan"), None]},
    )
    nan_data = InputDataFile(
        path=str(nan_path), record_count=2, size_bytes=nan_path.stat().st_size, data_sequence_number=1
    )
    deletes = _position_deletes(tmp_path, "d.parquet", [(data.path, 2)], seq=1)  # drops id 9, "mango"

    result = run_rewrite_task(_spec(tmp_path, [data, nan_data], [deletes]))

    (written,) = result.files
    assert written.record_count == 5
    assert written.value_counts == {1: 5, 2: 5, 3: 5}
    assert written.null_value_counts == {1: 0, 2: 2, 3: 1}
    assert written.nan_value_counts == {3: 1}
    assert _decode(LongType(), written.lower_bounds[1]) == 3
    assert _decode(LongType(), written.upper_bounds[1]) == 12
    assert _decode(StringType(), written.lower_bounds[2]) == "apple"
    assert _decode(StringType(), written.upper_bounds[2]) == "zebra"
    assert set(written.column_sizes) == {1, 2, 3}
    assert all(size > 0 for size in written.column_sizes.values())
    assert written.split_offsets == [4]
    assert written.size_bytes == Path(written.path).stat().st_size

    data_file = written_file_to_data_file(written, spec_id=3, partition=Record())
    assert data_file.content == DataFileContent.DATA
    assert data_file.file_format == FileFormat.PARQUET
    assert data_file.spec_id == 3
    assert data_file.file_path == written.path
    assert data_file.record_count == 5
    assert data_file.file_size_in_bytes == written.size_bytes
    assert data_file.lower_bounds[2] == b"apple"
    assert data_file.null_value_counts == {1: 0, 2: 2, 3: 1}
    assert data_file.split_offsets == [4]


def test_long_strings_get_truncated_bounds(tmp_path: Path) -> None:
    data = _data(tmp_path, "a.parquet", [1, 2], seq=1, names=["a" * 40, "b" * 40])

    (written,) = run_rewrite_task(_spec(tmp_path, [data])).files

    assert _decode(StringType(), written.lower_bounds[2]) == "a" * 16
    assert _decode(StringType(), written.upper_bounds[2]) == "b" * 15 + "c"


def test_no_file_when_every_row_is_deleted(tmp_path: Path) -> None:
    data = _data(tmp_path, "a.parquet", [1, 2], seq=1)
    deletes = _equality_deletes(
        tmp_path, "eq.parquet", Schema(NestedField(1, "id", LongType(), required=True)), {"id": [1, 2]}, seq=2
    )

    result = run_rewrite_task(_spec(tmp_path, [data], [deletes]))

    assert result.files == []
    assert (result.rows_read, result.rows_deleted) == (2, 2)
    assert _output_files(tmp_path) == []


def test_delete_set_over_the_memory_limit_is_a_clear_error(tmp_path: Path) -> None:
    data = _data(tmp_path, "a.parquet", list(range(100)), seq=1)
    deletes = _position_deletes(tmp_path, "d.parquet", [(data.path, p) for p in range(50)], seq=1)

    with pytest.raises(DeleteSetTooLarge, match=r"task task-1: .*delete_memory_limit_bytes=64 .*/d\.parquet"):
        run_rewrite_task(_spec(tmp_path, [data], [deletes], delete_limit=64))
    assert _output_files(tmp_path) == []


def test_failure_midway_deletes_the_files_already_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = _incompressible(tmp_path, "ok.parquet", 60_000, seed=1)
    missing = InputDataFile(
        path=str(tmp_path / "gone.parquet"), record_count=1, size_bytes=1, data_sequence_number=1
    )
    deleted: list[str] = []
    delete = PyArrowFileIO.delete

    def recording_delete(io: PyArrowFileIO, location: str | InputFile | OutputFile) -> None:
        deleted.append(str(location))
        delete(io, location)

    monkeypatch.setattr(PyArrowFileIO, "delete", recording_delete)

    with pytest.raises(FileNotFoundError, match=r"gone\.parquet"):
        run_rewrite_task(_spec(tmp_path, [written, missing], target=256 * 1024))
    assert len(deleted) > 1  # the first data file had filled several files
    assert _output_files(tmp_path) == []


def test_data_file_larger_than_the_delete_limit_streams(tmp_path: Path) -> None:
    data = _incompressible(tmp_path, "big.parquet", 1_000_000, seed=7)
    deletes = _position_deletes(tmp_path, "d.parquet", [(data.path, 5)], seq=1)
    spec = _spec(tmp_path, [data], [deletes], target=256 * 1024, delete_limit=64 * 1024)
    arrow_bytes = pq.read_table(data.path).nbytes
    assert data.size_bytes > spec.delete_memory_limit_bytes

    # A fresh interpreter, so the Arrow memory pool's high-water mark is this rewrite's alone.
    script = textwrap.dedent(
        """
        import json, sys
        import pyarrow as pa
        from floe.rewrite.task import run_rewrite_task
        from floe.protocol.rewrite_task import RewriteTaskSpec

        result = run_rewrite_task(RewriteTaskSpec.model_validate_json(sys.stdin.read()))
        print(json.dumps({"peak": pa.default_memory_pool().max_memory(), "result": result.model_dump_json()}))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        input=spec.model_dump_json(),
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(run.stdout)
    result = RewriteTaskResult.model_validate_json(report["result"])

    assert (result.rows_read, result.rows_deleted) == (1_000_000, 1)
    assert len(result.files) > 1
    assert report["peak"] < arrow_bytes / 2, (report["peak"], arrow_bytes)


def test_list_and_map_columns_are_rewritten(tmp_path: Path) -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "tags", ListType(3, StringType()), required=False),
        NestedField(4, "attrs", MapType(5, StringType(), 6, LongType()), required=False),
    )
    columns = {
        "id": [1, 2, 3],
        "tags": [["a", "b"], [], None],
        "attrs": [[("k", 1)], None, [("x", 2), ("y", 3)]],
    }
    path = _write(tmp_path / "nested.parquet", schema, columns)
    size = path.stat().st_size
    data = InputDataFile(path=str(path), record_count=3, size_bytes=size, data_sequence_number=1)
    deletes = _position_deletes(tmp_path, "pos.parquet", [(str(path), 1)], seq=1)

    result = run_rewrite_task(_spec(tmp_path, [data], [deletes], schema=schema))

    assert (result.rows_read, result.rows_deleted) == (3, 1)
    assert pq.read_table(result.files[0].path).to_pylist() == [
        {"id": 1, "tags": ["a", "b"], "attrs": [("k", 1)]},
        {"id": 3, "tags": None, "attrs": [("x", 2), ("y", 3)]},
    ]


def _positions_of(result: RewriteTaskResult) -> dict[str, list[int]]:
    """Per data file, the positions its written position-delete file holds."""
    out: dict[str, list[int]] = {}
    for written in result.files:
        assert written.content == 1 and written.referenced_data_file is not None
        rows = pq.read_table(written.path)
        assert set(rows.column("file_path").to_pylist()) == {written.referenced_data_file}
        out[written.referenced_data_file] = rows.column("pos").to_pylist()
    return out


def test_a_positions_task_converts_equality_deletes_and_merges_position_deletes(tmp_path: Path) -> None:
    a = _data(tmp_path, "a.parquet", [1, 2, 3, 4, 5], seq=1)
    b = _data(tmp_path, "b.parquet", [6, 7, 8], seq=3)
    untouched = _data(tmp_path, "c.parquet", [20, 21], seq=1)
    key = Schema(NestedField(1, "id", LongType(), required=True))
    positions = [
        _position_deletes(tmp_path, "p1.parquet", [(a.path, 0), (a.path, 4)], seq=2),
        _position_deletes(tmp_path, "p2.parquet", [(a.path, 0), (b.path, 2)], seq=3),
    ]
    # Applies to a (seq 1 < 2), not to b (seq 3): b's id 7 stays.
    equality = _equality_deletes(tmp_path, "eq.parquet", key, {"id": [2, 7]}, seq=2)
    spec = _spec(tmp_path, [a, b, untouched], [*positions, equality]).model_copy(update={"kind": "positions"})

    result = run_position_task(spec)

    # a: rows 0 and 4 by position (0 twice), row 1 (id 2) by equality; b: row 2 by position.
    assert _positions_of(result) == {a.path: [0, 1, 4], b.path: [2]}
    assert (result.rows_read, result.rows_deleted) == (10, 4)
    assert all(Path(f.path).name.startswith("p1-t1-a0-") for f in result.files)
    # Full metrics: file_path bounds name the data file, as conflict checks need.
    bounds = {
        f.referenced_data_file: bytes.fromhex(f.upper_bounds[2147483546]).decode() for f in result.files
    }
    assert bounds == {a.path: a.path, b.path: b.path}
    # The task service takes the result; it refuses one that claims another file's rows.
    check_result(spec, result, PyArrowFileIO())
    forged = result.files[1].model_copy(update={"referenced_data_file": untouched.path})
    with pytest.raises(ResultCheckFailed, match="names other data files"):
        check_result(spec, result.model_copy(update={"files": [result.files[0], forged]}), PyArrowFileIO())


def test_a_positions_task_reads_only_the_equality_deletes_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data(tmp_path, "a.parquet", [1, 2, 3], seq=1)
    key = Schema(NestedField(1, "id", LongType(), required=True))
    equality = _equality_deletes(tmp_path, "eq.parquet", key, {"id": [3]}, seq=2)
    read_columns: list[list[str]] = []
    original = source._ParquetSource.batches

    def spy(self: Any, requested: Schema, batch_rows: int) -> Any:
        read_columns.append(requested.column_names)
        return original(self, requested, batch_rows)

    monkeypatch.setattr(source._ParquetSource, "batches", spy)
    result = run_position_task(_spec(tmp_path, [data], [equality]).model_copy(update={"kind": "positions"}))

    assert _positions_of(result) == {data.path: [2]}
    assert ["id"] in read_columns and not any("name" in cols for cols in read_columns)
