"""What a table's last refresh made of it (`Evaluation`): its scan and its would-be plan, which
planning takes instead of loading and planning the table again."""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table import Table

from floe.optimizing.table_state import TableRuntime
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingPlan
from floe.tables.scan import ScannedTable


@dataclass(frozen=True)
class Evaluation:
    """One refresh's load, scan and plan of a table."""

    scanned: ScannedTable
    """The live files of the snapshot evaluated, which a later load of that snapshot reuses."""
    config: OptimizingConfig
    plan: OptimizingPlan
    """The plan without a cap on its tasks (`cap_plan` cuts it to a group's threads)."""
    evaluated_at: float
    metadata_location: str
    table: Table | None
    """The table as loaded; kept only while the plan has tasks, so that thousands of idle
    tables do not hold their metadata."""

    def fresh_for(self, runtime: TableRuntime, now_s: float, refresh_interval_s: float) -> bool:
        """Whether planning `runtime` may take this evaluation as it is: it is younger than a
        refresh interval, and the runtime's last (nothing since made the runtime forget it: a new
        spec, a failed process, an access error, a maintenance commit)."""
        return (
            now_s - self.evaluated_at < refresh_interval_s
            and runtime.evaluated_metadata == self.metadata_location
            and runtime.evaluated_snapshot_id == self.scanned.files.snapshot_id
        )
