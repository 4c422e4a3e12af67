"""Planning: partition order, the max_tasks cut, bin packing and delete attachment."""

from __future__ import annotations

import random
from collections.abc import Sequence

from floe.planning.config import OptimizingConfig
from floe.planning.files import ContentFile, FileKind, PartitionKey, TableFiles
from floe.planning.plan import POSITIONS, REWRITE, OptimizingPlan, OptimizingType
from floe.planning.planner import cap_plan, plan_optimizing

# fragment <= 125 B, undersized segment <= 750 B, segment above; bins of 1000 B.
CFG = OptimizingConfig(target_size=1000, max_task_size_bytes=1000, open_file_cost_bytes=10)
P = PartitionKey(0, (1,))
NOW = 100_000.0


def data(path: str, size: int, seq: int = 1, records: int = 100, partition: PartitionKey = P) -> ContentFile:
    return ContentFile(path, FileKind.DATA, partition, records, size, seq)


def pos(path: str, seq: int = 2, partition: PartitionKey = P, ref: str | None = None) -> ContentFile:
    return ContentFile(path, FileKind.POSITION_DELETES, partition, 1, 10, seq, referenced_data_file=ref)


def eq(path: str, seq: int = 2, partition: PartitionKey = P) -> ContentFile:
    return ContentFile(path, FileKind.EQUALITY_DELETES, partition, 1, 10, seq, equality_ids=(1,))


def fragments(n: int, size: int = 100, partition: PartitionKey = P) -> list[ContentFile]:
    return [
        data(f"{partition.spec_id}/{partition.describe()}/frag-{i:03}", size, partition=partition)
        for i in range(n)
    ]


def plan(
    data_files: Sequence[ContentFile],
    delete_files: Sequence[ContentFile] = (),
    config: OptimizingConfig = CFG,
    forced: OptimizingType | None = None,
    max_tasks: int | None = None,
) -> OptimizingPlan:
    files = TableFiles(7, 3, tuple(data_files), tuple(delete_files))
    return plan_optimizing(files, config, NOW, NOW, NOW, forced, max_tasks)


def task_paths(p: OptimizingPlan) -> list[list[str]]:
    return [[f.path for f in t.data_files] for t in p.tasks]


def test_empty_table_gives_an_empty_plan() -> None:
    p = plan([])
    assert p.is_empty
    assert p.optimizing_type is None
    assert (p.snapshot_id, p.sequence_number) == (7, 3)


def test_table_with_only_delete_files_gives_an_empty_plan() -> None:
    assert plan([], [pos("p"), eq("e")]).is_empty


def test_partition_without_trigger_gives_an_empty_plan() -> None:
    p = plan(fragments(11))
    assert p.is_empty
    assert p.partitions == ()


def test_bins_never_exceed_the_bin_size() -> None:
    rng = random.Random(42)
    files = [data(f"f{i:03}", rng.randint(1, 125)) for i in range(60)]
    p = plan(files)
    assert p.optimizing_type == OptimizingType.MINOR
    assert all(sum(f.size_bytes for f in t.data_files) <= CFG.bin_size for t in p.tasks)
    planned = [f for t in p.tasks for f in t.data_files]
    assert len(set(planned)) == len(planned) >= len(files) - 1  # at most one lone fragment dropped


def test_an_oversized_file_gets_a_bin_of_its_own() -> None:
    big = data("big", 1500, records=100)
    p = plan([big, *fragments(12)], [pos("p", ref="big"), pos("p2", ref="big")])
    [alone] = [t for t in p.tasks if big in t.data_files]
    assert alone.data_files == (big,)
    assert [d.path for d in alone.delete_files] == ["p", "p2"]
    assert all(sum(f.size_bytes for f in t.data_files) <= CFG.bin_size for t in p.tasks if t is not alone)


def test_single_file_bins_without_deletes_are_dropped() -> None:
    # Major: 1700 B of undersized segments, the two smallest fit one target. First-fit
    # decreasing makes [700, 300] and [700]; the lone 700 has nothing to gain.
    p = plan([data("a", 700), data("b", 700), data("c", 300)])
    assert p.optimizing_type == OptimizingType.MAJOR
    assert task_paths(p) == [["a", "c"]]


