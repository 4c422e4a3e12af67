"""How often each table's catalog is asked whether the table changed: adaptive refresh.

Each table's checks follow how often it changes:

- a table with work queued is checked every ``refresh.minInterval``;
- a table seen for the first time (or asked about again after its settings changed) is checked
  again after as long as it has gone unchanged, within the minimum and maximum: the backing off
  below reaches the same interval after the same time, so a table nobody wrote to for days is
  checked at the maximum from the start, not after a climb of seven checks;
- a table that changes now and then (a writer's commits) is checked again when its next commit is
  due, half a minimum interval after: its last commit (the latest of its snapshot log, as the last
  load read it) plus the shortest of the last three gaps between its commits (a writer whose pace
  varies is looked for at the soonest it commits). Its log tells a writer's pace and phase from
  the table's first check on; the times its checks found changes at tell them only after several
  changes, and late (each change is found up to an interval after it was made): in a simulation of
  a writer committing every minute from the first check of a table written 3 minutes before, 95 %
  of the commits were seen within 29 s by those times, within 5 s by the log (19 s when each gap
  varies by up to 20 %). A commit's logged time is the writer's clock, so it is taken no earlier
  than the check before the one that found it, and no later than that check; a change that adds no
  commit of data to the log (a rewrite, a maintenance job's commit) leaves it. Such a check is not
  spread: the writers' own times spread them. Until the commit comes the table is looked for every
  sixteenth of its typical gap (the lower median of the three; at least the minimum interval), for
  up to two typical gaps after the last commit: a sixteenth, not the minimum, since a table
  written once a day would otherwise be checked every 10 s for two days after each commit;
- a table that changed and whose pace is not known (fewer than two commits of data in its log)
  is checked again at the minimum interval, and backs off from there;
- a table that does not change is checked half as often at each check (twice the interval), up
  to ``refresh.maxInterval``.

A check is never later than the moment the table's evaluation changes with time alone (an
interval trigger firing). A change notice (`floe.service.change_notices`) has the table checked
at the next round, and does not shorten its polling: the change the notice announced counts as
no change for the cadence, and a table whose changes come with notices is not looked for when its
next change is due (the next notice says so), so its polling backs off as an idle table's does
and only stands in for a notice that never came. Each other next check is moved by up to ±10 % of
its interval, by a hash of the table and the check's number, so tables applied together drift apart
instead of being checked in bursts; the same table and check always get the same spread, so the
rules can be tested with a clock. The check that follows a table's first one, and its first check
at the maximum interval, fall anywhere within the interval instead (no sooner than the minimum):
tables applied together are of an age, so the interval taken from their age brought them back
together, and ±10 % drifts tables that reach the maximum together apart only slowly. In a
simulation of 9,900 idle tables made over 9 minutes, first checked in that order over 4 minutes
and backed off to the 10-minute maximum, their checks came back in minutes of up to 116 a second
against 16.5 on average; spread this way, at most 23. The hash is a BLAKE2 digest: a CRC of the
name spread tables named in sequence unevenly (up to 35 a second over a minute, an hour on).

Tables of a catalog that tells every table's metadata file in one call (SQL) are not checked one
by one: the catalog is swept (`floe.optimizing.catalog_sweeps`), every minimum interval, and a
table's change is seen at the next sweep. Such a table is checked on its own only when its
interval trigger fires, a notice comes or its evaluation was dropped.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from floe.api.table import RefreshSpec
from floe.optimizing.catalog_sweeps import CatalogSweep

Spread = Literal["around", "within", "none"]
"""How a next check is moved off its interval (`RefreshCadence.next_check_s`)."""
BACKOFF = 2.0
"""An unchanged table's next interval against its last one."""
JITTER = 0.1
"""How far a check moves from its interval, as a share of it, either way."""
DUE_SHARE = 1 / 16
"""A table whose next change is due is looked for at this share of its typical gap between changes."""
PACE_GAPS = 3
"""How many of the latest gaps between a table's commits its pace is taken from."""


