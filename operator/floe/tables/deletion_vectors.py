"""Deletion vectors (format v3): the positions deleted from one data file, as a Puffin blob.

A vector is a blob of type ``deletion-vector-v1`` (Iceberg spec, "Deletion Vectors"): a 4-byte
big-endian length of what follows up to the checksum, the magic bytes ``D1 D3 39 64``, a 64-bit
Roaring bitmap in the portable format, and a big-endian CRC-32 of magic and bitmap. The
manifest entry gives the blob's offset and length, so a reader reads only those bytes. floe
writes one vector per Puffin file (Puffin spec: magic, blobs, then a footer of magic, JSON
payload, its length, flags and magic), as it writes one position-delete file per data file.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record
from pyroaring import BitMap64

MAGIC = bytes([0xD1, 0xD3, 0x39, 0x64])
PUFFIN_MAGIC = b"PFA1"
DELETION_VECTOR_BLOB = "deletion-vector-v1"
ROW_POSITION_FIELD_ID = 2147483645
"""``_pos``: the field a deletion vector's blob is declared over."""


class DeletionVectorError(ValueError):
    """The bytes at a deletion vector's location are not one."""


@dataclass(frozen=True)
class WrittenVector:
    """Where a vector was written: its Puffin file's size, and the blob's offset and length."""

    file_size: int
    offset: int
    length: int
    cardinality: int


def read_deletion_vector(io: FileIO, path: str, offset: int, length: int) -> pa.Array:
    """The sorted positions (int64) of the deletion vector at `offset` in Puffin file `path`."""
    with io.new_input(path).open(seekable=True) as stream:
        stream.seek(offset)
        blob = stream.read(length)
    return deletion_vector_positions(blob, f"deletion vector at {offset} in {path}")


def deletion_vector_positions(blob: bytes, where: str) -> pa.Array:
    """The positions a ``deletion-vector-v1`` blob holds, its framing and checksum checked."""
    if len(blob) < 12:
        raise DeletionVectorError(f"{where}: {len(blob)} bytes are too few for a deletion vector")
    length = int.from_bytes(blob[:4], "big")
    if length + 8 != len(blob) or blob[4:8] != MAGIC:
        raise DeletionVectorError(f"{where}: not a deletion-vector-v1 blob (length or magic bytes wrong)")
    body = blob[4 : 4 + length]
    if zlib.crc32(body) != int.from_bytes(blob[4 + length :], "big"):
        raise DeletionVectorError(f"{where}: the checksum does not match")
    try:
        bitmap = BitMap64.deserialize(body[4:])
    except ValueError as exc:
        raise DeletionVectorError(f"{where}: the bitmap cannot be read: {exc}") from None
    return pa.array(np.fromiter(bitmap, dtype=np.int64, count=len(bitmap)), type=pa.int64())


def deletion_vector_blob(positions: pa.Array) -> bytes:
    """The ``deletion-vector-v1`` blob of `positions` (distinct, non-negative)."""
    bitmap = BitMap64(positions.to_numpy(zero_copy_only=False).tolist())
    body = MAGIC + bitmap.serialize()
    return len(body).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")


def deletion_vector_data_file(
    path: str, referenced_data_file: str, written: WrittenVector, spec_id: int, partition: Record
) -> DataFile:
    """The manifest entry's file of a deletion vector floe wrote (a format v3 table's)."""
    vector = DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PUFFIN,
        partition=partition,
        record_count=written.cardinality,
        file_size_in_bytes=written.file_size,
        referenced_data_file=referenced_data_file,
        content_offset=written.offset,
        content_size_in_bytes=written.length,
    )
    # from_args only binds the manifest struct's fields; the spec id is kept beside them.
    vector.spec_id = spec_id
    return vector


def write_deletion_vector(
    io: FileIO, path: str, referenced_data_file: str, positions: pa.Array
) -> WrittenVector:
    """Write a Puffin file at `path` holding the one deletion vector of `referenced_data_file`."""
    blob = deletion_vector_blob(positions)
    offset = len(PUFFIN_MAGIC)
    footer = {
        "blobs": [
            {
                "type": DELETION_VECTOR_BLOB,
                "fields": [ROW_POSITION_FIELD_ID],
                # Inherited from the manifest entry, as Iceberg Java writes them.
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": offset,
                "length": len(blob),
                "properties": {
                    "referenced-data-file": referenced_data_file,
                    "cardinality": str(len(positions)),
                },
            }
        ],
        "properties": {"created-by": "floe"},
    }
    payload = json.dumps(footer, separators=(",", ":")).encode("utf-8")
    content = (
        PUFFIN_MAGIC
        + blob
        + PUFFIN_MAGIC
        + payload
        + len(payload).to_bytes(4, "little")
        + bytes(4)  # flags: the footer is not compressed
        + PUFFIN_MAGIC
    )
    with io.new_output(path).create(overwrite=False) as stream:
        stream.write(content)
    return WrittenVector(file_size=len(content), offset=offset, length=len(blob), cardinality=len(positions))


def puffin_blob_properties(io: FileIO, path: str) -> list[dict[str, str]]:
    """The properties of each blob a Puffin file's footer lists (its framing checked)."""
    with io.new_input(path).open(seekable=True) as stream:
        content = stream.read()
    if content[:4] != PUFFIN_MAGIC or content[-4:] != PUFFIN_MAGIC or content[-8] & 1:
        raise DeletionVectorError(f"{path} is not an uncompressed-footer Puffin file")
    size = int.from_bytes(content[-12:-8], "little")
    if content[-16 - size : -12 - size] != PUFFIN_MAGIC:
        raise DeletionVectorError(f"{path}: the Puffin footer is not where its length says")
    footer = json.loads(content[-12 - size : -12])
    return [dict(blob.get("properties", {})) for blob in footer.get("blobs", [])]