def test_single_file_bin_with_deletes_is_kept() -> None:
    # "b" passed the duplicate ratio (20 of its 100 rows deleted): major rewrites it alone.
    over_ratio = ContentFile("p", FileKind.POSITION_DELETES, P, 20, 10, 2, referenced_data_file="b")
    p = plan([data("a", 700), data("b", 700), data("c", 300)], [over_ratio])
    assert task_paths(p) == [["a", "c"], ["b"]]
    assert [[d.path for d in t.delete_files] for t in p.tasks] == [[], ["p"]]


def test_a_lone_undersized_segment_is_not_rewritten_for_deletes_below_the_ratio() -> None:
    # As in Amoro: rewriting "b" alone would leave it undersized, to be rewritten at every
    # major. Its one position-delete file stays; nothing reads "b" in this process.
    p = plan([data("a", 700), data("b", 700), data("c", 300)], [pos("p", ref="b")])
    assert p.optimizing_type == OptimizingType.MAJOR
    assert task_paths(p) == [["a", "c"]]
    assert p.tasks[0].delete_files == ()


def test_a_lone_undersized_segment_whose_deletes_need_it_is_converted() -> None:
    p = plan(
        [data("a", 700), data("b", 700), data("c", 300)],
        [pos("p1", ref="b"), pos("p2", ref="b"), eq("e", seq=2)],
    )
    assert [(t.kind, [f.path for f in t.data_files]) for t in p.tasks] == [
        (REWRITE, ["a", "c"]),
        (POSITIONS, ["b"]),
    ]
    assert [d.path for d in p.tasks[1].delete_files] == ["e", "p1", "p2"]


def test_undersized_segments_too_large_to_pair_are_left_as_they_are() -> None:
    # Each 600 B segment fills more than half a bin: only the 300 B one finds a partner.
    # Rewriting the others one by one, each would come out about as undersized as it went in.
    files = [data(f"u{i}", 600) for i in range(5)] + [data("small", 300)]
    deletes = [pos(f"p{i}", ref=f"u{i}") for i in range(5)]
    p = plan(files, deletes)
    assert p.optimizing_type == OptimizingType.MAJOR
    assert task_paths(p) == [["u0", "small"]]


def test_deletes_attach_only_to_tasks_whose_files_they_apply_to() -> None:
    # Bins of 8 files: [frag-000..007], [frag-008..011, late-0..3], [late-4..7].
    late = [data(f"late-{i}", 120, seq=3) for i in range(8)]
    deletes = [pos("only-frag-000", ref="0/1/frag-000"), eq("eq-before-late", seq=2)]
    p = plan([*fragments(12, size=120), *late], deletes)
    assert [len(t.data_files) for t in p.tasks] == [8, 8, 4]
    assert [[d.path for d in t.delete_files] for t in p.tasks] == [
        ["eq-before-late", "only-frag-000"],
        ["eq-before-late"],
        [],
    ]


def test_partitions_never_share_a_task_across_specs() -> None:
    old, new = PartitionKey(0, (1,)), PartitionKey(1, (1,))
    files = [*fragments(12, size=10, partition=old), *fragments(12, size=10, partition=new)]
    p = plan(files, [pos("new-pos", partition=new)])
    assert len(p.tasks) == 2
    for task in p.tasks:
        assert {f.partition for f in task.data_files} == {task.partition}
    by_partition = {t.partition: [d.path for d in t.delete_files] for t in p.tasks}
    assert by_partition == {old: [], new: ["new-pos"]}


def test_unpartitioned_table() -> None:
    unpartitioned = PartitionKey(0, (), global_scope=True)
    p = plan(fragments(12, partition=unpartitioned), [eq("e", partition=unpartitioned)])
    assert p.optimizing_type == OptimizingType.MINOR
    assert len(p.tasks) == 2
    assert all([d.path for d in t.delete_files] == ["e"] for t in p.tasks)


