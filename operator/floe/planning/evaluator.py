"""Per-partition evaluation: classify data files and decide minor, major or full optimizing.

Pure functions over plain values (docs/design/optimizing.md, "Evaluation, per partition");
the clock and the times of the last optimizings are passed in as seconds.

Where Amoro's rules are silent, floe decides (docs/design/optimizing.md states the result):

- A last-optimizing time of ``None`` (never optimized) counts as "interval elapsed".
- The minor interval is off when negative (0 means "whenever there is more than one
  fragment/eq-delete file"); the full interval is off unless strictly positive, so that
  0 cannot mean "full optimizing forever".
- Minor keeps segments, undersized or not: one with equality deletes or more than one
  position-delete file is converted (its deletes become one position-delete file), as in
  Amoro. Undersized segments are rewritten by major, which packs them into target-sized
  files; as in Amoro, one that bin-packing leaves alone in its bin is not rewritten (it
  would come out undersized again, and be rewritten at every major) but converted if its
  deletes need it.
- A stronger type does the weaker types' work too: major rewrites what minor would,
  plus the segments over the duplicate ratio and the undersized segments it can pack,
  and converts the other segments minor would convert; full leaves no delete file behind.
- Deletes a positions task merged into a data file's position-delete files (those with a
  sequence number up to the latest such file's, `pending_deletes`) no longer count for it: they stay
  in the table only while another file still needs them, and must not make the segment be
  converted again, or counted twice.
- The duplicate ratio counts the records of the position-delete files that apply to a
  file (an upper bound of its position-deleted rows; exact for the files floe writes),
  for undersized segments as for segments. Equality-delete rows are not counted: a
  segment's equality deletes are converted first, and then counted as positions.
- Nothing to gain: for minor and major, a rewrite of a single data file with no delete
  applying to it; for full, a partition with no delete and fewer than two
  fragments/undersized segments. Such partitions are not optimized, even when forced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet

from floe.planning.config import OptimizingConfig
from floe.planning.files import (
    ContentFile,
    DeleteIndex,
    FileKind,
    PartitionKey,
    pending_deletes,
)
from floe.planning.plan import OptimizingType, PartitionEvaluation


def evaluate_partition(
    partition: PartitionKey,
    data_files: Sequence[ContentFile],
    delete_index: DeleteIndex,
    config: OptimizingConfig,
    now_s: float,
    last_minor_s: float | None,
    last_full_s: float | None,
    forced: OptimizingType | None = None,
) -> PartitionEvaluation:
    """Classify one partition's data files and decide which optimizing it needs.

    Without `forced`, the partition takes the strongest type whose trigger fired
    (full > major > minor); with it, the partition is evaluated as that type whatever
    the triggers say. Either way a partition with nothing to gain is not optimized:
    its evaluation has no type and no rewrite files. `cost` is `partition_cost` of the
    files to rewrite (0 when nothing is rewritten).

    `last_minor_s` is when the table last finished a minor optimizing; `last_full_s` when
    it last finished a full one.
    """
    files = sorted(data_files, key=lambda f: f.path)
    # A data file's deletes already merged into its position-delete file count no more.
    deletes_of = {f.path: pending_deletes(f, delete_index.deletes_for(f)) for f in files}
    fragments = tuple(f for f in files if f.size_bytes <= config.fragment_size)
    undersized = tuple(f for f in files if config.fragment_size < f.size_bytes <= config.undersized_size)
    segments = tuple(f for f in files if f.size_bytes > config.undersized_size)
    partition_deletes = delete_index.deletes_for_all(files)

    def evaluation(
        kind: OptimizingType | None,
        reason: str,
        rewrite: set[str],
        convert: set[str],
        packed: AbstractSet[str] = frozenset(),
    ) -> PartitionEvaluation:
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
            packed & minor_convert,
        )

    # Only segments count for the multi-position-delete trigger, as in Amoro: an undersized
    # segment's deletes go when major packs it.
    multi_pos = {f.path for f in segments if _count(deletes_of[f.path], FileKind.POSITION_DELETES) > 1}
    duplicated = {
        f.path
        for f in undersized + segments
        if position_deleted_rows(deletes_of[f.path]) > config.major_duplicate_ratio * f.record_count
    }
    minor_rewrite = {f.path for f in fragments}
    minor_convert = {f.path for f in undersized + segments if needs_positions(deletes_of[f.path])}
    major_rewrite = minor_rewrite | duplicated
    major_packed = {f.path for f in undersized} - duplicated
    if config.full_rewrite_all_files:
        full_rewrite = {f.path for f in files}
    else:
        full_rewrite = {f.path for f in fragments + undersized} | {
            f.path for f in files if deletes_of[f.path]
        }

    full_due = full_is_due(config, now_s, last_full_s)
    major_reasons = _major_reasons(undersized, duplicated, config)
    minor_reasons = _minor_reasons(
        len(fragments),
        _count(partition_deletes, FileKind.EQUALITY_DELETES),
        len(multi_pos),
        config,
        _elapsed(now_s, last_minor_s, config.minor_trigger_interval_s),
    )

    kind: OptimizingType
    if forced is not None:
        kind, reason = forced, f"forced {forced.label}"
    elif full_due:
        kind, reason = OptimizingType.FULL, f"full interval {config.full_trigger_interval_s:g}s elapsed"
    elif major_reasons:
        kind, reason = OptimizingType.MAJOR, "; ".join(major_reasons)
    elif minor_reasons:
        kind, reason = OptimizingType.MINOR, "; ".join(minor_reasons)
    else:
        return evaluation(None, "no trigger", set(), set())

    if kind == OptimizingType.FULL:
        rewrite, convert, packed = full_rewrite, set(), set()
        gain = bool(partition_deletes) or len(fragments) + len(undersized) >= 2
    else:
        rewrite = major_rewrite if kind == OptimizingType.MAJOR else minor_rewrite
        packed = major_packed if kind == OptimizingType.MAJOR else set()
        convert = minor_convert - rewrite - packed
        gain = (
            bool(convert)
            or len(rewrite | packed) >= 2
            or any(deletes_of[path] for path in rewrite)
            or bool(packed & minor_convert)
        )
    if not gain:
        return evaluation(None, f"{reason}, but nothing to gain", set(), set())
    return evaluation(kind, reason, rewrite, convert, packed)


def partition_evaluation(
    partition: PartitionKey,
    files: Sequence[ContentFile],
    delete_index: DeleteIndex,
    config: OptimizingConfig,
    kind: OptimizingType | None,
    reason: str,
    rewrite: AbstractSet[str],
    convert: AbstractSet[str],
    packed: AbstractSet[str],
    packed_convert: AbstractSet[str],
    kept_positions: AbstractSet[str] = frozenset(),
) -> PartitionEvaluation:
    """A partition's evaluation: its `files` (sorted by path) classed by size, the paths chosen for
    each action, and the cost of those actions."""
    rewrite_files = tuple(f for f in files if f.path in rewrite)
    convert_files = tuple(f for f in files if f.path in convert)
    packed_files = tuple(f for f in files if f.path in packed)
    return PartitionEvaluation(
        partition=partition,
        fragments=tuple(f for f in files if f.size_bytes <= config.fragment_size),
        undersized_segments=tuple(
            f for f in files if config.fragment_size < f.size_bytes <= config.undersized_size
        ),
        segments=tuple(f for f in files if f.size_bytes > config.undersized_size),
        delete_files=delete_index.deletes_for_all(files),
        optimizing_type=kind,
        reason=reason,
        rewrite_files=rewrite_files,
        convert_files=convert_files,
        packed_files=packed_files,
        packed_convert_paths=frozenset(packed_convert),
        kept_positions=frozenset(kept_positions),
        cost=partition_cost(
            rewrite_files + packed_files,
            delete_index.deletes_for_all(rewrite_files + packed_files),
            config,
            convert_files,
            delete_index.deletes_for_all(convert_files),
        ),
    )


def partition_cost(
    rewrite_files: Sequence[ContentFile],
    deletes: Sequence[ContentFile],
    config: OptimizingConfig,
    convert_files: Sequence[ContentFile] = (),
    convert_deletes: Sequence[ContentFile] = (),
) -> float:
    """Estimated cost, in bytes, of rewriting `rewrite_files` and converting the deletes of
    `convert_files` (docs/design/optimizing.md, "Partition cost").

    - data bytes * 2: every rewritten data file (fragment, undersized segment or
      segment) is read once and written once; a converted segment is not rewritten, and
      only the columns its equality deletes compare are read, so its bytes do not count;
    - position-delete records / 10: applying a position delete costs a little per
      deleted row on top of reading its file;
    - delete bytes: each applying delete file is read once;
    - files * open-file cost: the fixed price of opening each data and delete file.

    `deletes` are the delete files that apply to any of `rewrite_files`, each once, and
    `convert_deletes` those of `convert_files`.
    """
    data_bytes = sum(f.size_bytes for f in rewrite_files)
    all_deletes = {d.path: d for d in (*deletes, *convert_deletes)}.values()
    pos_records = sum(d.record_count for d in all_deletes if d.kind == FileKind.POSITION_DELETES)
    delete_bytes = sum(d.size_bytes for d in all_deletes)
    opened = len(rewrite_files) + len(convert_files) + len(all_deletes)
    return data_bytes * 2 + pos_records / 10 + delete_bytes + opened * config.open_file_cost_bytes


def _minor_reasons(
    fragment_count: int,
    eq_delete_count: int,
    multi_pos_count: int,
    config: OptimizingConfig,
    interval_due: bool,
) -> list[str]:
    reasons = []
    small = fragment_count + eq_delete_count
    if small >= config.minor_trigger_file_count:
        reasons.append(
            f"{fragment_count} fragments + {eq_delete_count} eq-deletes >= {config.minor_trigger_file_count}"
        )
    elif small > 1 and interval_due:
        reasons.append(
            f"{fragment_count} fragments + {eq_delete_count} eq-deletes"
            f" and minor interval {config.minor_trigger_interval_s:g}s elapsed"
        )
    if multi_pos_count:
        reasons.append(f"{multi_pos_count} segments with > 1 pos-delete file")
    return reasons


def _major_reasons(
    undersized: Sequence[ContentFile], duplicated: set[str], config: OptimizingConfig
) -> list[str]:
    reasons = []
    if undersized_fill_a_target(undersized, config.target_size):
        undersized_bytes = sum(f.size_bytes for f in undersized)
        reasons.append(
            f"{len(undersized)} undersized segments, {undersized_bytes} B >= target {config.target_size} B"
        )
    if duplicated:
        reasons.append(
            f"{len(duplicated)} segments with deleted records > {config.major_duplicate_ratio:g} x records"
        )
    return reasons


def undersized_fill_a_target(
    undersized: Sequence[ContentFile],
    target_size: int,
    size_of: Callable[[ContentFile], float] = lambda f: float(f.size_bytes),
) -> bool:
    """Major's undersized trigger: together they hold a target size, and the two smallest fit one
    file (else packing them would leave each alone in its bin); sizes by `size_of` (Amoro: bytes
    as they are)."""
    smallest = sorted(size_of(f) for f in undersized)[:2]
    return (
        len(smallest) == 2
        and sum(size_of(f) for f in undersized) >= target_size
        and sum(smallest) <= target_size
    )


def needs_positions(deletes: Iterable[ContentFile]) -> bool:
    """Whether a data file's pending deletes need converting into one position-delete file: any
    equality delete, or more than one position-delete file."""
    kinds = [d.kind for d in deletes]
    return FileKind.EQUALITY_DELETES in kinds or kinds.count(FileKind.POSITION_DELETES) > 1


def full_is_due(config: OptimizingConfig, now_s: float, last_full_s: float | None) -> bool:
    """Whether the full interval (off unless strictly positive) has passed since `last_full_s`."""
    return config.full_trigger_interval_s > 0 and _elapsed(now_s, last_full_s, config.full_trigger_interval_s)


def _elapsed(now_s: float, last_s: float | None, interval_s: float) -> bool:
    """Whether an interval (off when negative) has passed since `last_s` (None: never): strictly
    more time than the interval, as in Amoro."""
    if interval_s < 0:
        return False
    return last_s is None or now_s - last_s > interval_s


def position_deleted_rows(deletes: Iterable[ContentFile]) -> int:
    """Rows the position-delete files among `deletes` remove (an upper bound: exact for the files
    floe writes)."""
    return sum(d.record_count for d in deletes if d.kind == FileKind.POSITION_DELETES)


def _count(deletes: Iterable[ContentFile], kind: FileKind) -> int:
    return sum(1 for d in deletes if d.kind == kind)
