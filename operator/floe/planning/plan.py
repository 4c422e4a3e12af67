"""Results of evaluation and planning: plain values, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Literal

from floe.planning.files import ContentFile, PartitionKey

TaskKind = Literal["rewrite", "positions"]
REWRITE: TaskKind = "rewrite"
"""A task that rewrites its data files, minus their deleted rows, into new data files."""
POSITIONS: TaskKind = "positions"
"""A task that keeps its data files and writes, for each, one position-delete file holding
every row its delete files remove (equality deletes converted, position deletes merged) but for
the rows of the files it keeps (`PlannedTask.kept_delete_paths`)."""


class OptimizingType(IntEnum):
    """Strength of an optimizing process; a process takes its strongest partition's type."""

    MINOR = 1
    MAJOR = 2
    FULL = 3

    @property
    def label(self) -> str:
        """Lower-case name used on the CLI and in status."""
        return self.name.lower()


@dataclass(frozen=True)
class PartitionEvaluation:
    """How one partition's files were classified and which optimizing it needs, if any."""

    partition: PartitionKey
    fragments: tuple[ContentFile, ...]
    undersized_segments: tuple[ContentFile, ...]
    segments: tuple[ContentFile, ...]
    delete_files: tuple[ContentFile, ...]
    optimizing_type: OptimizingType | None
    reason: str
    rewrite_files: tuple[ContentFile, ...]
    cost: float
    convert_files: tuple[ContentFile, ...] = ()
    """Segments kept, whose deletes become one position-delete file each (minor optimizing)."""
    packed_files: tuple[ContentFile, ...] = ()
    """Undersized segments major rewrites only where bin-packing puts them with another file,
    as in Amoro: rewritten alone, one would come out undersized again."""
    packed_convert_paths: frozenset[str] = frozenset()
    """The packed files to convert instead when one is alone in its bin (their deletes need it)."""
    kept_positions: frozenset[str] = frozenset()
    """Merged position-delete files of converted files that stay: the conversion writes only the
    rows they do not hold (floe's policy, format v2)."""

    @property
    def needs_optimizing(self) -> bool:
        """True when a trigger fired and there is something to rewrite or convert."""
        return self.optimizing_type is not None and bool(
            self.rewrite_files or self.convert_files or self.packed_files
        )


@dataclass(frozen=True)
class PlannedTask:
    """One bin: data files of a single partition and the delete files that apply to them, to
    rewrite (``kind`` rewrite) or whose deletes become position-delete files (``kind`` positions)."""

    partition: PartitionKey
    data_files: tuple[ContentFile, ...]
    delete_files: tuple[ContentFile, ...]
    kind: TaskKind = REWRITE
    kept_delete_paths: frozenset[str] = frozenset()
    """Position-delete files among `delete_files` a positions task reads but leaves in place: it
    writes only the rows they do not hold, and the commit does not remove them."""

    @property
    def input_bytes(self) -> int:
        """Bytes the task reads: its data files plus its delete files."""
        return sum(f.size_bytes for f in self.data_files) + sum(f.size_bytes for f in self.delete_files)


@dataclass(frozen=True)
class OptimizingPlan:
    """The tasks of one optimizing process over one snapshot."""

    snapshot_id: int | None
    sequence_number: int
    optimizing_type: OptimizingType | None
    partitions: tuple[PartitionEvaluation, ...]
    tasks: tuple[PlannedTask, ...] = field(default=())
    deferred_partitions: int = 0
    """Partitions that need optimizing but were left for a later process (max_tasks)."""
    positions: tuple[int, ...] = ()
    """Per partition taken, its place among the `candidates`, most costly first (`cap_plan`)."""
    candidates: int = 0
    """How many partitions needed optimizing, those whose bins all turned out not worth a
    task included (`cap_plan` counts the deferred ones from it)."""

    @property
    def is_empty(self) -> bool:
        """A plan with no task changes nothing."""
        return not self.tasks
