"""Every item looked at once a period, a share at each round rather than all in one.

The operator's backstops (the engine's visit of every table, the status flush's comparison of
every table) catch a change nothing told of. Done all at once they are a burst that grows with
the table count: at 10,000 tables, one round a minute that walks all of them. Handed out in
turns, each round of the period takes its share, in proportion to the time gone, and no round
walks every table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection


class Rotation:
    """Hands out every item of a pass once over `period_s`, a share at each call; not
    thread-safe (its caller holds its own lock)."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._order: list[str] = []
        self._handed = 0
        self._started_s = -math.inf

    def take(self, now_s: float, items: Callable[[], Collection[str]]) -> list[str]:
        """The items whose turn has come by `now_s`.

        A pass lists `items()` when it starts and hands them out in proportion to the time gone
        of its period. When the period ends, what the pass has left (calls were too sparse to
        reach it) is handed out, and the next pass starts. An item added during a pass waits for
        the next one; an item gone meanwhile is still handed out (the caller skips it). The first
        call starts an empty pass: the first pass lists the items one period after it, as what
        the caller starts with is new to it and looked at anyway.
        """
        if self._started_s == -math.inf:
            self._started_s = now_s
            return []
        if now_s < self._started_s + self.period_s:
            due = int(len(self._order) * max(0.0, now_s - self._started_s) / self.period_s)
            turn = self._order[self._handed : due]
            self._handed = max(self._handed, due)
            return turn
        rest = self._order[self._handed :]
        self._order = list(items())
        self._handed = 0
        self._started_s = now_s
        return rest
