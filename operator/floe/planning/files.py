"""Plain-value view of a table's live files, the input of evaluation and planning.

Nothing here touches a catalog or Spark: `floe.tables.scan` turns a pyiceberg snapshot
into these values, and everything downstream works on them.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

_CANONICAL_NAN_BITS = 0x7FF8_0000_0000_0000
_MAGNITUDE_BITS = 0x7FFF_FFFF_FFFF_FFFF


class FileKind(IntEnum):
    """Iceberg content type of a file (same numbers as the spec)."""

    DATA = 0
    POSITION_DELETES = 1
    EQUALITY_DELETES = 2


def float_identity(value: float) -> int:
    """A float as the int Iceberg Java compares it by (``Double.compare``): its bits, every NaN
    one value above infinity, -0.0 below 0.0, ordered as the floats are.

    A float partition value is stored as a 32- or 64-bit float; both widen to a Python float
    without losing a sign or a NaN, so the identity of the widened value serves either.
    """
    bits = _CANONICAL_NAN_BITS if math.isnan(value) else struct.unpack(">q", struct.pack(">d", value))[0]
    # Negative floats order the other way round from their bits read as a signed int.
    return bits ^ _MAGNITUDE_BITS if bits < 0 else bits


def partition_identity(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A partition tuple as Iceberg Java compares partitions (``Comparators``): floats by
    `float_identity`, so that two NaNs are one partition and 0.0 and -0.0 are two, where
    Python's ``==`` says the opposite; other values as they are (a field of a spec has one type).
    """
    return tuple(float_identity(v) if isinstance(v, float) else v for v in values)


@dataclass(frozen=True)
class PartitionKey:
    """A partition of one partition spec: spec id plus the partition tuple.

    `global_scope` marks the unpartitioned spec, whose equality deletes apply to every
    partition of every spec (Iceberg's "global" deletes). Keys are equal and hash by
    `identity` (`partition_identity` of the values), never by the printable `values`.
    """

    spec_id: int
    values: tuple[Any, ...] = field(compare=False)
    global_scope: bool = False
    identity: tuple[Any, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "identity", partition_identity(self.values))

    def describe(self, field_names: tuple[str, ...] = ()) -> str:
        """Human-readable form such as ``day=19723/bucket=3`` or ``<unpartitioned>``."""
        if not self.values:
            return "<unpartitioned>"
        if field_names and len(field_names) == len(self.values):
            return "/".join(f"{n}={v}" for n, v in zip(field_names, self.values, strict=True))
        return "/".join(str(v) for v in self.values)


@dataclass(frozen=True)
class ContentFile:
    """One live data or delete file with what evaluation needs to know about it.

    `data_sequence_number` follows Iceberg's rules: an equality delete applies to data
    files with a strictly smaller one, a position delete to files with a smaller or
    equal one. `referenced_data_file` is set on a position delete known to target a
    single data file (from `referenced_data_file` or equal file_path bounds).
    """

    path: str
    """The file's path; for a deletion vector, `deletion_vector_key` (its Puffin file holds the
    vectors of many data files, each one a file of its own to the table)."""
    kind: FileKind
    partition: PartitionKey
    record_count: int
    size_bytes: int
    data_sequence_number: int
    equality_ids: tuple[int, ...] = ()
    referenced_data_file: str | None = None
    content_offset: int | None = None
    """Where a deletion vector's blob starts in its Puffin file; None for any other file."""
    content_size: int | None = None
    """The length of a deletion vector's blob."""
    first_row_id: int | None = None
    """The ``_row_id`` of a format v3 data file's first row; None before v3."""

    @property
    def location(self) -> str:
        """Where the file's bytes are: its path, or a deletion vector's Puffin file."""
        if self.content_offset is None:
            return self.path
        return self.path.removesuffix(f"#{self.content_offset}")


def deletion_vector_key(puffin_path: str, content_offset: int) -> str:
    """The path floe knows a deletion vector by: its Puffin file's, with the blob's offset."""
    return f"{puffin_path}#{content_offset}"


MERGED_POSITIONS_SUFFIX = "-merged-positions.parquet"
"""How the name of a position-delete file a positions task wrote for one data file ends."""
MERGED_VECTOR_SUFFIX = "-merged-positions.puffin"
"""How the name of the Puffin file ends that holds the deletion vector a positions task wrote
for one data file (format v3)."""


def merged_positions(data: ContentFile, deletes: Sequence[ContentFile]) -> tuple[ContentFile, ...]:
    """The position-delete files (or deletion vector) positions tasks wrote for `data`, among `deletes`."""
    return tuple(
        d
        for d in deletes
        if d.kind == FileKind.POSITION_DELETES
        and d.referenced_data_file == data.path
        and d.location.endswith((MERGED_POSITIONS_SUFFIX, MERGED_VECTOR_SUFFIX))
    )


def pending_deletes(data: ContentFile, deletes: Sequence[ContentFile]) -> tuple[ContentFile, ...]:
    """The deletes in force for `data`, less those its merged position-delete files already hold.

    A positions task writes, for each data file, a merged file holding every row its deletes
    removed when the process was planned, but for the rows of the merged files it keeps (floe's
    policy keeps the larger ones, `floe_policy.positions_to_merge`); the file carries the
    planning snapshot's sequence number. So the merged files, and the deletes newer than the
    latest of them, are the data file's deletes: an older delete is held by one of them. Without
    a merged file, every delete is pending.
    """
    merged = merged_positions(data, deletes)
    if not merged:
        return tuple(deletes)
    latest = max(d.data_sequence_number for d in merged)
    ours = {d.path for d in merged}
    return tuple(d for d in deletes if d.path in ours or d.data_sequence_number > latest)


