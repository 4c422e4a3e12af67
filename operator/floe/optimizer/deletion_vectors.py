"""Read a deletion vector: the positions a format v3 table deletes from one data file.

A vector is a Puffin blob of type ``deletion-vector-v1`` (Iceberg spec, "Deletion Vectors"):
a 4-byte big-endian length of what follows up to the checksum, the magic bytes ``D1 D3 39 64``,
a 64-bit Roaring bitmap in the portable format, and a big-endian CRC-32 of magic and bitmap.
The manifest entry gives the blob's offset and length, so only those bytes are read.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
from pyiceberg.io import FileIO
from pyroaring import BitMap64

from floe.optimizer.task_spec import InputDeleteFile

MAGIC = bytes([0xD1, 0xD3, 0x39, 0x64])


class DeletionVectorError(ValueError):
    """The bytes at a deletion vector's location are not one."""


def read_deletion_vector(io: FileIO, delete_file: InputDeleteFile) -> pa.Array:
    """The sorted positions (int64) the deletion vector `delete_file` deletes."""
    offset, size = delete_file.content_offset, delete_file.content_size_in_bytes
    if offset is None or size is None:
        raise DeletionVectorError(f"{delete_file.path} is not a deletion vector: it has no blob location")
    with io.new_input(delete_file.path).open(seekable=True) as stream:
        stream.seek(offset)
        blob = stream.read(size)
    where = f"deletion vector at {offset} in {delete_file.path}"
    return deletion_vector_positions(blob, where)


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
