"""floe's optimizing policy (`floe.planning.floe_policy`): its decisions, and each departure from
Amoro's rules shown on a partition where the two decide differently, with the reason."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from floe.planning.config import MiB, OptimizingConfig
from floe.planning.files import MERGED_POSITIONS_SUFFIX, ContentFile, FileKind, PartitionKey, TableFiles
from floe.planning.floe_policy import FAVORS, level_of, levelled_merge, position_level, positions_to_merge
from floe.planning.plan import OptimizingType, PartitionEvaluation
from floe.planning.planner import plan_optimizing
from floe.planning.table_evaluation import evaluate_table

# Files of a few MiB, as the CDC benchmark's: fragment <= 1 MiB, undersized <= 6 MiB.
AMORO = OptimizingConfig(target_size=8 * MiB, max_task_size_bytes=8 * MiB)
FLOE = replace(AMORO, policy="floe")
P = PartitionKey(0, ())
NOW = 1_000_000.0
ROWS_PER_MIB = 40_000


def data(name: str, mib: float, seq: int = 1) -> ContentFile:
    size = int(mib * MiB)
    return ContentFile(f"data/{name}.parquet", FileKind.DATA, P, int(mib * ROWS_PER_MIB), size, seq)


def positions(target: ContentFile, rows: int, seq: int = 5) -> ContentFile:
    """A position-delete file removing ``rows`` of ``target``."""
    return ContentFile(
        f"deletes/{target.path.split('/')[-1]}-{seq}-pos.parquet",
        FileKind.POSITION_DELETES,
        P,
        rows,
        rows * 4,
        seq,
        referenced_data_file=target.path,
    )


def equality(name: str, rows: int, seq: int = 9) -> ContentFile:
    return ContentFile(
        f"deletes/{name}-eq.parquet", FileKind.EQUALITY_DELETES, P, rows, rows * 8, seq, equality_ids=(1,)
    )


def evaluate(
    config: OptimizingConfig,
    data_files: Sequence[ContentFile],
    delete_files: Sequence[ContentFile] = (),
    last_minor_s: float | None = NOW,
    forced: OptimizingType | None = None,
) -> PartitionEvaluation:
    files = TableFiles(1, 10, tuple(data_files), tuple(delete_files))
    [evaluation] = evaluate_table(files, config, NOW, last_minor_s, NOW, forced)
    return evaluation


def rewritten(evaluation: PartitionEvaluation) -> set[str]:
    return {
        f.path.split("/")[-1].removesuffix(".parquet")
        for f in evaluation.rewrite_files + evaluation.packed_files
    }


def converted(evaluation: PartitionEvaluation) -> set[str]:
    return {f.path.split("/")[-1].removesuffix(".parquet") for f in evaluation.convert_files}


def segments(count: int, mib: float = 8.0) -> list[ContentFile]:
    return [data(f"seg-{i}", mib) for i in range(count)]


# -- levels -----------------------------------------------------------------------------------


def test_a_level_holds_files_fanout_times_smaller_than_the_one_above() -> None:
    target = 8 * MiB
    assert [
        level_of(size, target, 4) for size in (6 * MiB, 2 * MiB + 1, 2 * MiB, MiB // 2 + 1, MiB // 2)
    ] == [
        1,
        1,
        1,
        2,
        2,
    ]
    assert level_of(1, target, 4) == 12


def test_the_largest_full_level_merges_with_every_smaller_file() -> None:
    target = 8 * MiB
    level_one = [data(f"big-{i}", 3) for i in range(2)]
    level_two = [data(f"mid-{i}", 1) for i in range(4)]
    level_three = [data("small", 0.2)]
    level, merged = levelled_merge(level_one + level_two + level_three, target, 4)
    assert level == 2
    assert merged == {f.path for f in level_two + level_three}
    assert levelled_merge(level_one + level_two[:3], target, 4) == (0, set())


# -- departures from Amoro, each where the two decide differently ------------------------------


def test_young_files_wait_for_their_level_where_amoro_rewrites_them_every_interval() -> None:
    # Fragments one short of the fanout and the minor interval elapsed: Amoro merges them now, and
    # will merge their output again with the next hour's; floe waits for the level to fill, so each
    # byte is rewritten once per level (log_fanout(fragment size / size written) times), not once
    # per interval.
    fanout = FAVORS["balanced"].fanout
    files = segments(4) + [data(f"frag-{i}", 0.2, seq=2 + i) for i in range(fanout - 1)]
    amoro = evaluate(AMORO, files, last_minor_s=None)
    floe = evaluate(FLOE, files, last_minor_s=None)
    assert amoro.optimizing_type == OptimizingType.MINOR
    assert rewritten(amoro) == {f"frag-{i}" for i in range(fanout - 1)}
    assert floe.optimizing_type is None and not rewritten(floe)
    full = evaluate(FLOE, [*files, data("frag-last", 0.2, seq=99)], last_minor_s=None)
    assert full.optimizing_type == OptimizingType.MINOR
    assert rewritten(full) == {f"frag-{i}" for i in range(fanout - 1)} | {"frag-last"}


def test_small_files_fill_the_bins_of_a_rewrite_so_its_output_is_full_size() -> None:
    # A segment 45 % deleted and a 2.4 MiB undersized segment: Amoro rewrites the segment alone
    # into a 4.4 MiB file, undersized, which a later major packs again; floe puts the undersized
    # file in the same bin, and one 6.8 MiB file comes out.
    files = [*segments(3), data("under-0", 2.4)]
    deletes = [positions(files[0], int(0.45 * files[0].record_count))]
    amoro = plan_optimizing(TableFiles(1, 10, tuple(files), tuple(deletes)), AMORO, NOW, NOW, NOW)
    floe = plan_optimizing(TableFiles(1, 10, tuple(files), tuple(deletes)), FLOE, NOW, NOW, NOW)
    assert [[f.path for f in t.data_files] for t in amoro.tasks] == [["data/seg-0.parquet"]]
    assert [sorted(f.path for f in t.data_files) for t in floe.tasks] == [
        ["data/seg-0.parquet", "data/under-0.parquet"]
    ]


def test_a_segment_past_amoros_duplicate_ratio_is_kept_until_the_favors_share() -> None:
    # A quarter of one segment's rows deleted: Amoro's major rewrites it (ratio 0.1), writing 3
    # bytes per byte it drops; floe (balanced: 0.4) keeps it, its deletes one position file that
    # readers apply cheaply, and rewrites it past 0.4, at 1.5 bytes written per byte dropped or fewer.
    files = segments(8)
    some = [positions(files[0], int(0.25 * files[0].record_count))]
    amoro = evaluate(AMORO, files, some)
    floe = evaluate(FLOE, files, some)
    assert amoro.optimizing_type == OptimizingType.MAJOR and rewritten(amoro) == {"seg-0"}
    assert floe.optimizing_type is None
    many = [positions(files[0], int(0.45 * files[0].record_count))]
    assert rewritten(evaluate(FLOE, files, many)) == {"seg-0"}
    assert evaluate(replace(FLOE, favor="reads"), files, some).optimizing_type == OptimizingType.MAJOR


def test_equality_deletes_are_converted_at_every_plan_not_after_a_file_count_or_interval() -> None:
    # One equality-delete file over eight segments, the minor interval not elapsed, one file under
    # Amoro's trigger count of 12: Amoro waits for the interval while every read hashes each row's
    # key; floe converts now, writing only position-delete files.
    files = segments(8)
    deletes = [equality("upsert", 20_000)]
    amoro = evaluate(AMORO, files, deletes)
    floe = evaluate(FLOE, files, deletes)
    assert amoro.optimizing_type is None
    assert floe.optimizing_type == OptimizingType.MINOR
    assert converted(floe) == {f"seg-{i}" for i in range(8)} and not rewritten(floe)


def test_rewrites_are_packed_by_the_rows_they_keep_so_outputs_reach_target_size() -> None:
    # Four segments each 55 % deleted: packed by file size (Amoro's way) each is alone in its bin
    # and comes out 3.6 MiB, undersized; by live bytes floe packs two to a bin.
    files = segments(4)
    deletes = [positions(f, int(0.55 * f.record_count)) for f in files]
    plan = plan_optimizing(TableFiles(1, 10, tuple(files), tuple(deletes)), FLOE, NOW, NOW, NOW)
    assert sorted(len(t.data_files) for t in plan.tasks) == [2, 2]


def test_undersized_files_count_as_the_rewrite_writes_them_so_each_row_is_packed_once() -> None:
    # A streaming writer's 2 MiB files take 35 bytes a row where the partition's full-size
    # segments take 26. Four hold a target by their bytes: Amoro packs them into one 6 MiB file,
    # undersized again, which it packs a second time later. floe counts them at the segments' 26
    # bytes a row (1.5 MiB each), waits for six, and packs five into one 7.5 MiB file, past
    # undersized; the sixth waits, alone in its bin.
    writer = [ContentFile(f"data/w-{i}.parquet", FileKind.DATA, P, 60_000, 2 * MiB, 2) for i in range(6)]
    four = [*segments(4), *writer[:4]]
    amoro = evaluate(AMORO, four)
    assert amoro.optimizing_type == OptimizingType.MAJOR and rewritten(amoro) == {f"w-{i}" for i in range(4)}
    assert evaluate(FLOE, four).optimizing_type is None
    plan = plan_optimizing(TableFiles(1, 10, (*segments(4), *writer), ()), FLOE, NOW, NOW, NOW)
    [task] = plan.tasks
    rows = sum(f.record_count for f in task.data_files)
    assert len(task.data_files) == 5 and rows / ROWS_PER_MIB * MiB > FLOE.undersized_size
    # With no full-size file to tell the bytes a row takes, files count as they are (Amoro's way).
    assert evaluate(FLOE, writer[:4]).optimizing_type == OptimizingType.MAJOR


# -- the knob, and what stays Amoro's --------------------------------------------------------------


@pytest.mark.parametrize("share", [0.1, 0.2, 0.3, 0.45, 0.6])
def test_favoring_writes_never_rewrites_more_than_favoring_reads(share: float) -> None:
    files = segments(10) + [data(f"frag-{i}", 0.3, seq=2 + i) for i in range(5)]
    deletes = [positions(f, int(share * f.record_count * (i + 1) / 10)) for i, f in enumerate(files[:10])]
    written = {
        favor: sum(
            f.size_bytes
            for f in evaluate(replace(FLOE, favor=favor), files, deletes).rewrite_files
            + evaluate(replace(FLOE, favor=favor), files, deletes).packed_files
        )
        for favor in FAVORS
    }
    assert written["reads"] >= written["balanced"] >= written["writes"]


def test_a_forced_or_due_full_optimizing_follows_amoros_rules() -> None:
    files = [*segments(2), data("frag-0", 0.2, seq=2), data("frag-1", 0.2, seq=3)]
    forced = evaluate(FLOE, files, forced=OptimizingType.FULL)
    assert forced == evaluate(AMORO, files, forced=OptimizingType.FULL)
    due = replace(FLOE, full_trigger_interval_s=60.0)
    files_ = TableFiles(1, 10, tuple(files), ())
    [floe] = evaluate_table(files_, due, NOW, NOW, NOW - 120)
    [amoro] = evaluate_table(files_, replace(due, policy="amoro"), NOW, NOW, NOW - 120)
    assert floe == amoro and floe.optimizing_type == OptimizingType.FULL


def test_a_clean_partition_of_segments_needs_nothing() -> None:
    evaluation = evaluate(FLOE, segments(5))
    assert evaluation.optimizing_type is None
    assert evaluation.reason == "no level full, no file past the deleted share, no equality delete"


# -- position deletes merged in levels (format v2) --------------------------------------------------


def merged(target: ContentFile, rows: int, seq: int) -> ContentFile:
    """A position-delete file a positions task wrote for ``target``."""
    name = f"deletes/{target.path.split('/')[-1]}-{seq}{MERGED_POSITIONS_SUFFIX}"
    return ContentFile(
        name, FileKind.POSITION_DELETES, P, rows, rows * 4, seq, referenced_data_file=target.path
    )


def test_a_level_of_position_files_merges_when_the_new_file_fills_it() -> None:
    seg = data("seg", 8)
    # fanout 3: two files of 20-26 rows (level 2) and the new one fill their level.
    small = [merged(seg, 20, 2), merged(seg, 25, 3)]
    assert positions_to_merge(small[:1], 3) == set()
    assert positions_to_merge(small, 3) == {d.path for d in small}
    # A full level above merges too, with every smaller file; a larger level stays.
    large, mid = merged(seg, 2000, 1), [merged(seg, 100, 4), merged(seg, 110, 5), merged(seg, 120, 6)]
    assert positions_to_merge([large, *mid, small[0]], 3) == {d.path for d in [*mid, small[0]]}
    assert position_level(2000, 3) > position_level(120, 3) > position_level(20, 3)


def test_a_conversion_keeps_the_merged_position_files_amoro_would_rewrite() -> None:
    # A segment converted twice already, and new equality deletes: Amoro's conversion writes every
    # position again into one file (rewriting all the rows deleted so far, at every minor); floe's
    # keeps the two files, whose level is not full, and writes only the new rows.
    files = segments(2)
    held = [merged(files[0], 400, 3), merged(files[0], 420, 5)]
    deletes = [*held, equality("upsert", 2_000, seq=9)]
    floe = evaluate(FLOE, files, deletes)
    amoro = evaluate(AMORO, files, deletes, last_minor_s=None)
    assert converted(floe) == converted(amoro) == {"seg-0", "seg-1"}
    assert floe.kept_positions == {d.path for d in held} and amoro.kept_positions == set()
    plan = plan_optimizing(TableFiles(1, 10, tuple(files), tuple(deletes)), FLOE, NOW, NOW, NOW)
    [task] = plan.tasks
    assert task.kept_delete_paths == {d.path for d in held}
    # favor reads (fanout 3): the new file fills the level, which merges.
    assert evaluate(replace(FLOE, favor="reads"), files, deletes).kept_positions == set()


def test_merged_position_files_alone_need_no_conversion_but_a_writers_beside_them_do() -> None:
    files = segments(1)
    held = [merged(files[0], 400, 3), merged(files[0], 420, 5)]
    assert evaluate(FLOE, files, held).optimizing_type is None
    writers = positions(files[0], 30, seq=7)
    assert evaluate(FLOE, files, [writers]).optimizing_type is None  # one file reads as cheaply
    both = evaluate(FLOE, files, [*held, writers])
    assert converted(both) == {"seg-0"} and both.kept_positions == {d.path for d in held}


def test_a_v3_table_merges_every_position_into_one_deletion_vector() -> None:
    # Format v3 allows one deletion vector per data file: nothing is kept, and two files convert.
    files = segments(1)
    held = [merged(files[0], 400, 3), merged(files[0], 420, 5)]
    [v3] = evaluate_table(TableFiles(1, 10, tuple(files), tuple(held), format_version=3), FLOE, NOW, NOW, NOW)
    assert converted(v3) == {"seg-0"} and v3.kept_positions == set()
