"""The optimizer process's main loop (`floe_optimizer.lifecycle.serve_until_signalled`): it ticks
at once when woken, and returns the signal that stopped it."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import floe_optimizer.lifecycle as lifecycle


def test_a_wake_runs_the_tick_at_once_and_a_signal_ends_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ticks a minute apart: only the wake can bring the second tick within the test's wait.
    monkeypatch.setattr(lifecycle, "CHECK_S", 60.0)
    wake = threading.Event()
    ticks: list[int] = []
    ticked = threading.Condition()
    outcome: dict[str, bool] = {}

    def tick() -> None:
        wake.clear()
        with ticked:
            ticks.append(len(ticks))
            ticked.notify_all()

    def drive() -> None:
        with ticked:
            ticked.wait_for(lambda: len(ticks) >= 1, timeout=10)
            wake.set()
            outcome["woken"] = ticked.wait_for(lambda: len(ticks) >= 2, timeout=10)
        os.kill(os.getpid(), signal.SIGTERM)
        wake.set()  # the loop notices the signal on its next wake-up

    driver = threading.Thread(target=drive)
    driver.start()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signum = lifecycle.serve_until_signalled(tick, wake=wake)
    finally:
        signal.signal(signal.SIGTERM, previous)
        driver.join()
    assert outcome["woken"], "the wake did not run the tick before the next period"
    assert signum == signal.SIGTERM
