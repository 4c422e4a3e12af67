"""Each optimizing trigger of a partition, its value against its threshold (`floe explain`).

The evaluators (`evaluator.evaluate_partition`, `floe_policy.evaluate_partition_floe`) decide;
this module shows a data engineer the numbers they decided on, by the same rules and helpers,
so that "why is my table not optimized" has an answer per partition: which trigger is closest,
and when an interval fires next.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from floe.planning.config import FLOE, OptimizingConfig
from floe.planning.evaluator import needs_positions, position_deleted_rows, undersized_fill_a_target
from floe.planning.files import ContentFile, DeleteIndex, FileKind, PartitionKey, TableFiles, pending_deletes
from floe.planning.floe_policy import (
    FAVORS,
    as_written,
    deleted_rows,
    level_of,
    needs_conversion,
    written_bytes_per_row,
)
from floe.planning.table_evaluation import keeps_positions, partitions_in_order

INTERVAL_MARGIN_S = 1.0
"""How long after an interval's end its trigger is looked at again: it fires strictly after."""


@dataclass(frozen=True)
class Trigger:
    """One trigger of one partition."""

    name: str
    value: float | None
    """What the partition has; None where it cannot be told (an interval never started)."""
    threshold: float | None
    """What the value must reach; None when the trigger is off."""
    fired: bool
    unit: str = ""
    next_s: float | None = None
    """For an interval: when it fires next (seconds since the epoch), if it is not firing."""


@dataclass(frozen=True)
class PartitionTriggers:
    """A partition's files by class and its triggers."""

    partition: PartitionKey
    fragments: int
    undersized_segments: int
    segments: int
    delete_files: int
    triggers: tuple[Trigger, ...]


def table_triggers(
    files: TableFiles,
    config: OptimizingConfig,
    now_s: float,
    last_minor_s: float | None,
    last_full_s: float | None,
) -> list[PartitionTriggers]:
    """Every partition's triggers, in the order `evaluate_table` evaluates them."""
    index = DeleteIndex(files.delete_files)
    keep = keeps_positions(files)
    return [
        partition_triggers(partition, data, index, config, now_s, last_minor_s, last_full_s, keep)
        for partition, data in partitions_in_order(files)
    ]


def time_trigger_s(
    files: TableFiles,
    config: OptimizingConfig,
    now_s: float,
    last_minor_s: float | None,
    last_full_s: float | None,
) -> float | None:
    """When an interval trigger may fire on the table's files as they are: the moment its
    evaluation may change with time alone, when an unchanged table is evaluated again. Cheap, as
    each changed table's refresh asks it: the minor interval counts where a partition has two
    fragments or the table any equality delete (a superset of the evaluator's rule, which costs
    at most one evaluation that finds nothing new)."""
    ends = []
    if config.full_trigger_interval_s > 0 and last_full_s is not None:
        ends.append(last_full_s + config.full_trigger_interval_s)
    if config.policy != FLOE and config.minor_trigger_interval_s >= 0 and last_minor_s is not None:
        fragments = Counter(f.partition for f in files.data_files if f.size_bytes <= config.fragment_size)
        equality = any(d.kind == FileKind.EQUALITY_DELETES for d in files.delete_files)
        if equality or any(n > 1 for n in fragments.values()):
            ends.append(last_minor_s + config.minor_trigger_interval_s)
    ahead = [end for end in ends if end >= now_s]
    # The evaluator fires once strictly more than the interval has passed.
    return min(ahead) + INTERVAL_MARGIN_S if ahead else None


def partition_triggers(
    partition: PartitionKey,
    data_files: Sequence[ContentFile],
    delete_index: DeleteIndex,
    config: OptimizingConfig,
    now_s: float,
    last_minor_s: float | None,
    last_full_s: float | None,
    keep_positions: bool = True,
) -> PartitionTriggers:
    """The triggers of one partition under the table's policy, with their values now
    (`keep_positions`: as `evaluate_partition_floe` takes it, True on format v2)."""
    files = sorted(data_files, key=lambda f: f.path)
    pending = {f.path: pending_deletes(f, delete_index.deletes_for(f)) for f in files}
    fragments = [f for f in files if f.size_bytes <= config.fragment_size]
    undersized = [f for f in files if config.fragment_size < f.size_bytes <= config.undersized_size]
    segments = [f for f in files if f.size_bytes > config.undersized_size]
    deletes = delete_index.deletes_for_all(files)
    if config.policy == FLOE:
        triggers = _floe_triggers(files, fragments, pending, config, keep_positions)
    else:
        triggers = _amoro_triggers(
            fragments, undersized, segments, deletes, pending, config, now_s, last_minor_s
        )
    return PartitionTriggers(
        partition=partition,
        fragments=len(fragments),
        undersized_segments=len(undersized),
        segments=len(segments),
        delete_files=len(deletes),
        triggers=(
            *triggers,
            _undersized_trigger(undersized, segments, config),
            _interval_trigger(
                "full interval", config.full_trigger_interval_s, now_s, last_full_s, True, off_at=0
            ),
        ),
    )


