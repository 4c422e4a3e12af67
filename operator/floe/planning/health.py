"""A table's health score, 0 to 100: how far its files are from what optimizing leaves.

Amoro shows one per table; floe's weighs the same three costs a reader pays, each from 0 (none)
to 1 (as bad as it gets), against the table's own thresholds:

- **small files** (40 points): one minus the average data file's size over the target size;
- **equality deletes** (40 points): their rows over the data rows, against the duplicate ratio
  (a reader hashes every row's key against them, the costliest deletes to read);
- **position deletes** (20 points): their rows over the data rows, against the duplicate ratio.

Small files count less in a table of few files (a new table of three small files is not sick):
in full from ``minor.triggerFileCount`` data files on.
"""

from __future__ import annotations

from dataclasses import dataclass

from floe.planning.config import OptimizingConfig
from floe.planning.files import FileKind, TableFiles

SMALL_FILES_POINTS = 40
EQUALITY_DELETES_POINTS = 40
POSITION_DELETES_POINTS = 20


@dataclass(frozen=True)
class TableHealth:
    """The score and what took points off it."""

    score: int
    small_files: float
    """0 to 1: how small the average data file is against the target size."""
    equality_deletes: float
    """0 to 1: equality-deleted rows over data rows, against the duplicate ratio."""
    position_deletes: float
    """0 to 1: position-deleted rows over data rows, against the duplicate ratio."""

    def worst(self) -> str:
        """What costs the most points, in words; empty for a healthy table."""
        losses = {
            "small files": SMALL_FILES_POINTS * self.small_files,
            "equality deletes": EQUALITY_DELETES_POINTS * self.equality_deletes,
            "position deletes": POSITION_DELETES_POINTS * self.position_deletes,
        }
        name, points = max(losses.items(), key=lambda item: item[1])
        return name if points >= 1 else ""


def table_health(files: TableFiles, config: OptimizingConfig) -> TableHealth:
    """The health of a table's live files under its optimizing settings."""
    data = files.data_files
    if not data:
        return TableHealth(100, 0.0, 0.0, 0.0)
    rows = max(sum(f.record_count for f in data), 1)
    average = sum(f.size_bytes for f in data) / len(data)
    small = _unit(1.0 - average / config.target_size) if len(data) > 1 else 0.0
    equality = sum(d.record_count for d in files.delete_files if d.kind == FileKind.EQUALITY_DELETES)
    positions = sum(d.record_count for d in files.delete_files if d.kind == FileKind.POSITION_DELETES)
    ratio = max(config.major_duplicate_ratio, 1e-9)
    eq_factor = _unit(equality / rows / ratio)
    pos_factor = _unit(positions / rows / ratio)
    small *= min(1.0, len(data) / max(config.minor_trigger_file_count, 1))
    penalty = (
        SMALL_FILES_POINTS * small
        + EQUALITY_DELETES_POINTS * eq_factor
        + POSITION_DELETES_POINTS * pos_factor
    )
    return TableHealth(round(100 - penalty), small, eq_factor, pos_factor)


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))
