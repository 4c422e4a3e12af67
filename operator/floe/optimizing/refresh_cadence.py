"""How often each table's catalog is asked whether the table changed: adaptive refresh.

Each table's checks follow how often it changes:

- a table with work queued is checked every ``refresh.minInterval``;
- a table seen for the first time (or asked about again after its settings changed) is checked
  again after as long as it has gone unchanged, within the minimum and maximum: the backing off
  below reaches the same interval after the same time, so a table nobody wrote to for days is
  checked at the maximum from the start, not after a climb of seven checks;
- a table that changes now and then (a writer's commits) is checked again about when its next
  change is due: one typical gap between its changes after the last, less half a minimum interval
  (a check saw the last change up to a minimum interval late, half of one on average); then every
  sixteenth of a gap (at least the minimum interval) until the change comes, for up to two gaps.
  Less a whole minimum interval, a writer committing every minute took two checks a commit; less
  half, about one and a half, each commit still seen within 10 s at the 95th percentile. A
  sixteenth of a gap, not the minimum: a table written once a day would otherwise be checked
  every 10 s for two days after each commit;
- a table that does not change is checked half as often at each check (twice the interval), up
  to ``refresh.maxInterval``.

A check is never later than the moment the table's evaluation changes with time alone (an
interval trigger firing). A change notice (`floe.service.change_notices`) has the table checked
at the next round, and does not shorten its polling: the change the notice announced counts as
no change for the cadence, and a table whose changes come with notices is not looked for when its
next change is due (the next notice says so), so its polling backs off as an idle table's does
and only stands in for a notice that never came. Each next check is moved by up to ±10 % of its
interval, by a hash of the table and the check's number, so tables applied together drift apart
instead of being checked in bursts; the same table and check always get the same spread, so the
rules can be tested with a clock.

Tables of a catalog that tells every table's metadata file in one call (SQL) are not backed off:
one call per round answers for all of them, and a table's change is seen at the next round.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

from floe.api.table import RefreshSpec

BACKOFF = 2.0
"""An unchanged table's next interval against its last one."""
JITTER = 0.1
"""How far a check moves from its interval, as a share of it, either way."""
DUE_SHARE = 1 / 16
"""A table whose next change is due is looked for at this share of its typical gap between changes."""


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

    def within(self, interval_s: float) -> float:
        """`interval_s`, raised to the minimum or lowered to the maximum."""
        return min(self.max_interval_s, max(self.min_interval_s, interval_s))

    def backed_off(self, last_s: float) -> float:
        """The interval after an unchanged check: twice `last_s`, within the minimum and maximum."""
        return self.within(last_s * BACKOFF)

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
    noticed: bool = False
    """A change notice asked for the next check."""
    follows_notices: bool = False
    """The last change the checks found came with a notice: the next is awaited from one too."""
    written_s: float | None = None
    """When the table's metadata file the last full load found was written (its last-updated
    time): how long the table has gone unchanged, which a first check's interval follows."""

    def due(self, now_s: float) -> bool:
        """Whether the catalog is to be asked about the table now."""
        return self.next_s is None or now_s >= self.next_s

    def recheck_now(self) -> None:
        """Check at the next round, then as the first check: what the table was evaluated with
        changed (its settings, or a maintenance job's commit)."""
        self.next_s = self.interval_s = None

    def notice(self) -> None:
        """A change notice: check at the next round, the polling cadence kept."""
        self.next_s = None
        self.noticed = True

    def time_trigger_due(self, now_s: float) -> bool:
        """Whether the last evaluation's decision may have changed with time alone."""
        return self.time_trigger_s is not None and now_s >= self.time_trigger_s

    def on_checked(
        self,
        now_s: float,
        cadence: RefreshCadence,
        table_id: str,
        changed: bool,
        busy: bool = False,
    ) -> None:
        """A check ended; `changed`: it found a new metadata file; `busy`: the table has work
        queued (or must not back off). Sets the next check by the rules of the module."""
        first, noticed = self.checks == 0, self.noticed
        self.checks += 1
        self.noticed = False
        changed = changed and not first  # a first check finds the table as it is: no change
        if changed:
            if self.last_change_s is not None:
                self.period_s = _typical_gap(self.period_s, now_s - self.last_change_s)
            self.last_change_s = now_s
            self.follows_notices = noticed
        self.interval_s = self._interval(now_s, cadence, changed and not noticed, busy)
        self.next_s = cadence.next_check_s(now_s, self.interval_s, table_id, self.checks, self.time_trigger_s)

    def _interval(self, now_s: float, cadence: RefreshCadence, changed: bool, busy: bool) -> float:
        low = cadence.min_interval_s
        if busy:
            return low
        period, last = self.period_s, self.last_change_s
        if changed:
            return low if period is None else cadence.within(period - low / 2)
        if self.interval_s is None:
            # As the backing off would find it by now, unchanged since it was written (a cadence
            # whose minimum is 0 never backs off).
            written = self.written_s
            return low if written is None or low <= 0 else cadence.within(now_s - written)
        if period is not None and last is not None and now_s - last < 2 * period and not self.follows_notices:
            return cadence.within(period * DUE_SHARE)  # its next change is due: looked for
        return cadence.backed_off(self.interval_s)

    def urgency(self, now_s: float) -> float:
        """How much a due check is worth ahead of others when not all can be made: one never made
        or asked for (a notice, a first check) first, then the later against its interval the more
        (a writer's table late by one of its short intervals before an idle one late by as long)."""
        if self.next_s is None or not self.interval_s:  # not checked yet, or every round
            return math.inf
        return (now_s - self.next_s) / self.interval_s


def _typical_gap(known_s: float | None, gap_s: float) -> float:
    """The typical time between a table's changes after one more `gap_s`: a shorter gap at once
    (a writer that speeds up is followed), a longer one halfway (one late commit is no new pace)."""
    if known_s is None or gap_s < known_s:
        return gap_s
    return (known_s + gap_s) / 2


def spread(table_id: str, check: int) -> float:
    """A number in [0, 1) from the table and the check's number, the same every time."""
    return zlib.crc32(f"{table_id}#{check}".encode()) / 2**32
