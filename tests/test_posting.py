"""The EventPoster: items posted in order from its own thread, a full queue dropping, drain and stop."""

from __future__ import annotations

import logging
import threading

import pytest

from floe.kit.posting import WARN_EVERY_S, EventPoster


def test_order_is_kept_and_posting_is_on_the_posters_thread() -> None:
    posted: list[tuple[int, str]] = []
    poster: EventPoster[int] = EventPoster(
        lambda item: posted.append((item, threading.current_thread().name)), name="posting-test"
    )
    for item in range(50):
        assert poster.submit(item)  # queued before the start: posted once it starts
    poster.start()
    for item in range(50, 100):
        assert poster.submit(item)
    assert poster.drain(5.0)
    assert [item for item, _ in posted] == list(range(100))
    assert {thread for _, thread in posted} == {"posting-test"}
    poster.stop()


def test_a_full_queue_drops_counts_and_warns_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    posted: list[int] = []
    poster = EventPoster(posted.append, maxsize=2, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="floe.kit.posting"):
        assert poster.submit(1) and poster.submit(2)
        assert not poster.submit(3)
        now[0] = WARN_EVERY_S - 1
        assert not poster.submit(4)
        assert len(caplog.records) == 1
        now[0] = WARN_EVERY_S
        assert not poster.submit(5)
    assert poster.dropped == 3
    assert len(caplog.records) == 2 and "3 items dropped" in caplog.records[-1].getMessage()
    poster.start()
    assert poster.drain(5.0)
    assert posted == [1, 2]  # what was queued is posted; the dropped are gone
    poster.stop()


def test_drain_waits_for_what_is_queued() -> None:
    gate = threading.Event()
    posted: list[int] = []

    def slow_post(item: int) -> None:
        gate.wait(10)
        posted.append(item)

    poster = EventPoster(slow_post)
    assert poster.drain(0.01)  # nothing queued: nothing to wait for
    poster.start()
    poster.submit(1)
    poster.submit(2)
    assert not poster.drain(0.05)  # the post hangs: drain gives up after its timeout
    assert posted == []
    gate.set()
    assert poster.drain(5.0)
    assert posted == [1, 2]
    poster.stop()


def test_drain_of_a_poster_not_running_returns_at_once() -> None:
    poster: EventPoster[int] = EventPoster(lambda item: None)
    assert poster.drain(0.0)  # nothing queued
    poster.submit(1)
    assert not poster.drain(30.0)  # returns at once: no thread would post it


def test_stop_posts_what_is_queued_then_drops() -> None:
    posted: list[int] = []
    started = threading.Event()
    gate = threading.Event()

    def post(item: int) -> None:
        started.set()
        gate.wait(10)
        posted.append(item)

    poster = EventPoster(post)
    poster.start()
    for item in range(5):
        poster.submit(item)
    assert started.wait(5)
    stopping = threading.Thread(target=poster.stop)
    stopping.start()
    gate.set()
    stopping.join(10)
    assert posted == list(range(5))
    assert not poster.submit(5)
    assert poster.dropped == 1 and posted == list(range(5))


def test_a_failing_post_is_logged_and_passed_over(caplog: pytest.LogCaptureFixture) -> None:
    posted: list[int] = []

    def post(item: int) -> None:
        if item == 1:
            raise RuntimeError("the API server is away")
        posted.append(item)

    poster = EventPoster(post, name="failing")
    poster.start()
    with caplog.at_level(logging.ERROR, logger="floe.kit.posting"):
        for item in range(3):
            poster.submit(item)
        assert poster.drain(5.0)
    assert posted == [0, 2]
    assert "failing: posting failed" in caplog.text
    poster.stop()