@dataclass(frozen=True)
class CommitPace:
    """What a table's snapshot log tells of its writers (seconds, the writers' clock)."""

    last_s: float | None = None
    """When its latest commit of data was made; None: it has none."""
    gap_s: float | None = None
    """The typical time between its commits; None: fewer than two commits, or none apart."""
    shortest_gap_s: float | None = None
    """The shortest of the latest gaps: the soonest the next commit is expected."""

    @classmethod
    def of(cls, commit_times_s: Sequence[float]) -> CommitPace:
        """The pace of commits made at `commit_times_s`, oldest first: the lower median of the
        last `PACE_GAPS` gaps between them (commits of one instant, or out of order across
        writers' clocks, make no gap)."""
        times = list(commit_times_s)
        gaps = [later - earlier for earlier, later in itertools.pairwise(times) if later > earlier]
        latest = gaps[-PACE_GAPS:]
        if not latest:
            return cls(times[-1] if times else None)
        return cls(times[-1], statistics.median_low(latest), min(latest))


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
        self,
        now_s: float,
        interval_s: float,
        table_id: str,
        check: int,
        deadline_s: float | None = None,
        spread_by: Spread = "around",
    ) -> float:
        """When to check the table next: `interval_s` from `now_s`, spread by the table and the
        number of the `check` (``around`` the interval, anywhere ``within`` it but not sooner than
        the minimum, or ``none``), and no later than `deadline_s` (when its evaluation changes with
        time alone) where that is still ahead."""
        low = self.min_interval_s
        if spread_by == "none":
            at = now_s + interval_s
        elif spread_by == "within" and interval_s > low:
            at = now_s + low + (interval_s - low) * spread(table_id, check)
        else:  # around, or within an interval with no room below it
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
    checked_s: float | None = None
    """When the last check was made."""
    logged_s: float | None = None
    """The time of the latest commit of data the last check's snapshot log showed."""
    last_change_s: float | None = None
    """When the table's last commit was made, in this clock: its log's time, within the checks
    that found it."""
    pace: CommitPace = field(default_factory=CommitPace)
    """The commits the last full load's snapshot log showed."""
    noticed: bool = False
    """A change notice asked for the next check."""
    follows_notices: bool = False
    """The last change the checks found came with a notice: the next is awaited from one too."""
    written_s: float | None = None
    """When the table's metadata file the last full load found was written (its last-updated
    time): how long the table has gone unchanged, which a first check's interval follows."""
    sweep: CatalogSweep | None = None
    """The sweep of its catalog that checks the table, when one does: it has no checks of its own
    then, but those its interval trigger, a notice or a new spec ask for."""

    def due(self, now_s: float) -> bool:
        """Whether the catalog is to be asked about the table now (its sweep's aside)."""
        if self.next_s is None:
            return True
        return self.time_trigger_due(now_s) if self.sweep is not None else now_s >= self.next_s

    def own_check_s(self) -> float:
        """When the table is to be checked on its own: its next check, or with a sweep, when its
        interval trigger fires (inf: never by itself); -inf: at the next round."""
        if self.next_s is None:
            return -math.inf
        if self.sweep is not None:
            return math.inf if self.time_trigger_s is None else self.time_trigger_s
        return self.next_s

    def next_check_at(self) -> float | None:
        """When the table is checked next (None: at the next round), its sweep's probe if it has one."""
        if self.sweep is not None and self.next_s is not None:
            return min(self.sweep.next_s, self.time_trigger_s or math.inf)
        return self.next_s

    def recheck_now(self) -> None:
        """Check at the next round, then as the first check: what the table was evaluated with
        changed (its settings, or a maintenance job's commit)."""
        self.next_s = self.interval_s = None

    def notice(self) -> None:
        """A change notice: check at the next round, the polling cadence kept."""
        self.next_s = None
        self.noticed = True

    def check_soon(self) -> None:
        """Check at the next round, the cadence kept: its sweep found it moved, but the round
        could not load it, or its sweep ended."""
        self.next_s = None

    def leave_sweep(self, table_id: str) -> None:
        """The table (`table_id`) is checked on its own from now on, no longer by its sweep."""
        if self.sweep is not None:
            self.sweep.leave(table_id)
            self.sweep = None

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
        sweep: CatalogSweep | None = None,
    ) -> None:
        """A check ended; `changed`: it found a new metadata file; `busy`: the table has work
        queued (or must not back off); `sweep`: its catalog's sweep checks it from now on. Sets
        the next check by the rules of the module."""
        first, noticed, previous_s = self.checks == 0, self.noticed, self.interval_s
        self.checks += 1
        self.noticed = False
        changed = changed and not first  # a first check finds the table as it is: no change
        logged = self.pace.last_s
        # A change with no new commit of data (a rewrite, a maintenance job's) moves nothing.
        committed = changed and logged != self.logged_s
        if first:
            self.last_change_s = None if logged is None else min(logged, now_s)
        elif committed:
            # The writer's clock may be off: its time is taken within the checks around it.
            earliest = self.checked_s if self.checked_s is not None else now_s
            self.last_change_s = now_s if logged is None else min(now_s, max(earliest, logged))
            self.follows_notices = noticed
        self.logged_s, self.checked_s = logged, now_s
        if self.sweep is not sweep:
            self.leave_sweep(table_id)
        if sweep is not None:
            # Checked with its catalog: at the minimum interval, never backed off or spread.
            self.sweep = sweep
            sweep.join(table_id, cadence.min_interval_s)
            self.interval_s = cadence.min_interval_s
            self.next_s = now_s + self.interval_s
            return
        expected = None if busy else self._next_commit(now_s)
        aimed = expected is not None and expected[0] > now_s
        if expected is None:
            self.interval_s = self._interval(now_s, cadence, committed and not noticed, busy)
        elif aimed:
            self.interval_s = cadence.within(expected[0] + cadence.min_interval_s / 2 - now_s)
        else:  # due and not come yet: looked for
            self.interval_s = cadence.within(expected[1] * DUE_SHARE)
        # The check after the first, and the first at the maximum, fall anywhere within their
        # interval: tables applied together, of an age, would otherwise come back together (an
        # interval taken from their age) and stay checked together at the maximum, in waves that
        # ±10 % spreads out only slowly.
        reached_max = self.interval_s == cadence.max_interval_s != previous_s
        spread_by: Spread = "none" if aimed else "within" if reached_max or first else "around"
        self.next_s = cadence.next_check_s(
            now_s, self.interval_s, table_id, self.checks, self.time_trigger_s, spread_by
        )

    def _next_commit(self, now_s: float) -> tuple[float, float] | None:
        """While the table's next commit is looked for, when it is due (its last commit plus its
        shortest gap) and the typical gap; None when its pace is not known, its changes come with
        notices, or two typical gaps have passed since the last."""
        gap, soonest, last = self.pace.gap_s, self.pace.shortest_gap_s, self.last_change_s
        if gap is None or soonest is None or last is None or self.follows_notices or now_s - last >= 2 * gap:
            return None
        return last + soonest, gap

    def _interval(self, now_s: float, cadence: RefreshCadence, changed: bool, busy: bool) -> float:
        low = cadence.min_interval_s
        if busy:
            return low
        if changed:
            return low
        if self.interval_s is None:
            # As the backing off would find it by now, unchanged since it was written (a cadence
            # whose minimum is 0 never backs off).
            written = self.written_s
            return low if written is None or low <= 0 else cadence.within(now_s - written)
        return cadence.backed_off(self.interval_s)

    def urgency(self, now_s: float) -> float:
        """How much a due check is worth ahead of others when not all can be made: one never made
        or asked for (a notice, a first check) first, then the later against its interval the more
        (a writer's table late by one of its short intervals before an idle one late by as long)."""
        if self.next_s is None or not self.interval_s:  # not checked yet, or every round
            return math.inf
        return (now_s - self.next_s) / self.interval_s


def spread(table_id: str, check: int) -> float:
    """A number in [0, 1) from the table and the check's number, the same every time."""
    digest = hashlib.blake2b(f"{table_id}#{check}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
