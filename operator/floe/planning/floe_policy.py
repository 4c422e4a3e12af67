"""floe's optimizing policy for CDC tables (``optimizing.policy: floe``; docs/concepts/cdc-trade-off.md).

Amoro's rules rewrite the same young bytes again and again on a CDC table: a minor every
interval merges every fragment, the last interval's output included, and a major packs each
undersized output with the earlier ones; its duplicate ratio rewrites a segment at a tenth of
its rows deleted, writing nine bytes per byte dropped; and equality deletes wait for the minor
interval while every read hashes each row's key against them. floe's policy departs from them
in six ways, each measured by `bench/cdc_write_amplification.py`:

- **Levelled merges.** Fragments sit in levels by size, each level's files ``fanout`` times
  smaller than the level above's; a level merges when it holds ``fanout`` files, taking the
  smaller levels' files along. A byte is rewritten about log_fanout(fragment size / the size it
  was written at) times on its way out of the fragments, not once per interval. Undersized
  segments merge as Amoro's major merges them, once they hold a target size; and whenever a
  plan rewrites files, every small file joins its bins, which it fills to target size.
- **Sizes as the rewrite writes them.** A writer's small files encode worse than a rewrite's
  full-size output (30 bytes a row against 22 on the CDC benchmark's orders), so undersized files
  holding a target size by their own bytes came out undersized again and were packed a second
  time a few rounds later. The undersized trigger and the bins count each file at the bytes a
  row takes in the partition's full-size files (never more than it takes now): each undersized
  row is packed once.
- **Equality deletes are converted at every plan**, into position deletes of each data file.
  They are the costliest deletes to read, and converting writes a few bytes per deleted row.
- **Position deletes are merged in levels too** (format v2; v3 allows one deletion vector per
  data file): a conversion writes only the rows the data file's merged position-delete files do
  not hold yet, and merges those files only when a level of them is full
  (`positions_to_merge`). Merging them all at every conversion rewrote every position deleted
  so far at every plan: under upserts spread over all keys, a third of what floe wrote.
- **A segment is rewritten at the favor's deleted share**, not at Amoro's 0.1: its deletes are
  positions by then, which readers apply cheaply, and at a share r a rewrite writes (1 - r) / r
  bytes per byte it drops.
- **Rewrites are packed by the rows they keep**, so that segments shedding their deleted rows
  come out near target size together instead of undersized one by one.

A forced optimizing and a due full optimizing follow Amoro's rules (`evaluate_partition`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from floe.planning.config import OptimizingConfig
from floe.planning.evaluator import (
    evaluate_partition,
    full_is_due,
    needs_positions,
    partition_evaluation,
    position_deleted_rows,
    undersized_fill_a_target,
)
from floe.planning.files import (
    ContentFile,
    DeleteIndex,
    FileKind,
    PartitionKey,
    merged_positions,
    pending_deletes,
)
from floe.planning.plan import OptimizingType, PartitionEvaluation


@dataclass(frozen=True)
class FavorSettings:
    """What one ``favor`` setting means."""

    deleted_share: float
    """A data file with more than this share of its rows deleted is rewritten."""
    fanout: int
    """A level of fragments merges when it holds this many."""


FAVORS = {
    "reads": FavorSettings(deleted_share=0.1, fanout=3),
    "balanced": FavorSettings(deleted_share=0.4, fanout=8),
    "writes": FavorSettings(deleted_share=0.6, fanout=16),
}


def deleted_rows(data: ContentFile, deletes: Sequence[ContentFile]) -> int:
    """Rows of ``data`` its position deletes remove, at most its rows."""
    return min(position_deleted_rows(deletes), data.record_count)


def written_bytes_per_row(segments: Sequence[ContentFile]) -> float | None:
    """The bytes a row takes in the partition's full-size files (the median over `segments`),
    which were written in bulk: what a rewrite's output is expected to take a row; None without
    any."""
    rates = sorted(f.size_bytes / f.record_count for f in segments if f.record_count > 0)
    return rates[len(rates) // 2] if rates else None


def as_written(f: ContentFile, per_row: float | None) -> float:
    """`f`'s bytes as a rewrite would write them: its rows at `per_row` bytes, never more than it
    takes now (a streaming writer's small files encode worse than a rewrite's full-size output)."""
    return float(f.size_bytes) if per_row is None else min(float(f.size_bytes), f.record_count * per_row)


def live_bytes(
    files: Sequence[ContentFile], delete_index: DeleteIndex, per_row: float | None = None
) -> Mapping[str, float]:
    """Each file's bytes as written (`as_written`) less those of its position-deleted rows: what a
    rewrite of it writes."""
    live = {}
    for f in files:
        share = deleted_rows(f, pending_deletes(f, delete_index.deletes_for(f))) / max(f.record_count, 1)
        live[f.path] = as_written(f, per_row) * (1.0 - share)
    return live


def level_of(size_bytes: int, target_size: int, fanout: int) -> int:
    """A fragment's level: 1 for sizes in (target / fanout, target], 2 for the next ``fanout``
    times smaller, and so on."""
    return max(1, math.ceil(math.log(target_size / max(size_bytes, 1), fanout)))


def levelled_merge(small: Sequence[ContentFile], target_size: int, fanout: int) -> tuple[int, set[str]]:
    """The fragments to merge: the largest level holding ``fanout`` files or more, with every file
    of the smaller levels; (0, none) when no level is full."""
    levels: dict[int, list[ContentFile]] = {}
    for f in small:
        levels.setdefault(level_of(f.size_bytes, target_size, fanout), []).append(f)
    full = [level for level, members in levels.items() if len(members) >= fanout]
    if not full:
        return 0, set()
    top = min(full)
    return top, {f.path for level, members in levels.items() if level >= top for f in members}


def position_level(positions: int, fanout: int) -> int:
    """A merged position-delete file's level: files within a factor ``fanout`` of each other in
    rows share one."""
    return math.floor(math.log(max(positions, 1), fanout))


def positions_to_merge(merged: Sequence[ContentFile], fanout: int) -> set[str]:
    """Of a data file's merged position-delete files, those its next conversion merges into the
    file it writes; it keeps the others, and writes only the rows they do not hold.

    The new file joins the smallest level (its rows are not known before it is written, and a
    round's deletes are fewer than a merge's). The largest level then holding ``fanout`` files
    or more merges, with every file of the smaller levels, as fragments do (`levelled_merge`):
    a position is rewritten about log_fanout(its file's rows / a conversion's rows) times.
    """
    if not merged:
        return set()
    level = {d.path: position_level(d.record_count, fanout) for d in merged}
    counts: dict[int, int] = {}
    for value in level.values():
        counts[value] = counts.get(value, 0) + 1
    counts[min(counts)] += 1
    full = [value for value, count in counts.items() if count >= fanout]
    if not full:
        return set()
    top = max(full)
    return {path for path, value in level.items() if value <= top}


def needs_conversion(data: ContentFile, pending: Sequence[ContentFile]) -> bool:
    """Whether a data file's pending deletes need a conversion when its merged position-delete
    files are kept: an equality delete, or a writer's position delete beside another position
    delete (alone, it reads as cheaply as a merged one)."""
    merged = {d.path for d in merged_positions(data, pending)}
    positions = [d for d in pending if d.kind == FileKind.POSITION_DELETES]
    return any(d.kind == FileKind.EQUALITY_DELETES for d in pending) or (
        len(positions) > 1 and any(d.path not in merged for d in positions)
    )


def evaluate_partition_floe(
    partition: PartitionKey,
    data_files: Sequence[ContentFile],
    delete_index: DeleteIndex,
    config: OptimizingConfig,
    now_s: float,
    last_minor_s: float | None,
    last_full_s: float | None,
    forced: OptimizingType | None = None,
    *,
    keep_positions: bool = False,
) -> PartitionEvaluation:
    """Decide one partition's optimizing by floe's policy (the module's docstring).

    With ``keep_positions`` (a format v2 table) conversions keep the merged position-delete
    files `positions_to_merge` leaves (`PartitionEvaluation.kept_positions`); without, a
    conversion merges them all.

    The result has the shape Amoro's evaluation gives: the small files merged are `packed_files`
    (one left alone in its bin is not rewritten, but converted if its deletes need it), those past
    the deleted share `rewrite_files`, those whose equality deletes (or several position-delete
    files) become one position-delete file `convert_files`. The type is major
    when a file above fragment size is rewritten, else minor.
    """
    if forced is not None or full_is_due(config, now_s, last_full_s):
        amoro = evaluate_partition(
            partition, data_files, delete_index, config, now_s, last_minor_s, last_full_s, forced
        )
        if forced is not None or amoro.optimizing_type == OptimizingType.FULL:
            return amoro
    favor = FAVORS[config.favor]
    files = sorted(data_files, key=lambda f: f.path)
    pending = {f.path: pending_deletes(f, delete_index.deletes_for(f)) for f in files}
    fragments = tuple(f for f in files if f.size_bytes <= config.fragment_size)
    undersized = tuple(f for f in files if config.fragment_size < f.size_bytes <= config.undersized_size)
    level, packed = levelled_merge(fragments, config.target_size, favor.fanout)
    shares = {f.path: deleted_rows(f, pending[f.path]) / max(f.record_count, 1) for f in files}
    rewrite = {f.path for f in files if shares[f.path] > favor.deleted_share}
    per_row = written_bytes_per_row([f for f in files if f.size_bytes > config.undersized_size])
    pool = undersized_fill_a_target(undersized, config.target_size, lambda f: as_written(f, per_row))
    if rewrite or pool:
        # Small files fill the bins of what is rewritten anyway: each needs one more merge to
        # reach target size, and the outputs come out full-size.
        packed |= {f.path for f in fragments + undersized}
    rewrite -= packed
    to_convert = {
        f.path
        for f in files
        if (needs_conversion(f, pending[f.path]) if keep_positions else needs_positions(pending[f.path]))
    }
    convert = to_convert - rewrite - packed
    kept: set[str] = set()
    for f in files:
        if keep_positions and f.path in to_convert:
            merged = merged_positions(f, pending[f.path])
            kept |= {d.path for d in merged} - positions_to_merge(merged, favor.fanout)
    reasons = []
    if level:
        reasons.append(f"fragments at level {level} and below reach {favor.fanout} (fanout)")
    if pool:
        reasons.append(f"{len(undersized)} undersized segments hold a target size")
    if rewrite:
        most = max(shares[p] for p in rewrite)
        reasons.append(
            f"{len(rewrite)} files with deleted rows > {favor.deleted_share:g} x rows (up to {most:.2f})"
        )
    if convert:
        reasons.append(
            f"{len(convert)} files with new deletes"
            if keep_positions
            else f"{len(convert)} files with equality deletes or several position-delete files"
        )
    gain = bool(convert or rewrite) or len(packed) >= 2
    kind: OptimizingType | None = None
    if not gain:
        rewrite, packed, convert, kept = set(), set(), set(), set()
    else:
        above_fragment = any(f.size_bytes > config.fragment_size for f in files if f.path in rewrite | packed)
        kind = OptimizingType.MAJOR if above_fragment else OptimizingType.MINOR
    reason = "; ".join(reasons) or "no level full, no file past the deleted share, no equality delete"
    return partition_evaluation(
        partition,
        files,
        delete_index,
        config,
        kind,
        reason,
        rewrite,
        convert,
        packed,
        packed & to_convert,
        kept,
    )