def _amoro_triggers(
    fragments: Sequence[ContentFile],
    undersized: Sequence[ContentFile],
    segments: Sequence[ContentFile],
    deletes: Sequence[ContentFile],
    pending: dict[str, tuple[ContentFile, ...]],
    config: OptimizingConfig,
    now_s: float,
    last_minor_s: float | None,
) -> list[Trigger]:
    small = len(fragments) + sum(1 for d in deletes if d.kind == FileKind.EQUALITY_DELETES)
    several = sum(
        1 for f in segments if sum(1 for d in pending[f.path] if d.kind == FileKind.POSITION_DELETES) > 1
    )
    ratio = max(
        (position_deleted_rows(pending[f.path]) / max(f.record_count, 1) for f in [*undersized, *segments]),
        default=0.0,
    )
    return [
        Trigger(
            "fragments + equality-delete files",
            small,
            config.minor_trigger_file_count,
            small >= config.minor_trigger_file_count,
        ),
        _interval_trigger("minor interval", config.minor_trigger_interval_s, now_s, last_minor_s, small > 1),
        Trigger("segments with several position-delete files", several, 1, several >= 1),
        Trigger(
            "deleted rows of the most deleted segment",
            ratio,
            config.major_duplicate_ratio,
            ratio > config.major_duplicate_ratio,
            "x rows",
        ),
    ]


def _floe_triggers(
    files: Sequence[ContentFile],
    fragments: Sequence[ContentFile],
    pending: dict[str, tuple[ContentFile, ...]],
    config: OptimizingConfig,
    keep_positions: bool,
) -> list[Trigger]:
    favor = FAVORS[config.favor]
    levels: dict[int, int] = {}
    for f in fragments:
        level = level_of(f.size_bytes, config.target_size, favor.fanout)
        levels[level] = levels.get(level, 0) + 1
    fullest = max(levels.values(), default=0)
    share = max((deleted_rows(f, pending[f.path]) / max(f.record_count, 1) for f in files), default=0.0)
    convert = needs_conversion if keep_positions else lambda _, deletes: needs_positions(deletes)
    to_convert = sum(1 for f in files if convert(f, pending[f.path]))
    return [
        Trigger("fragments in the fullest level", fullest, favor.fanout, fullest >= favor.fanout),
        Trigger(
            "deleted rows of the most deleted file",
            share,
            favor.deleted_share,
            share > favor.deleted_share,
            "x rows",
        ),
        Trigger("files with deletes to convert", to_convert, 1, to_convert >= 1),
    ]


def _undersized_trigger(
    undersized: Sequence[ContentFile], segments: Sequence[ContentFile], config: OptimizingConfig
) -> Trigger:
    """Undersized segments' bytes against a target: under floe's policy as the rewrite writes them."""
    per_row = written_bytes_per_row(segments) if config.policy == FLOE else None

    def size_of(f: ContentFile) -> float:
        return as_written(f, per_row)

    return Trigger(
        "undersized segments' bytes" if per_row is None else "undersized segments' bytes, as rewritten",
        sum(size_of(f) for f in undersized),
        config.target_size,
        undersized_fill_a_target(undersized, config.target_size, size_of),
        "bytes",
    )


def _interval_trigger(
    name: str, interval_s: float, now_s: float, last_s: float | None, work: bool, off_at: float = -1
) -> Trigger:
    """An interval trigger: the time since `last_s` against `interval_s` (off at or below
    `off_at`: the minor interval is off when negative, the full one unless positive). It fires
    past the interval when there is `work`."""
    if interval_s < 0 or (off_at == 0 and interval_s <= 0):
        return Trigger(name, None, None, False, "s")
    if last_s is None:
        return Trigger(name, None, interval_s, work, "s")
    elapsed = now_s - last_s
    fired = elapsed > interval_s and work
    return Trigger(name, elapsed, interval_s, fired, "s", None if fired else last_s + interval_s)
