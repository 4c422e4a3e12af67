"""Turn a table's evaluation into an optimizing plan: partitions most costly first, files in bins.

Pure functions over plain values; the same files, config and clock give the same plan,
whatever order the files came in.
"""

from __future__ import annotations

from floe.planning.config import OptimizingConfig
from floe.planning.evaluator import evaluate_table
from floe.planning.files import ContentFile, DeleteIndex, TableFiles
from floe.planning.plan import OptimizingPlan, OptimizingType, PartitionEvaluation, PlannedTask


def plan_optimizing(
    files: TableFiles,
    config: OptimizingConfig,
    now_s: float,
    last_minor_s: float | None,
    last_full_s: float | None,
    forced: OptimizingType | None = None,
    max_tasks: int | None = None,
) -> OptimizingPlan:
    """Plan one optimizing process over `files`.

    Partitions that need optimizing are taken most costly first (ties in partition
    order) while their tasks still fit in `max_tasks`; the first partition that does
    not fit ends the plan, so a costly partition is never overtaken by cheaper ones.
    The first partition with tasks is always taken whole, even beyond `max_tasks`
    (None: no limit). Partitions whose bins all turn out not worth a task are skipped;
    the partitions left out from the first that did not fit are counted in
    `deferred_partitions`.
    The plan's type is the strongest type of the partitions taken, None when the plan
    has no task.
    """
    index = DeleteIndex(files.delete_files)
    candidates = [
        e
        for e in evaluate_table(files, config, now_s, last_minor_s, last_full_s, forced)
        if e.needs_optimizing
    ]
    candidates.sort(key=lambda e: -e.cost)
    taken: list[PartitionEvaluation] = []
    tasks: list[PlannedTask] = []
    deferred = 0
    for position, evaluation in enumerate(candidates):
        partition_tasks = pack_partition(evaluation, index, config.bin_size)
        if not partition_tasks:
            continue
        if max_tasks is not None and taken and len(tasks) + len(partition_tasks) > max_tasks:
            deferred = len(candidates) - position
            break
        taken.append(evaluation)
        tasks.extend(partition_tasks)
    return OptimizingPlan(
        snapshot_id=files.snapshot_id,
        sequence_number=files.sequence_number,
        optimizing_type=max(
            (e.optimizing_type for e in taken if e.optimizing_type is not None), default=None
        ),
        partitions=tuple(taken),
        tasks=tuple(tasks),
        deferred_partitions=deferred,
    )


def pack_partition(
    evaluation: PartitionEvaluation, delete_index: DeleteIndex, bin_size: int
) -> list[PlannedTask]:
    """Bin-pack a partition's rewrite files into tasks, first-fit decreasing by size.

    Bins hold at most `bin_size` bytes of data files; a file larger than that gets a bin
    of its own. Delete bytes do not count towards the bin: the output size follows the
    data. A bin with a single data file and no delete applying to it is dropped, since
    rewriting it would change nothing. Each task carries the delete files that apply
    to any of its data files.
    """
    bins: list[list[ContentFile]] = []
    used: list[int] = []
    for f in sorted(evaluation.rewrite_files, key=lambda f: (-f.size_bytes, f.path)):
        slot = next((i for i, u in enumerate(used) if u + f.size_bytes <= bin_size), None)
        if slot is None:
            bins.append([f])
            used.append(f.size_bytes)
        else:
            bins[slot].append(f)
            used[slot] += f.size_bytes
    tasks = []
    for data_files in bins:
        deletes = delete_index.deletes_for_all(data_files)
        if len(data_files) == 1 and not deletes:
            continue
        tasks.append(
            PlannedTask(partition=evaluation.partition, data_files=tuple(data_files), delete_files=deletes)
        )
    return tasks