def three_partitions() -> tuple[PartitionKey, PartitionKey, PartitionKey, list[ContentFile]]:
    big, mid, small = PartitionKey(0, ("big",)), PartitionKey(0, ("mid",)), PartitionKey(0, ("small",))
    files = [
        *fragments(12, size=50, partition=small),  # 1 task
        *fragments(30, size=100, partition=big),  # 3 tasks
        *fragments(20, size=100, partition=mid),  # 2 tasks
    ]
    return big, mid, small, files


def test_partitions_are_planned_most_costly_first() -> None:
    big, mid, small, files = three_partitions()
    p = plan(files)
    assert [e.partition for e in p.partitions] == [big, mid, small]
    assert [e.cost for e in p.partitions] == sorted((e.cost for e in p.partitions), reverse=True)
    assert [t.partition for t in p.tasks] == [big] * 3 + [mid] * 2 + [small]


def test_max_tasks_stops_at_the_first_partition_that_does_not_fit() -> None:
    big, mid, _, files = three_partitions()
    assert [e.partition for e in plan(files, max_tasks=5).partitions] == [big, mid]
    # mid does not fit in 4; small would, but does not overtake the costlier mid.
    assert [e.partition for e in plan(files, max_tasks=4).partitions] == [big]


def test_max_tasks_always_takes_one_partition_whole() -> None:
    big, _, _, files = three_partitions()
    p = plan(files, max_tasks=1)
    assert [e.partition for e in p.partitions] == [big]
    assert len(p.tasks) == 3


def test_plan_type_is_the_strongest_partition_type() -> None:
    minor_p, major_p = PartitionKey(0, ("minor",)), PartitionKey(0, ("major",))
    files = [
        *fragments(12, partition=minor_p),
        data("u1", 600, partition=major_p),
        data("u2", 400, partition=major_p),
    ]
    p = plan(files)
    assert {e.partition: e.optimizing_type for e in p.partitions} == {
        minor_p: OptimizingType.MINOR,
        major_p: OptimizingType.MAJOR,
    }
    assert p.optimizing_type == OptimizingType.MAJOR


def test_forced_type_reaches_the_plan() -> None:
    p = plan([*fragments(2), data("seg", 800)], forced=OptimizingType.FULL)
    assert p.optimizing_type == OptimizingType.FULL
    assert sorted(f.path for t in p.tasks for f in t.data_files) == ["0/1/frag-000", "0/1/frag-001", "seg"]


def test_same_files_in_any_order_give_the_same_plan() -> None:
    _, _, _, files = three_partitions()
    deletes = [pos(f"p{i}", partition=files[i].partition, ref=files[i].path) for i in range(0, 60, 7)]
    deletes.append(eq("e", partition=files[0].partition))
    expected = plan(files, deletes)
    rng = random.Random(7)
    for _ in range(5):
        shuffled, shuffled_deletes = files[:], deletes[:]
        rng.shuffle(shuffled)
        rng.shuffle(shuffled_deletes)
        assert plan(shuffled, shuffled_deletes) == expected


def test_partitions_cut_by_max_tasks_are_counted_as_deferred() -> None:
    files = TableFiles(
        snapshot_id=1,
        sequence_number=1,
        data_files=tuple(
            ContentFile(f"p{p}/f{i}", FileKind.DATA, PartitionKey(0, (p,)), 10, 1000 + p, 1)
            for p in range(3)
            for i in range(12)
        ),
        delete_files=(),
    )
    plan = plan_optimizing(files, OptimizingConfig(), now_s=0, last_minor_s=0, last_full_s=None, max_tasks=1)
    assert len(plan.partitions) == 1 and plan.deferred_partitions == 2
    whole = plan_optimizing(files, OptimizingConfig(), now_s=0, last_minor_s=0, last_full_s=None)
    assert len(whole.partitions) == 3 and whole.deferred_partitions == 0


