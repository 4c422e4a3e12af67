"""Optimizing thresholds of one table, as plain values (see docs/design/optimizing.md, "Table properties")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MiB = 1024 * 1024

Policy = Literal["amoro", "floe"]
"""Which rules decide what to optimize: Amoro's triggers, or floe's (`floe_policy`)."""
AMORO: Policy = "amoro"
FLOE: Policy = "floe"
Favor = Literal["reads", "balanced", "writes"]
"""Where floe's policy sits on the read/write trade-off (`floe_policy.FAVORS`)."""


@dataclass(frozen=True)
class OptimizingConfig:
    """Thresholds that drive evaluation and planning; defaults are Amoro's."""

    target_size: int = 128 * MiB
    fragment_ratio: int = 8
    min_target_size_ratio: float = 0.75
    minor_trigger_file_count: int = 12
    minor_trigger_interval_s: float = 3600.0
    major_duplicate_ratio: float = 0.1
    full_trigger_interval_s: float = -1.0
    full_rewrite_all_files: bool = True
    max_task_size_bytes: int = 128 * MiB
    open_file_cost_bytes: int = 4 * MiB
    policy: Policy = AMORO
    favor: Favor = "balanced"

    @property
    def fragment_size(self) -> int:
        """A data file at or below this size is a fragment."""
        return self.target_size // self.fragment_ratio

    @property
    def undersized_size(self) -> int:
        """A data file at or below this size (and above fragment size) is an undersized segment."""
        return int(self.target_size * self.min_target_size_ratio)

    @property
    def bin_size(self) -> int:
        """Bin capacity used when packing files into tasks."""
        return max(self.target_size, self.max_task_size_bytes)
