"""Results of evaluation and planning: plain values, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from floe.planning.files import ContentFile, PartitionKey


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

    @property
    def needs_optimizing(self) -> bool:
        """True when a trigger fired and there is something to rewrite."""
        return self.optimizing_type is not None and bool(self.rewrite_files)


@dataclass(frozen=True)
class PlannedTask:
    """One bin: data files of a single partition and the delete files that apply to them."""

    partition: PartitionKey
    data_files: tuple[ContentFile, ...]
    delete_files: tuple[ContentFile, ...]

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

    @property
    def is_empty(self) -> bool:
        """A plan with no task changes nothing."""
        return not self.tasks