def random_table(rng: random.Random) -> TableFiles:
    """Up to six partitions, each a lone file, undersized segments no two of which share a bin
    (forced major or full takes them, and packs them into no task), or a mix of fragments,
    undersized segments and segments; some files with position deletes, some partitions with an
    equality delete."""
    data_files: list[ContentFile] = []
    delete_files: list[ContentFile] = []
    for number in range(rng.randint(0, 6)):
        partition = PartitionKey(0, (number,))
        shape = rng.random()
        if shape < 0.2:
            sizes = [rng.randint(1, 1500)]
        elif shape < 0.4:  # undersized segments no two of which share a bin
            sizes = [rng.randint(501, 750) for _ in range(rng.randint(2, 4))]
        else:
            sizes = [rng.randint(1, 125) for _ in range(rng.choice([0, 1, 5, 12, 20, 35]))]
            sizes += [rng.randint(126, 750) for _ in range(rng.randint(0, 4))]
            sizes += [rng.randint(751, 1500) for _ in range(rng.randint(0, 3))]
        files = [data(f"{number}/f{i:02}", size, partition=partition) for i, size in enumerate(sizes)]
        for f in rng.sample(files, rng.randint(0, len(files))):
            for j in range(rng.randint(1, 3)):
                delete_files.append(pos(f"{f.path}-pos{j}", partition=partition, ref=f.path))
        if files and rng.random() < 0.2:
            delete_files.append(eq(f"{number}/eq", partition=partition))
        data_files += files
    return TableFiles(7, 3, tuple(data_files), tuple(delete_files))


def test_capping_the_uncapped_plan_gives_the_capped_plan() -> None:
    """`cap_plan` works out what planning with `max_tasks` gives, from the plan without: the
    engine plans once, at refresh, and caps the plan to the group's threads when it starts it."""
    rng = random.Random(37)
    cut = subtle = 0
    for _ in range(200):
        files = random_table(rng)
        forced = rng.choice([None, None, OptimizingType.MINOR, OptimizingType.MAJOR, OptimizingType.FULL])
        last_minor, last_full = rng.choice([NOW, None, 0.0]), rng.choice([NOW, None])
        uncapped = plan_optimizing(files, CFG, NOW, last_minor, last_full, forced)
        for max_tasks in [None, 0, 1, 2, 3, 5, 8, 1000, rng.randint(0, len(uncapped.tasks) + 1)]:
            capped = plan_optimizing(files, CFG, NOW, last_minor, last_full, forced, max_tasks)
            assert cap_plan(uncapped, max_tasks) == capped, (files, forced, max_tasks)
            cut += capped.deferred_partitions > 0
            # Deferred candidates that pack into no task count too: not only the partitions left out.
            subtle += capped.deferred_partitions > len(uncapped.partitions) - len(capped.partitions)
    assert cut > 300 and subtle > 20  # both kinds of cut came up


def test_converted_segments_go_to_positions_tasks_with_their_deletes() -> None:
    segments = [data(f"seg-{i}", 900) for i in range(10)]
    deletes = [pos(f"p-{i}-{j}", ref=f"seg-{i}") for i in range(10) for j in range(2)]
    result = plan([*fragments(12), *segments, data("clean", 900)], [*deletes, eq("e", seq=3)])
    assert result.optimizing_type == OptimizingType.MINOR
    positions = [t for t in result.tasks if t.kind == POSITIONS]
    rewrites = [t for t in result.tasks if t.kind == REWRITE]
    # Bins of 8 x 1000 B: the ten 900 B segments (and the clean one, which the
    # equality delete reaches) fill two positions tasks.
    assert sorted(len(t.data_files) for t in positions) == [3, 8]
    assert {f.path for t in positions for f in t.data_files} == {f"seg-{i}" for i in range(10)} | {"clean"}
    for task in positions:
        carried = {d.path for d in task.delete_files}
        segment_numbers = [f.path.removeprefix("seg-") for f in task.data_files if f.path != "clean"]
        assert carried == {"e"} | {f"p-{i}-{j}" for i in segment_numbers for j in range(2)}
    assert {f.path for t in rewrites for f in t.data_files} == {f.path for f in fragments(12)}
