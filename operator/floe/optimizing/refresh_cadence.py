"""How often each table's catalog is asked whether the table changed: adaptive refresh.

Each table's checks follow how often it changes:

- a table with work queued, or that just appeared, is checked every ``refresh.minInterval``;
- a table that changes now and then (a writer's commits) is checked again about when its next
  change is due: one typical gap between its changes after the last, less half a minimum interval
  (a check saw the last change up to a minimum interval late, half of one on average); then every
  minimum interval until the change comes, for up to two gaps. Less a whole minimum interval, a
  writer committing every minute took two checks a commit; less half, about one and a half, each
  commit still seen within 10 s at the 95th percentile;
- a table that does not change is checked half as often at each check (twice the interval), up
  to ``refresh.maxInterval``.

A check is never later than the moment the table's evaluation changes with time alone (an
interval trigger firing), and a change notice (`floe.service.change_notices`) has the table
checked at the next round. Each next check is moved by up to ±10 % of its interval, by a hash of
the table and the check's number, so tables applied together drift apart instead of being checked
in bursts; the same table and check always get the same spread, so the rules can be tested with
a clock.

Tables of a catalog that tells every table's metadata file in one call (SQL) are not backed off:
one call per round answers for all of them, and a table's change is seen at the next round.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from floe.api.table import RefreshSpec

BACKOFF = 2.0
"""An unchanged table's next interval against its last one."""
JITTER = 0.1
"""How far a check moves from its interval, as a share of it, either way."""


@dataclass(frozen=True)
class RefreshCadence:
    """The intervals one table is checked at (seconds)."""

    min_interval_s: float
    max_interval_s: float

    @classmethod
    def of(cls, spec: RefreshSpec, default_min_s: float) -> RefreshCadence:
        """The cadence `spec` sets, its minimum `default_min_s` (the operator's refresh
        interval) where it sets none; a maximum below the minimum means a fixed interval."""
        low = spec.min_interval if spec.min_interval is not None else default_min_s
        return cls(low, max(low, spec.max_interval))

    def backed_off(self, last_s: float) -> float:
        """The interval after an unchanged check: twice `last_s`, within the minimum and maximum."""
        return min(self.max_interval_s, max(self.min_interval_s, last_s * BACKOFF))

    def next_check_s(
        self, now_s: float, interval_s: float, table_id: str, check: int, deadline_s: float | None = None
    ) -> float:
        """When to check the table next: `interval_s` from `now_s`, spread by the table and the
        number of the `check`, and no later than `deadline_s` (when its evaluation changes with
        time alone) where that is still ahead."""
        at = now_s + interval_s * (1.0 + JITTER * (2.0 * spread(table_id, check) - 1.0))
        if deadline_s is not None and now_s < deadline_s < at:
            return deadline_s
        return at


@dataclass
class RefreshState:
    """One table's checks: when the next is due and at what interval the last left it."""

    next_s: float | None = None
    """When the catalog is asked next; None: at the next round."""
    interval_s: float | None = None
    """The interval the last check set; None before the first, or after `recheck_now`."""
    time_trigger_s: float | None = None
    """When the last evaluation's decision changes with time alone (an interval trigger fires):
    the table is checked then, and evaluated again even if unchanged."""
    checks: int = field(default=0, repr=False)
    last_change_s: float | None = None
    """When a check last found the table changed (the table's first check is no change)."""
    period_s: float | None = None
    """The table's typical time between changes, as its checks saw them; None before two changes."""

    def due(self, now_s: float) -> bool:
        """Whether the catalog is to be asked about the table now."""
        return self.next_s is None or now_s >= self.next_s

    def recheck_now(self) -> None:
        """Check at the next round, then at the shortest interval: the table changed, or what
        it was evaluated with did."""
        self.next_s = self.interval_s = None

    def time_trigger_due(self, now_s: float) -> bool:
        """Whether the last evaluation's decision may have changed with time alone."""
        return self.time_trigger_s is not None and now_s >= self.time_trigger_s

    def on_checked(
        self, now_s: float, cadence: RefreshCadence, table_id: str, changed: bool, busy: bool = False
    ) -> None:
        """A check ended; `changed`: it found a new metadata file; `busy`: the table has work
        queued (or must not back off). Sets the next check by the rules of the module."""
        first = self.checks == 0
        self.checks += 1
        if changed and not first:
            if self.last_change_s is not None:
                self.period_s = _typical_gap(self.period_s, now_s - self.last_change_s)
            self.last_change_s = now_s
        self.interval_s = self._interval(now_s, cadence, changed or first, busy)
        self.next_s = cadence.next_check_s(now_s, self.interval_s, table_id, self.checks, self.time_trigger_s)

    def _interval(self, now_s: float, cadence: RefreshCadence, changed: bool, busy: bool) -> float:
        low = cadence.min_interval_s
        if busy or self.interval_s is None:
            return low
        period, last = self.period_s, self.last_change_s
        if changed:
            if period is None:
                return low
            return min(cadence.max_interval_s, max(low, period - low / 2))
        if period is not None and last is not None and now_s - last < 2 * period:
            return low  # its next change is due: looked for at every minimum interval
        return cadence.backed_off(self.interval_s)


def _typical_gap(known_s: float | None, gap_s: float) -> float:
    """The typical time between a table's changes after one more `gap_s`: a shorter gap at once
    (a writer that speeds up is followed), a longer one halfway (one late commit is no new pace)."""
    if known_s is None or gap_s < known_s:
        return gap_s
    return (known_s + gap_s) / 2


def spread(table_id: str, check: int) -> float:
    """A number in [0, 1) from the table and the check's number, the same every time."""
    return zlib.crc32(f"{table_id}#{check}".encode()) / 2**32
