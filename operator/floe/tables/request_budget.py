"""A request budget per catalog: how fast and how many at once floe calls someone else's catalog.

Every call floe makes to a catalog over HTTP (refreshes, planning loads, maintenance, commits)
takes a token from its catalog's bucket (``rate`` a second, at most ``burst`` saved up) and a
slot of its ``concurrency``. Callers wait in order of what they do: a commit before a planning
load before a maintenance job before a refresh. A refresh does not wait at all: a table that
finds no token now stays due and is refreshed at a later round, so a slow catalog delays checks
and never commits. A 429 or 503 answer pauses the whole catalog for its ``Retry-After`` (or, with
none, a backoff that doubles from 1 s up to a minute, reset by the next answer that is neither)
and halves the rate the budget lets through (at most once a second, down to a 64th of the
setting), which then grows back by a 120th of the setting each second: a catalog that throttles
below its budget is asked about as fast as it answers, not paused over and over (at 5 requests a
second against a budget of 20, one 429 every 15 s or so instead of a few a second), as a careful
client of someone else's production catalog does.

Settings are the catalog's own properties (`budget_settings`), so they go with the catalog
wherever it is named: ``floe.requests-per-second`` and ``floe.max-concurrent-requests``.
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from typing import ParamSpec, TypeVar

RATE_PROPERTY = "floe.requests-per-second"
CONCURRENCY_PROPERTY = "floe.max-concurrent-requests"
DEFAULT_RATE = 20.0
"""Requests a second to one catalog: 10,000 idle tables checked every 10 minutes ask about 17."""
DEFAULT_CONCURRENCY = 4
PRESSURE_WINDOW_S = 60.0
"""A refresh held back within this long says the budget holds the catalog's tables back now."""
FIRST_BACKOFF_S, MAX_BACKOFF_S = 1.0, 60.0
"""A throttled catalog without Retry-After is left alone this long, doubling each time, up to the max."""
SLOWEST_SHARE = 1 / 64
"""The lowest rate 429s bring the budget to, as a share of its setting."""
RECOVERY_PER_S = 1 / 120
"""How much of its setting the lowered rate gains back each second."""


P = ParamSpec("P")
T = TypeVar("T")


class Priority(IntEnum):
    """What a call is for; the lower first."""

    COMMIT = 0
    PLAN = 1
    MAINTENANCE = 2
    REFRESH = 3


_PRIORITY: contextvars.ContextVar[Priority] = contextvars.ContextVar(
    "floe_catalog_priority", default=Priority.PLAN
)


@contextmanager
def calls_for(priority: Priority) -> Iterator[None]:
    """Make the catalog calls of this thread (or task) inside the block count as `priority`."""
    token = _PRIORITY.set(priority)
    try:
        yield
    finally:
        _PRIORITY.reset(token)


def within_priority(priority: Priority, work: Callable[P, T]) -> Callable[P, T]:
    """`work`, its catalog calls counted as `priority` (for a thread pool's task)."""

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        with calls_for(priority):
            return work(*args, **kwargs)

    return run


def current_priority() -> Priority:
    """The priority the calls made here count as (`calls_for`; planning by default)."""
    return _PRIORITY.get()


class BudgetExhausted(RuntimeError):
    """A refresh found no token: the table stays due, the catalog is not asked now."""


@dataclass(frozen=True)
class BudgetSettings:
    """A catalog's request rate (a second) and how many requests may be in flight at once."""

    rate: float = DEFAULT_RATE
    concurrency: int = DEFAULT_CONCURRENCY

    @property
    def burst(self) -> float:
        """Tokens saved up at most: a second's worth, at least one."""
        return max(1.0, self.rate)


def budget_settings(properties: Mapping[str, str]) -> BudgetSettings:
    """The budget a catalog's properties set; raises ValueError naming a property that is not a
    positive number."""
    values: dict[str, float] = {}
    for key, default in ((RATE_PROPERTY, DEFAULT_RATE), (CONCURRENCY_PROPERTY, DEFAULT_CONCURRENCY)):
        raw = properties.get(key)
        try:
            value = float(raw) if raw is not None else float(default)
        except ValueError:
            value = -1.0
        whole = key == CONCURRENCY_PROPERTY
        if not value > 0 or (whole and value != int(value)):
            kind = "integer" if whole else "number"
            raise ValueError(f"catalog property {key} must be a positive {kind}, not {raw!r}")
        values[key] = value
    return BudgetSettings(values[RATE_PROPERTY], int(values[CONCURRENCY_PROPERTY]))


@dataclass(frozen=True)
class BudgetStats:
    """What a catalog's budget did so far, and holds now."""

    requests: int
    throttled: int
    """429 and 503 answers."""
    refreshes_held_back: int
    """Refreshes that found no token and stayed due."""
    waiting: int
    in_flight: int
    paused_for_s: float
    """How long the catalog is still left alone after a 429 or 503 (0: not paused)."""
    held_back_ago_s: float | None = None
    """How long ago a refresh was last held back; None: never."""
    rate: float = DEFAULT_RATE
    """The requests a second the catalog's setting allows."""
    rate_now: float = DEFAULT_RATE
    """The requests a second let through now: the setting, or less after 429s."""

    def pressure(self) -> str | None:
        """In words, how the budget holds calls back now (paused, slowed after 429s, or refreshes
        held back within `PRESSURE_WINDOW_S`); None when it does not."""
        parts = []
        if self.paused_for_s > 0:
            parts.append(
                f"paused for {self.paused_for_s:.0f}s more after {self.throttled} 429/503 answers in all"
            )
        if self.rate_now < self.rate:
            slowed = f"{self.rate_now:.3g} of {self.rate:g}"
            parts.append(f"slowed to {slowed} requests a second after 429/503 answers")
        if self.held_back_ago_s is not None and self.held_back_ago_s < PRESSURE_WINDOW_S:
            parts.append(
                f"{self.refreshes_held_back} table refreshes held back so far, "
                f"the last {self.held_back_ago_s:.0f}s ago"
            )
        return "; ".join(parts) or None

    def plus(self, other: BudgetStats) -> BudgetStats:
        """Two budgets' figures together (two catalogs of one name)."""
        return BudgetStats(
            self.requests + other.requests,
            self.throttled + other.throttled,
            self.refreshes_held_back + other.refreshes_held_back,
            self.waiting + other.waiting,
            self.in_flight + other.in_flight,
            max(self.paused_for_s, other.paused_for_s),
            min((a for a in (self.held_back_ago_s, other.held_back_ago_s) if a is not None), default=None),
            self.rate + other.rate,
            self.rate_now + other.rate_now,
        )


