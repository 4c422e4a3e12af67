"""Deletion vectors as floe writes and reads them, and what it says of bytes that are not one;
the task-spec fields that locate a vector, and what they refuse."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import DataFile
from pyiceberg.typedef import Record

from floe.commit.vectors import SecondDeletionVector, check_one_vector_per_data_file
from floe.protocol.rewrite_task import InputDeleteFile, RewriteTaskSpec
from floe.tables.deletion_vectors import (
    DeletionVectorError,
    WrittenVector,
    deletion_vector_blob,
    deletion_vector_data_file,
    deletion_vector_positions,
    puffin_blob_properties,
    read_deletion_vector,
    write_deletion_vector,
)

POSITIONS = pa.array([0, 3, 4, 70_000, 2**32 + 5], pa.int64())


def test_a_written_vector_reads_back_with_its_footer(tmp_path: Path) -> None:
    io = PyArrowFileIO()
    path = str(tmp_path / "dv.puffin")
    written = write_deletion_vector(io, path, "s3://b/data/f.parquet", POSITIONS)
    assert written.cardinality == 5 and written.file_size == (tmp_path / "dv.puffin").stat().st_size
    assert read_deletion_vector(io, path, written.offset, written.length).to_pylist() == POSITIONS.to_pylist()
    assert puffin_blob_properties(io, path) == [
        {"referenced-data-file": "s3://b/data/f.parquet", "cardinality": "5"}
    ]


def test_a_snapshot_with_two_vectors_for_one_data_file_is_refused_before_its_commit() -> None:
    written = WrittenVector(file_size=100, offset=4, length=40, cardinality=2)

    def vector(puffin: str, data_file: str, offset: int = 4) -> DataFile:
        return deletion_vector_data_file(puffin, data_file, replace(written, offset=offset), 0, Record())

    # Vectors of two data files in one Puffin file, and one vector listed twice, are fine.
    one_each = [vector("a.puffin", "f1.parquet"), vector("a.puffin", "f2.parquet", offset=44)]
    check_one_vector_per_data_file("db.t", [*one_each, one_each[0]])
    with pytest.raises(SecondDeletionVector) as refused:
        check_one_vector_per_data_file("db.t", [*one_each, vector("b.puffin", "f1.parquet")])
    assert str(refused.value) == (
        "table db.t: the new snapshot would hold two deletion vectors for data file f1.parquet "
        "(a.puffin#4 and b.puffin#4)"
    )


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda blob: blob[:10], "too few for a deletion vector"),
        (lambda blob: blob[:-1], "length or magic bytes wrong"),
        (lambda blob: blob[:4] + b"\x00" + blob[5:], "length or magic bytes wrong"),
        (lambda blob: blob[:-4] + bytes(4), "the checksum does not match"),
    ],
)
def test_bytes_that_are_not_a_vector_are_refused_by_name(
    damage: Callable[[bytes], bytes], message: str
) -> None:
    blob = deletion_vector_blob(POSITIONS)
    with pytest.raises(DeletionVectorError, match=rf"^dv at 4 in x\.puffin: .*{message}"):
        deletion_vector_positions(damage(blob), "dv at 4 in x.puffin")


def test_a_bitmap_that_cannot_be_read_is_refused_even_with_a_right_checksum() -> None:
    body = bytes([0xD1, 0xD3, 0x39, 0x64]) + (7).to_bytes(8, "little") + b"\x01\x02"
    blob = len(body).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")
    with pytest.raises(DeletionVectorError, match="the bitmap cannot be read"):
        deletion_vector_positions(blob, "dv")


def test_a_file_that_is_not_puffin_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.puffin").write_bytes(b"PAR1 not a puffin file PAR1")
    with pytest.raises(DeletionVectorError, match="is not an uncompressed-footer Puffin file"):
        puffin_blob_properties(PyArrowFileIO(), str(tmp_path / "x.puffin"))


BASE = {
    "path": "s3://b/dv.puffin",
    "kind": 1,
    "record_count": 3,
    "size_bytes": 100,
    "data_sequence_number": 2,
}


@pytest.mark.parametrize(
    "partial",
    [
        {"content_offset": 4},
        {"content_offset": 4, "content_size_in_bytes": 40},
        {"referenced_data_file": "s3://b/f.parquet"},
        {"content_offset": 4, "content_size_in_bytes": 40, "referenced_data_file": "f", "kind": 2},
    ],
)
def test_a_task_refuses_a_deletion_vector_it_could_not_locate(partial: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="a deletion vector is a position delete with content_offset"):
        InputDeleteFile.model_validate({**BASE, **partial})
    whole = {"content_offset": 4, "content_size_in_bytes": 40, "referenced_data_file": "s3://b/f.parquet"}
    assert InputDeleteFile.model_validate({**BASE, **whole}).content_offset == 4


def test_a_task_refuses_a_format_version_it_does_not_know() -> None:
    fields = RewriteTaskSpec.model_json_schema()["properties"]["format_version"]
    assert (fields["minimum"], fields["maximum"]) == (1, 3)
    with pytest.raises(ValidationError, match="format_version\n  Input should be less than or equal to 3"):
        RewriteTaskSpec.model_validate(
            {
                "task_id": "t",
                "io_properties": {},
                "table_schema_json": "{}",
                "partition_spec_json": "{}",
                "output_dir": "/tmp",
                "data_files": [],
                "target_file_size_bytes": 1,
                "delete_memory_limit_bytes": 1,
                "file_name_prefix": "p",
                "format_version": 4,
            }
        )
