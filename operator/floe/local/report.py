"""Terminal rendering of plans and results (rich tables)."""

from __future__ import annotations

from pyiceberg.table.metadata import TableMetadata
from rich.table import Table as RichTable

from floe.planning.plan import POSITIONS, OptimizingPlan, PlannedTask
from floe.tables.scan import ScannedTable


def human_bytes(num: float) -> str:
    """1536 -> ``1.5 KiB``."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    step = 0
    while abs(num) >= 1024 and step < len(units) - 1:
        num /= 1024
        step += 1
    return f"{num:.0f} B" if step == 0 else f"{num:.1f} {units[step]}"


def plan_table(plan: OptimizingPlan, scanned: ScannedTable, metadata: TableMetadata) -> RichTable:
    """One row per evaluated partition: type, reason, and the tasks, files and bytes planned (data
    files kept whose deletes become position-delete files are counted as converted)."""
    kind = plan.optimizing_type.label if plan.optimizing_type else "none"
    out = RichTable(title=f"plan on snapshot {plan.snapshot_id}: {kind}, {len(plan.tasks)} tasks")
    for column in ("partition", "type", "reason", "tasks", "data files", "delete files", "bytes"):
        out.add_column(column, justify="right" if column in ("tasks", "data files", "bytes") else "left")
    for evaluation in plan.partitions:
        tasks = [t for t in plan.tasks if t.partition == evaluation.partition]
        out.add_row(
            scanned.partition_path(metadata, evaluation.partition) or "<unpartitioned>",
            evaluation.optimizing_type.label if evaluation.optimizing_type else "-",
            evaluation.reason,
            str(len(tasks)),
            _data_files(tasks),
            str(len({d.path for t in tasks for d in t.delete_files})),
            human_bytes(sum(t.input_bytes for t in tasks)),
        )
    return out


def _data_files(tasks: list[PlannedTask]) -> str:
    rewritten = sum(len(t.data_files) for t in tasks if t.kind != POSITIONS)
    converted = sum(len(t.data_files) for t in tasks if t.kind == POSITIONS)
    return f"{rewritten} + {converted} converted" if converted else str(rewritten)