class RequestBudget:
    """One catalog's token bucket, concurrency and pause; thread-safe. `clock` is monotonic seconds."""

    def __init__(self, settings: BudgetSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._tokens = settings.burst
        self._filled_at = clock()
        self._rate = settings.rate
        """The rate let through now: the setting, lowered after 429s and growing back."""
        self._rate_at = self._filled_at
        self._slowed_at = -math.inf
        self._paused_until = 0.0
        self._backoff_s = 0.0
        self._in_flight = 0
        self._waiting: dict[Priority, int] = {p: 0 for p in Priority}
        self._changed = threading.Condition()
        self._requests = self._throttled = self._held_back = 0
        self._held_back_at: float | None = None

    def wait_s(self, priority: Priority) -> float:
        """How long a call of `priority` must wait before it may go (0: now), taking its token and
        slot when it may: `acquire`'s rule without the waiting."""
        with self._changed:
            return self._try_take(priority)

    def acquire(self, priority: Priority | None = None, timeout_s: float = 300.0) -> None:
        """Wait for a token and a slot (a refresh never waits: `BudgetExhausted`); pair with
        `release`. Raises TimeoutError after `timeout_s`."""
        priority = current_priority() if priority is None else priority
        deadline = self._clock() + timeout_s
        with self._changed:
            wait = self._try_take(priority)
            if wait == 0.0:
                return
            if priority == Priority.REFRESH:
                self.held_back()  # the condition's lock is reentrant
                raise BudgetExhausted("the catalog's request budget is spent for now")
            self._waiting[priority] += 1
            try:
                while wait > 0.0:
                    left = deadline - self._clock()
                    if left <= 0:
                        raise TimeoutError(f"no request budget for {timeout_s:g}s")
                    self._changed.wait(min(wait, left))
                    wait = self._try_take(priority)
            finally:
                self._waiting[priority] -= 1
                self._changed.notify_all()

    def release(self) -> None:
        """A call acquired ended."""
        with self._changed:
            self._in_flight -= 1
            self._changed.notify_all()

    def held_back(self) -> None:
        """A refresh gave up its call (no token, or the catalog answered 429 or 503): count it."""
        with self._changed:
            self._held_back += 1
            self._held_back_at = self._clock()

    def answered(self, status: int, retry_after_s: float | None) -> float:
        """The catalog answered `status`: a 429 or 503 pauses every call for `retry_after_s` (or
        the doubling backoff); returns the pause (0 for other answers, which end the backoff)."""
        with self._changed:
            if status not in (429, 503):
                self._backoff_s = 0.0
                return 0.0
            self._throttled += 1
            now = self._clock()
            if now - self._slowed_at >= 1.0:  # the answers to one burst of calls slow it once
                self._rate = max(self.settings.rate * SLOWEST_SHARE, self._current_rate(now) / 2)
                self._slowed_at = now
            self._backoff_s = min(MAX_BACKOFF_S, self._backoff_s * 2 if self._backoff_s else FIRST_BACKOFF_S)
            pause = retry_after_s if retry_after_s is not None else self._backoff_s
            self._paused_until = max(self._paused_until, now + pause)
            self._changed.notify_all()
            return pause

    def stats(self) -> BudgetStats:
        """The counts so far and what is held now."""
        with self._changed:
            return BudgetStats(
                requests=self._requests,
                throttled=self._throttled,
                refreshes_held_back=self._held_back,
                waiting=sum(self._waiting.values()),
                in_flight=self._in_flight,
                paused_for_s=max(0.0, self._paused_until - self._clock()),
                held_back_ago_s=None if self._held_back_at is None else self._clock() - self._held_back_at,
                rate=self.settings.rate,
                rate_now=self._current_rate(self._clock()),
            )

    def _current_rate(self, now: float) -> float:
        """The rate let through at `now`: the lowered one grown back since it was last looked at."""
        if self._rate < self.settings.rate:
            grown = (now - self._rate_at) * self.settings.rate * RECOVERY_PER_S
            self._rate = min(self.settings.rate, self._rate + max(0.0, grown))
        self._rate_at = now
        return self._rate

    def _try_take(self, priority: Priority) -> float:
        now = self._clock()
        rate = self._current_rate(now)
        self._tokens = min(max(1.0, rate), self._tokens + (now - self._filled_at) * rate)
        self._filled_at = now
        if now < self._paused_until:
            return self._paused_until - now
        # A call waits while one before it in priority waits.
        ahead = sum(n for p, n in self._waiting.items() if p < priority)
        if ahead:
            return 1.0 / rate
        if self._in_flight >= self.settings.concurrency:
            return 1.0 / rate  # woken earlier by `release`
        if self._tokens < 1.0:
            return (1.0 - self._tokens) / rate
        self._tokens -= 1.0
        self._in_flight += 1
        self._requests += 1
        return 0.0
