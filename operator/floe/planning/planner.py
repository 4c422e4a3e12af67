"""Turn a table's evaluation into an optimizing plan: partitions most costly first, files in bins.

Pure functions over plain values; the same files, config and clock give the same plan,
whatever order the files came in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from floe.planning.config import FLOE, OptimizingConfig
from floe.planning.files import ContentFile, DeleteIndex, TableFiles
from floe.planning.floe_policy import live_bytes, written_bytes_per_row
from floe.planning.plan import POSITIONS, OptimizingPlan, OptimizingType, PartitionEvaluation, PlannedTask
from floe.planning.table_evaluation import evaluate_table


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
    positions: list[int] = []
    tasks: list[PlannedTask] = []
    deferred = 0
    for position, evaluation in enumerate(candidates):
        partition_tasks = pack_partition(
            evaluation, index, config.bin_size, by_live_bytes=config.policy == FLOE
        )
        if not partition_tasks:
            continue
        if max_tasks is not None and taken and len(tasks) + len(partition_tasks) > max_tasks:
            deferred = len(candidates) - position
            break
        taken.append(evaluation)
        positions.append(position)
        tasks.extend(partition_tasks)
    return OptimizingPlan(
        snapshot_id=files.snapshot_id,
        sequence_number=files.sequence_number,
        optimizing_type=_strongest(taken),
        partitions=tuple(taken),
        tasks=tuple(tasks),
        deferred_partitions=deferred,
        positions=tuple(positions),
        candidates=len(candidates),
    )


def cap_plan(plan: OptimizingPlan, max_tasks: int | None) -> OptimizingPlan:
    """What `plan_optimizing` gives with `max_tasks`, worked out from the plan it gives without.

    The partitions of `plan` are taken in their order while their tasks fit, as
    `plan_optimizing` takes them (the first always whole); the deferred partitions are counted
    from the first that does not fit, among every candidate partition, those that packed into
    no task included. `plan` must come from `plan_optimizing` (it carries the partitions'
    places among the candidates) without `max_tasks`.
    """
    if max_tasks is None:
        return plan
    end = 0
    for taken, (evaluation, position) in enumerate(zip(plan.partitions, plan.positions, strict=True)):
        # A partition's tasks follow each other, in the order of the partitions.
        count = 0
        while end + count < len(plan.tasks) and plan.tasks[end + count].partition == evaluation.partition:
            count += 1
        if taken and end + count > max_tasks:
            return replace(
                plan,
                optimizing_type=_strongest(plan.partitions[:taken]),
                partitions=plan.partitions[:taken],
                tasks=plan.tasks[:end],
                deferred_partitions=plan.candidates - position,
                positions=plan.positions[:taken],
            )
        end += count
    return plan


def _strongest(partitions: Sequence[PartitionEvaluation]) -> OptimizingType | None:
    """The plan's type: the strongest of its partitions', None without any."""
    return max((e.optimizing_type for e in partitions if e.optimizing_type is not None), default=None)


POSITIONS_BIN_FACTOR = 8
"""A positions task's bin holds this many times a rewrite bin's data bytes: it reads only the
columns the equality deletes compare and writes a few KiB, and reads its delete files once for
all its segments, so fewer, larger bins cost less."""


def pack_partition(
    evaluation: PartitionEvaluation, delete_index: DeleteIndex, bin_size: int, by_live_bytes: bool = False
) -> list[PlannedTask]:
    """Bin-pack a partition's rewrite and packed files, and its convert files, into tasks,
    first-fit decreasing by size.

    With `by_live_bytes` (floe's policy) a rewritten file counts by its bytes as the rewrite
    writes them (`as_written`) less those of its deleted rows, so that bins come out near target
    size; Amoro counts whole files.

    Rewrite bins hold at most `bin_size` bytes of data files; a file larger than that gets a
    bin of its own. Delete bytes do not count towards the bin: the output size follows the
    data. A bin with a single data file and no delete applying to it is dropped, since
    rewriting it would change nothing; so is a bin holding a single packed file, which is
    converted instead when its deletes need it. Convert files go to positions tasks, whose
    bins hold `POSITIONS_BIN_FACTOR` times as much. Each task carries the delete files that
    apply to any of its data files; a positions task marks those of `kept_positions` kept.
    """
    tasks = []
    packed = {f.path for f in evaluation.packed_files}
    convert_files = list(evaluation.convert_files)
    rewritten = evaluation.rewrite_files + evaluation.packed_files
    size_of: Callable[[ContentFile], float] = _file_size
    if by_live_bytes:
        live = live_bytes(rewritten, delete_index, written_bytes_per_row(evaluation.segments))
        size_of = lambda f: live[f.path]  # noqa: E731
    for data_files in _first_fit(rewritten, bin_size, size_of):
        deletes = delete_index.deletes_for_all(data_files)
        if len(data_files) == 1 and data_files[0].path in packed:
            if data_files[0].path in evaluation.packed_convert_paths:
                convert_files.append(data_files[0])
            continue
        if len(data_files) == 1 and not deletes:
            continue
        tasks.append(
            PlannedTask(partition=evaluation.partition, data_files=tuple(data_files), delete_files=deletes)
        )
    for data_files in _first_fit(convert_files, bin_size * POSITIONS_BIN_FACTOR, _file_size):
        deletes = delete_index.deletes_for_all(data_files)
        tasks.append(
            PlannedTask(
                partition=evaluation.partition,
                data_files=tuple(data_files),
                delete_files=deletes,
                kind=POSITIONS,
                kept_delete_paths=frozenset(d.path for d in deletes if d.path in evaluation.kept_positions),
            )
        )
    return tasks


def _file_size(f: ContentFile) -> float:
    return float(f.size_bytes)


def _first_fit(
    files: Sequence[ContentFile], bin_size: int, size_of: Callable[[ContentFile], float]
) -> list[list[ContentFile]]:
    bins: list[list[ContentFile]] = []
    used: list[float] = []
    for f in sorted(files, key=lambda f: (-size_of(f), f.path)):
        size = size_of(f)
        slot = next((i for i, u in enumerate(used) if u + size <= bin_size), None)
        if slot is None:
            bins.append([f])
            used.append(size)
        else:
            bins[slot].append(f)
            used[slot] += size
    return bins
