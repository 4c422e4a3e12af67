"""A table's evaluation: each partition's, by the table's policy (Amoro's rules or floe's)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from floe.planning.config import FLOE, OptimizingConfig
from floe.planning.evaluator import evaluate_partition
from floe.planning.files import ContentFile, DeleteIndex, PartitionKey, TableFiles
from floe.planning.floe_policy import evaluate_partition_floe
from floe.planning.plan import OptimizingType, PartitionEvaluation


def evaluate_table(
    files: TableFiles,
    config: OptimizingConfig,
    now_s: float,
    last_minor_s: float | None,
    last_full_s: float | None,
    forced: OptimizingType | None = None,
) -> list[PartitionEvaluation]:
    """Evaluate every partition that has data files, in partition order (spec id, then values).

    Partitions holding only delete files are left out: those deletes apply to nothing
    and are cleaned up elsewhere, not by rewriting data.
    """
    index = DeleteIndex(files.delete_files)
    evaluate: Callable[..., PartitionEvaluation] = evaluate_partition
    if config.policy == FLOE:
        evaluate = partial(evaluate_partition_floe, keep_positions=keeps_positions(files))
    return [
        evaluate(partition, data, index, config, now_s, last_minor_s, last_full_s, forced)
        for partition, data in partitions_in_order(files)
    ]


def keeps_positions(files: TableFiles) -> bool:
    """Whether a conversion may keep a data file's merged position-delete files (floe's policy):
    not on format v3, which allows one deletion vector per data file, so a conversion merges all."""
    return files.format_version < 3


def partitions_in_order(files: TableFiles) -> list[tuple[PartitionKey, list[ContentFile]]]:
    """Each partition that has data files, with them, in `partition_order`."""
    by_partition: dict[PartitionKey, list[ContentFile]] = {}
    for f in files.data_files:
        by_partition.setdefault(f.partition, []).append(f)
    return [(partition, by_partition[partition]) for partition in sorted(by_partition, key=partition_order)]


def partition_order(partition: PartitionKey) -> tuple[Any, ...]:
    """A total order over partition keys: nulls first, values of mixed types grouped by type name,
    floats as Iceberg Java orders them (by `PartitionKey.identity`: NaN last, -0.0 before 0.0)."""
    values = tuple((v is not None, type(v).__name__, 0 if v is None else v) for v in partition.identity)
    return (partition.spec_id, values)