def delete_applies_to(delete: ContentFile, data: ContentFile) -> bool:
    """Whether `delete` can remove rows of `data` under Iceberg's scoping rules."""
    if delete.kind == FileKind.POSITION_DELETES:
        if delete.partition != data.partition:
            return False
        if delete.referenced_data_file is not None and delete.referenced_data_file != data.path:
            return False
        return data.data_sequence_number <= delete.data_sequence_number
    if delete.kind == FileKind.EQUALITY_DELETES:
        in_scope = delete.partition.global_scope or delete.partition == data.partition
        return in_scope and data.data_sequence_number < delete.data_sequence_number
    return False


@dataclass(frozen=True)
class TableFiles:
    """The live files of one snapshot of a table."""

    snapshot_id: int | None
    sequence_number: int
    data_files: tuple[ContentFile, ...]
    delete_files: tuple[ContentFile, ...]
    format_version: int = 2
    """The table's format version: on v3 rows carry lineage, which rewrites keep, and position
    deletes are deletion vectors."""


class _BySequence:
    """Delete files ordered by data sequence number, to take those above a bound by bisection."""

    def __init__(self, deletes: list[ContentFile]) -> None:
        self.files = sorted(deletes, key=lambda d: d.data_sequence_number)
        self.sequence_numbers = [d.data_sequence_number for d in self.files]

    def from_sequence(self, sequence_number: int, inclusive: bool) -> list[ContentFile]:
        """Files whose data sequence number is >= (`inclusive`) or > `sequence_number`."""
        find = bisect_left if inclusive else bisect_right
        return self.files[find(self.sequence_numbers, sequence_number) :]


class DeleteIndex:
    """Finds the delete files that apply to data files without an all-pairs scan.

    File-scoped position deletes are indexed by the data file they name. The other
    deletes of a partition, and the global equality deletes, apply to a data file by
    sequence number alone, so they are kept sorted by it and sliced: a data file costs
    a bisection instead of a check against every delete file of its partition.
    """

    def __init__(self, delete_files: tuple[ContentFile, ...] | list[ContentFile]) -> None:
        by_data_file: dict[str, list[ContentFile]] = {}
        positions: dict[PartitionKey, list[ContentFile]] = {}
        equalities: dict[PartitionKey, list[ContentFile]] = {}
        global_equalities: list[ContentFile] = []
        for f in delete_files:
            if f.kind == FileKind.POSITION_DELETES:
                if f.referenced_data_file is not None:
                    by_data_file.setdefault(f.referenced_data_file, []).append(f)
                else:
                    positions.setdefault(f.partition, []).append(f)
            elif f.kind == FileKind.EQUALITY_DELETES:
                if f.partition.global_scope:
                    global_equalities.append(f)
                else:
                    equalities.setdefault(f.partition, []).append(f)
        self._by_data_file = by_data_file
        self._positions = {p: _BySequence(files) for p, files in positions.items()}
        self._equalities = {p: _BySequence(files) for p, files in equalities.items()}
        self._global_equalities = _BySequence(global_equalities)

    def deletes_for(self, data: ContentFile) -> list[ContentFile]:
        """Delete files that apply to `data`, in a stable order.

        File-scoped position deletes come first, then the partition's other position
        deletes, its equality deletes and the global equality deletes, each group by
        sequence number (ties in the order given).
        """
        return [
            *(d for d in self._by_data_file.get(data.path, ()) if delete_applies_to(d, data)),
            *self._scoped_deletes(data.partition, data.data_sequence_number),
        ]

    def deletes_for_all(self, data_files: Iterable[ContentFile]) -> tuple[ContentFile, ...]:
        """Each delete file that applies to any of `data_files` once, ordered by path.

        The same as the distinct union of `deletes_for` over the files, without building
        it: a delete scoped by sequence number that applies to some file of a partition
        applies to the one with the lowest sequence number.
        """
        found: dict[str, ContentFile] = {}
        lowest: dict[PartitionKey, int] = {}
        for data in data_files:
            for d in self._by_data_file.get(data.path, ()):
                if delete_applies_to(d, data):
                    found[d.path] = d
            known = lowest.get(data.partition)
            if known is None or data.data_sequence_number < known:
                lowest[data.partition] = data.data_sequence_number
        for partition, sequence_number in lowest.items():
            found.update((d.path, d) for d in self._scoped_deletes(partition, sequence_number))
        return tuple(found[path] for path in sorted(found))

    def _scoped_deletes(self, partition: PartitionKey, sequence_number: int) -> list[ContentFile]:
        """Deletes not bound to one data file that apply to a file of `partition` with `sequence_number`.

        Position deletes apply to data files with a smaller or equal sequence number,
        equality deletes only to those with a strictly smaller one (Iceberg's rules, as
        in `delete_applies_to`).
        """
        positions = self._positions.get(partition)
        equalities = self._equalities.get(partition)
        return [
            *(positions.from_sequence(sequence_number, inclusive=True) if positions else ()),
            *(equalities.from_sequence(sequence_number, inclusive=False) if equalities else ()),
            *self._global_equalities.from_sequence(sequence_number, inclusive=False),
        ]
