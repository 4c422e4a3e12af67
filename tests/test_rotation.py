"""The backstops' rotation: every item once a period, a share at each round, never all at once."""

from __future__ import annotations

from floe.kit.rotation import Rotation


def test_each_item_once_a_period_in_shares_that_follow_the_time() -> None:
    items = [f"t{index}" for index in range(600)]
    rotation = Rotation(60.0)
    assert rotation.take(0.0, lambda: items) == []  # the first pass is empty: all were just seen
    assert rotation.take(59.0, lambda: items) == []
    seen: list[str] = []
    shares = []
    for second in range(60, 180):
        share = rotation.take(float(second), lambda: items)
        shares.append(len(share))
        seen += share
    # From the second period on, every item once a period: 10 a second, never more than 10 at once.
    assert seen[:600] == items and seen[600:] == items[: len(seen) - 600]
    assert max(shares) <= 10 and len(seen) == 1190


def test_sparse_calls_hand_out_what_a_pass_left_and_new_items_wait_for_the_next_pass() -> None:
    items = ["a", "b", "c", "d"]
    rotation = Rotation(10.0)
    rotation.take(0.0, lambda: items)
    assert rotation.take(10.0, lambda: items) == []  # the pass of a, b, c, d starts
    items.append("e")
    assert rotation.take(15.0, lambda: items) == ["a", "b"]
    assert rotation.take(15.0, lambda: items) == []  # a share is handed out once
    assert rotation.take(31.0, lambda: items) == ["c", "d"]  # its period ended: the rest, at once
    assert rotation.take(33.0, lambda: items) == ["a"]  # the next pass, e in it
    assert rotation.take(20.0, lambda: items) == []  # a clock that went back hands out nothing
    assert rotation.take(40.9, lambda: items) == ["b", "c", "d"]
    assert rotation.take(41.0, lambda: items) == ["e"]
