"""Per-partition triggers and their boundaries (docs/design/optimizing.md, "Evaluation, per partition")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from floe.planning.config import OptimizingConfig
from floe.planning.files import (
    MERGED_POSITIONS_SUFFIX,
    ContentFile,
    DeleteIndex,
    FileKind,
    PartitionKey,
    TableFiles,
    delete_applies_to,
)
from floe.planning.plan import OptimizingType, PartitionEvaluation
from floe.planning.table_evaluation import evaluate_table

# fragment <= 125 B, undersized segment <= 750 B, segment above; bins of 1000 B.
CFG = OptimizingConfig(target_size=1000, max_task_size_bytes=1000, open_file_cost_bytes=10)
P = PartitionKey(0, (1,))
NOW = 100_000.0
JUST_NOW = NOW  # a last-optimizing time for which no interval has elapsed


def data(path: str, size: int, seq: int = 1, records: int = 100, partition: PartitionKey = P) -> ContentFile:
    return ContentFile(path, FileKind.DATA, partition, records, size, seq)


def pos(
    path: str, seq: int = 2, records: int = 1, partition: PartitionKey = P, ref: str | None = None
) -> ContentFile:
    return ContentFile(path, FileKind.POSITION_DELETES, partition, records, 10, seq, referenced_data_file=ref)


def eq(path: str, seq: int = 2, records: int = 1, partition: PartitionKey = P) -> ContentFile:
    return ContentFile(path, FileKind.EQUALITY_DELETES, partition, records, 10, seq, equality_ids=(1,))


def fragments(n: int, size: int = 100, partition: PartitionKey = P) -> list[ContentFile]:
    return [
        data(f"{partition.spec_id}/{partition.describe()}/frag-{i:03}", size, partition=partition)
        for i in range(n)
    ]


def table(data_files: Sequence[ContentFile], delete_files: Sequence[ContentFile] = ()) -> TableFiles:
    return TableFiles(1, 3, tuple(data_files), tuple(delete_files))


def evaluate_all(
    data_files: Sequence[ContentFile],
    delete_files: Sequence[ContentFile] = (),
    config: OptimizingConfig = CFG,
    last_minor_s: float | None = JUST_NOW,
    last_full_s: float | None = JUST_NOW,
    forced: OptimizingType | None = None,
) -> list[PartitionEvaluation]:
    return evaluate_table(table(data_files, delete_files), config, NOW, last_minor_s, last_full_s, forced)


def evaluate_one(
    data_files: Sequence[ContentFile],
    delete_files: Sequence[ContentFile] = (),
    config: OptimizingConfig = CFG,
    last_minor_s: float | None = JUST_NOW,
    last_full_s: float | None = JUST_NOW,
    forced: OptimizingType | None = None,
) -> PartitionEvaluation:
    [evaluation] = evaluate_all(data_files, delete_files, config, last_minor_s, last_full_s, forced)
    return evaluation


def paths(files: tuple[ContentFile, ...]) -> list[str]:
    return [f.path for f in files]


def test_size_class_boundaries_are_inclusive() -> None:
    e = evaluate_one([data("a", 125), data("b", 126), data("c", 750), data("d", 751)])
    assert paths(e.fragments) == ["a"]
    assert paths(e.undersized_segments) == ["b", "c"]
    assert paths(e.segments) == ["d"]


def test_minor_by_file_count() -> None:
    below = evaluate_one(fragments(11))
    assert below.optimizing_type is None
    assert not below.needs_optimizing
    at = evaluate_one(fragments(12))
    assert at.optimizing_type == OptimizingType.MINOR
    assert len(at.rewrite_files) == 12
    assert "12 fragments + 0 eq-deletes >= 12" in at.reason


def test_minor_by_interval() -> None:
    two = fragments(2)
    elapsed = evaluate_one(two, last_minor_s=NOW - 3601)
    assert elapsed.optimizing_type == OptimizingType.MINOR
    assert "interval" in elapsed.reason
    # Strictly longer than the interval, as in Amoro.
    assert evaluate_one(two, last_minor_s=NOW - 3600).optimizing_type is None
    assert evaluate_one(two, last_minor_s=None).optimizing_type == OptimizingType.MINOR


def test_minor_interval_needs_more_than_one_file() -> None:
    e = evaluate_one([*fragments(1), data("seg", 900)], last_minor_s=None)
    assert e.optimizing_type is None
    assert not e.rewrite_files


def test_negative_minor_interval_disables_the_interval_trigger() -> None:
    config = replace(CFG, minor_trigger_interval_s=-1)
    assert evaluate_one(fragments(2), config=config, last_minor_s=None).optimizing_type is None


def test_minor_by_more_than_one_pos_delete_on_a_segment() -> None:
    files = [data("seg", 900), data("clean", 900)]
    one = evaluate_one(files, [pos("p1")])
    assert one.optimizing_type is None
    two = evaluate_one(files, [pos("p1", ref="seg"), pos("p2", ref="seg")])
    assert two.optimizing_type == OptimizingType.MINOR
    assert "1 segments with > 1 pos-delete file" in two.reason
    # The segment stays; its two position-delete files become one.
    assert paths(two.rewrite_files) == []
    assert paths(two.convert_files) == ["seg"]


def test_pos_deletes_on_an_undersized_segment_do_not_trigger_minor() -> None:
    assert evaluate_one([data("small-seg", 500)], [pos("p1"), pos("p2")]).optimizing_type is None


def test_minor_converts_undersized_segments_as_segments_and_major_packs_them() -> None:
    files = [*fragments(12), data("small-seg", 500), data("seg", 900), data("clean", 900)]
    deletes = [
        pos("p1", ref="small-seg"),
        pos("p2", ref="small-seg"),
        pos("p3", ref="seg"),
        eq("e", seq=2),
    ]
    e = evaluate_one(files, deletes)
    assert e.optimizing_type == OptimizingType.MINOR
    assert sorted(paths(e.rewrite_files)) == sorted(f.path for f in fragments(12))
    assert paths(e.convert_files) == ["clean", "seg", "small-seg"]
    major = evaluate_one(files, deletes, forced=OptimizingType.MAJOR)
    assert "small-seg" not in paths(major.rewrite_files)
    assert paths(major.packed_files) == ["small-seg"]
    assert major.packed_convert_paths == {"small-seg"}
    assert paths(major.convert_files) == ["clean", "seg"]


def test_one_position_delete_file_on_a_segment_is_left_alone() -> None:
    e = evaluate_one([*fragments(12), data("seg", 900)], [pos("p1", ref="seg")])
    assert e.optimizing_type == OptimizingType.MINOR
    assert e.convert_files == () and "seg" not in paths(e.rewrite_files)


def test_equality_deletes_count_toward_minor_and_pull_their_segments_in() -> None:
    files = [*fragments(10), data("seg", 900), data("clean", 900, seq=3)]
    e = evaluate_one(files, [eq("e1"), eq("e2")])
    assert e.optimizing_type == OptimizingType.MINOR
    assert "10 fragments + 2 eq-deletes >= 12" in e.reason
    # "clean" has a data sequence number above the deletes': they do not apply to it.
    assert paths(e.convert_files) == ["seg"]
    assert "seg" not in paths(e.rewrite_files) and "clean" not in paths(e.rewrite_files)
    assert paths(e.delete_files) == ["e1", "e2"]


def test_equality_delete_not_newer_than_the_data_does_not_apply() -> None:
    e = evaluate_one(fragments(10), [eq("e1", seq=1), eq("e2", seq=1)])
    assert e.delete_files == ()
    assert e.optimizing_type is None


def test_position_delete_applies_at_equal_sequence_number() -> None:
    e = evaluate_one([data("seg", 900, seq=2)], [pos("p1", seq=2), pos("p2", seq=2)])
    assert e.optimizing_type == OptimizingType.MINOR


def test_global_equality_deletes_apply_to_every_partition() -> None:
    unpartitioned = PartitionKey(0, (), global_scope=True)
    p1, p2 = PartitionKey(1, ("a",)), PartitionKey(1, ("b",))
    files = [
        *fragments(11, partition=p1),
        *fragments(11, partition=p2),
        data("old", 900, partition=unpartitioned),
    ]
    evaluations = evaluate_all(files, [eq("global-eq", partition=unpartitioned)])
    assert [e.partition for e in evaluations] == [unpartitioned, p1, p2]
    assert all(paths(e.delete_files) == ["global-eq"] for e in evaluations)
    assert [e.optimizing_type for e in evaluations[1:]] == [OptimizingType.MINOR, OptimizingType.MINOR]


def test_partitioned_equality_delete_stays_in_its_partition() -> None:
    p1, p2 = PartitionKey(0, ("a",)), PartitionKey(0, ("b",))
    evaluations = evaluate_all(
        [*fragments(11, partition=p1), *fragments(11, partition=p2)], [eq("e", partition=p1)]
    )
    assert [e.optimizing_type for e in evaluations] == [OptimizingType.MINOR, None]


def test_major_by_undersized_segments_adding_up_to_target() -> None:
    e = evaluate_one([data("u1", 400), data("u2", 400), data("u3", 400), data("seg", 900)])
    assert e.optimizing_type == OptimizingType.MAJOR
    assert "3 undersized segments, 1200 B >= target 1000 B" in e.reason
    assert e.rewrite_files == () and paths(e.packed_files) == ["u1", "u2", "u3"]


def test_no_major_when_the_two_smallest_undersized_do_not_fit_one_target() -> None:
    assert evaluate_one([data("u1", 700), data("u2", 700)]).optimizing_type is None
    assert evaluate_one([data("u1", 500), data("u2", 500)]).optimizing_type == OptimizingType.MAJOR


def test_no_major_when_undersized_segments_stay_below_target() -> None:
    assert evaluate_one([data("u1", 400), data("u2", 500)]).optimizing_type is None


def test_major_by_duplicate_ratio() -> None:
    at_ratio = evaluate_one([data("seg", 900, records=100)], [pos("p", records=10)])
    assert at_ratio.optimizing_type is None
    over = evaluate_one([data("seg", 900, records=100)], [pos("p", records=11)])
    assert over.optimizing_type == OptimizingType.MAJOR
    assert "deleted records > 0.1 x records" in over.reason
    assert paths(over.rewrite_files) == ["seg"]


def test_duplicate_ratio_counts_position_deleted_rows_only() -> None:
    seg = [data("seg", 900, records=100)]
    assert evaluate_one(seg, [pos("p", records=11)]).optimizing_type == OptimizingType.MAJOR
    # Large equality deletes are converted first (minor), not a reason to rewrite the segment.
    deletes = [pos("p", records=6), eq("e1", records=500), eq("e2", records=500)]
    assert evaluate_one(seg, deletes).optimizing_type is None  # two eq-deletes: below the count
    e = evaluate_one(seg, deletes, last_minor_s=None)
    assert e.optimizing_type == OptimizingType.MINOR
    assert paths(e.convert_files) == ["seg"] and e.rewrite_files == ()


def test_major_also_does_the_minor_work() -> None:
    files = [*fragments(12), data("u1", 400), data("dup", 900), data("clean", 900)]
    e = evaluate_one(files, [pos("p", records=50, ref="dup")])
    assert e.optimizing_type == OptimizingType.MAJOR
    assert sorted(paths(e.rewrite_files)) == sorted([f.path for f in fragments(12)] + ["dup"])
    assert paths(e.packed_files) == ["u1"]


def test_major_converts_the_segments_it_does_not_rewrite() -> None:
    files = [data("dup", 900), data("seg", 900)]
    deletes = [pos("p", records=50, ref="dup"), pos("p1", ref="seg"), pos("p2", ref="seg")]
    e = evaluate_one(files, deletes)
    assert e.optimizing_type == OptimizingType.MAJOR
    assert paths(e.rewrite_files) == ["dup"] and paths(e.convert_files) == ["seg"]


def test_full_only_when_interval_elapsed_and_something_to_gain() -> None:
    config = replace(CFG, full_trigger_interval_s=86400)
    files = [*fragments(2), data("seg", 900)]
    assert evaluate_one(files, config=config, last_full_s=NOW - 86400).optimizing_type is None
    due = evaluate_one(files, config=config, last_full_s=NOW - 86401)
    assert due.optimizing_type == OptimizingType.FULL
    assert due.reason == "full interval 86400s elapsed"
    assert len(due.rewrite_files) == 3
    never = evaluate_one(files, config=config, last_full_s=None)
    assert never.optimizing_type == OptimizingType.FULL


def test_full_with_nothing_to_gain_is_skipped() -> None:
    config = replace(CFG, full_trigger_interval_s=86400)
    e = evaluate_one([*fragments(1), data("seg", 900)], config=config, last_full_s=None)
    assert e.optimizing_type is None
    assert "nothing to gain" in e.reason


def test_full_gains_from_deletes_alone() -> None:
    config = replace(CFG, full_trigger_interval_s=86400)
    e = evaluate_one([data("seg", 900)], [pos("p")], config=config, last_full_s=None)
    assert e.optimizing_type == OptimizingType.FULL


def test_full_interval_off_unless_positive() -> None:
    config = replace(CFG, full_trigger_interval_s=0)
    assert evaluate_one(fragments(2), config=config, last_full_s=None).optimizing_type is None


def test_full_without_rewrite_all_files_keeps_clean_segments() -> None:
    config = replace(CFG, full_trigger_interval_s=86400, full_rewrite_all_files=False)
    files = [*fragments(1), data("u", 400), data("deleted", 900), data("clean", 900)]
    e = evaluate_one(files, [pos("p", ref="deleted")], config=config, last_full_s=None)
    assert e.optimizing_type == OptimizingType.FULL
    assert paths(e.rewrite_files) == ["0/1/frag-000", "deleted", "u"]


def test_full_wins_over_major_and_minor() -> None:
    config = replace(CFG, full_trigger_interval_s=86400)
    e = evaluate_one([*fragments(12), data("u1", 500), data("u2", 500)], config=config, last_full_s=None)
    assert e.optimizing_type == OptimizingType.FULL


def test_forced_types_ignore_triggers() -> None:
    files = [*fragments(2), data("u1", 400), data("seg", 900)]
    assert evaluate_one(files).optimizing_type is None
    minor = evaluate_one(files, forced=OptimizingType.MINOR)
    assert (minor.optimizing_type, minor.reason) == (OptimizingType.MINOR, "forced minor")
    assert len(minor.rewrite_files) == 2
    major = evaluate_one(files, forced=OptimizingType.MAJOR)
    assert major.optimizing_type == OptimizingType.MAJOR
    assert (len(major.rewrite_files), len(major.packed_files)) == (2, 1)
    full = evaluate_one(files, forced=OptimizingType.FULL)
    assert full.optimizing_type == OptimizingType.FULL
    assert len(full.rewrite_files) == 4


def test_forced_type_replaces_a_stronger_trigger() -> None:
    e = evaluate_one([data("u1", 500), data("u2", 500)], forced=OptimizingType.MINOR)
    assert e.optimizing_type is None
    assert e.reason == "forced minor, but nothing to gain"


def test_forced_with_nothing_to_gain_is_skipped() -> None:
    for forced in OptimizingType:
        e = evaluate_one([*fragments(1), data("seg", 900)], forced=forced)
        assert e.optimizing_type is None, forced
        assert not e.needs_optimizing


def test_single_fragment_with_deletes_is_worth_rewriting() -> None:
    e = evaluate_one(fragments(1), [pos("p")], forced=OptimizingType.MINOR)
    assert e.optimizing_type == OptimizingType.MINOR


def test_empty_table_and_table_with_only_delete_files() -> None:
    assert evaluate_all([]) == []
    assert evaluate_all([], [pos("p"), eq("e")]) == []


def test_partition_with_only_deletes_is_not_evaluated() -> None:
    other = PartitionKey(0, (2,))
    evaluations = evaluate_all(fragments(12), [pos("dangling", partition=other)])
    assert [e.partition for e in evaluations] == [P]


def test_unpartitioned_table() -> None:
    unpartitioned = PartitionKey(0, (), global_scope=True)
    e = evaluate_one(fragments(12, partition=unpartitioned))
    assert e.partition.describe() == "<unpartitioned>"
    assert e.optimizing_type == OptimizingType.MINOR


def test_spec_evolution_keeps_specs_apart() -> None:
    old, new = PartitionKey(0, (1,)), PartitionKey(1, (1,))
    files = [data("old-seg", 900, partition=old), data("new-seg", 900, partition=new)]
    evaluations = evaluate_all(files, [pos("p1", partition=new), pos("p2", partition=new)])
    assert [e.partition for e in evaluations] == [old, new]
    assert evaluations[0].delete_files == ()
    assert evaluations[0].optimizing_type is None
    assert evaluations[1].optimizing_type == OptimizingType.MINOR


def test_partitions_come_in_key_order_with_nulls_first() -> None:
    keys = [PartitionKey(1, (3,)), PartitionKey(0, (2,)), PartitionKey(1, (None,)), PartitionKey(1, (10,))]
    evaluations = evaluate_all([data(f"f{i}", 900, partition=k) for i, k in enumerate(keys)])
    assert [e.partition for e in evaluations] == [keys[1], keys[2], keys[0], keys[3]]


def test_float_partitions_are_told_apart_and_ordered_as_iceberg_java_does() -> None:
    # Distinct NaN objects, as each manifest entry decodes its own: one partition.
    nan_a, nan_b = PartitionKey(0, (float("nan"),)), PartitionKey(0, (float("-nan"),))
    zero, negative_zero = PartitionKey(0, (0.0,)), PartitionKey(0, (-0.0,))
    assert nan_a == nan_b and hash(nan_a) == hash(nan_b)
    assert zero != negative_zero and len({zero, negative_zero}) == 2
    keys = [nan_a, PartitionKey(0, (1.5,)), zero, PartitionKey(0, (float("-inf"),)), negative_zero]
    evaluations = evaluate_all([data(f"f{i}", 900, partition=k) for i, k in enumerate(keys)])
    # Double.compare's order: -inf, -0.0, 0.0, 1.5, NaN.
    assert [e.partition for e in evaluations] == [keys[3], negative_zero, zero, keys[1], nan_a]


def test_cost_follows_the_design_formula() -> None:
    files = [data("f1", 100), data("f2", 50), data("u1", 400), data("u2", 600)]
    deletes = [pos("p", records=30, ref="f1"), eq("e")]
    e = evaluate_one(files, deletes, forced=OptimizingType.MAJOR)
    # data bytes x 2 + pos-delete records / 10 + delete bytes + (4 data + 2 delete files) x 10
    assert e.cost == (100 + 50 + 400 + 600) * 2 + 30 / 10 + 20 + 6 * 10


def test_no_optimizing_has_zero_cost() -> None:
    assert evaluate_one(fragments(3)).cost == 0.0


def test_delete_index_finds_what_the_all_pairs_rule_finds() -> None:
    q, glob = PartitionKey(0, (2,)), PartitionKey(1, (), global_scope=True)
    data_files = [
        data(f"d-{key.spec_id}-{seq}-{n}", 100, seq=seq, partition=key)
        for key in (P, q, glob)
        for seq in (1, 2, 3)
        for n in range(2)
    ]
    deletes = [
        *(pos(f"pos-{seq}", seq=seq) for seq in (1, 2, 3, 2)),
        *(eq(f"eq-{seq}", seq=seq) for seq in (3, 1, 2)),
        pos("pos-q", seq=2, partition=q),
        eq("eq-q", seq=3, partition=q),
        eq("eq-global", seq=2, partition=glob),
        pos("pos-glob", seq=3, partition=glob),
        pos("ref-own", seq=2, ref="d-0-2-0"),
        pos("ref-old", seq=1, ref="d-0-2-1"),
        pos("ref-elsewhere", seq=3, partition=q, ref="d-0-1-0"),
        data("not-a-delete", 100, seq=9),
    ]
    index = DeleteIndex(deletes)
    for f in data_files:
        expected = [d for d in deletes if delete_applies_to(d, f)]
        assert sorted(d.path for d in index.deletes_for(f)) == sorted(d.path for d in expected), f.path
    for chosen in (data_files[:3], data_files[4:9], data_files[::5], data_files):
        union = {d.path: d for f in chosen for d in deletes if delete_applies_to(d, f)}
        assert index.deletes_for_all(chosen) == tuple(union[path] for path in sorted(union))
    assert index.deletes_for_all([]) == ()


def merged(path: str, ref: str, seq: int, records: int = 1) -> ContentFile:
    name = path + MERGED_POSITIONS_SUFFIX
    return ContentFile(name, FileKind.POSITION_DELETES, P, records, 10, seq, referenced_data_file=ref)


def test_deletes_merged_into_a_segments_position_file_do_not_count_again() -> None:
    # "q" (partition-wide) and "e" were merged into seg's file "m"; they stay for "other".
    files = [data("seg", 900), data("other", 900, seq=2)]
    deletes = [eq("e", seq=2), pos("q", seq=2, records=5), merged("m", "seg", seq=3, records=8)]
    e = evaluate_one(files, deletes, last_minor_s=None)
    assert e.convert_files == () and e.rewrite_files == ()
    # 8 position-deleted rows of 100, not 8 + 5: below the duplicate ratio.
    assert e.optimizing_type is None


def test_a_position_delete_newer_than_the_merged_file_is_merged_again() -> None:
    deletes = [pos("q", seq=2), merged("m", "seg", seq=3), pos("r", seq=4, ref="seg")]
    e = evaluate_one([data("seg", 900)], deletes)
    assert e.optimizing_type == OptimizingType.MINOR
    assert paths(e.convert_files) == ["seg"]
