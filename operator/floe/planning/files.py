"""Plain-value view of a table's live files, the input of evaluation and planning.

Nothing here touches a catalog or Spark: `floe.tables.scan` turns a pyiceberg snapshot
into these values, and everything downstream works on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class FileKind(IntEnum):
    """Iceberg content type of a file (same numbers as the spec)."""

    DATA = 0
    POSITION_DELETES = 1
    EQUALITY_DELETES = 2


@dataclass(frozen=True)
class PartitionKey:
    """A partition of one partition spec: spec id plus the partition tuple.

    `global_scope` marks the unpartitioned spec, whose equality deletes apply to every
    partition of every spec (Iceberg's "global" deletes).
    """

    spec_id: int
    values: tuple[Any, ...]
    global_scope: bool = False

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
    kind: FileKind
    partition: PartitionKey
    record_count: int
    size_bytes: int
    data_sequence_number: int
    equality_ids: tuple[int, ...] = ()
    referenced_data_file: str | None = None

    @property
    def is_delete(self) -> bool:
        """True for position and equality delete files."""
        return self.kind != FileKind.DATA


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


class DeleteIndex:
    """Finds the delete files that apply to a data file without an all-pairs scan."""

    def __init__(self, delete_files: tuple[ContentFile, ...] | list[ContentFile]) -> None:
        self._global: list[ContentFile] = []
        self._by_partition: dict[PartitionKey, list[ContentFile]] = {}
        for f in delete_files:
            if f.kind == FileKind.EQUALITY_DELETES and f.partition.global_scope:
                self._global.append(f)
            else:
                self._by_partition.setdefault(f.partition, []).append(f)

    def deletes_for(self, data: ContentFile) -> list[ContentFile]:
        """Delete files that apply to `data`, in a stable order (partition-local first)."""
        local = self._by_partition.get(data.partition, [])
        return [d for d in (*local, *self._global) if delete_applies_to(d, data)]
