"""Sweeping a catalog that tells every table's metadata file in one call (SQL).

One probe answers for every table of such a catalog, so its tables are not checked one by one:
the catalog is swept every refresh interval, and only the tables whose metadata file moved since
the engine last brought them up to date are refreshed. An idle table of a swept catalog costs
nothing per sweep but its row of the probe: no visit, no check of its own, no status to compare
(`OptimizingEngine.tick` looks only at the tables a round returns). A swept table still has its
own visits for what the catalog cannot tell: its interval trigger firing, its maintenance jobs, a
change notice, a new spec.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from floe.api.table import CatalogRef


@dataclass
class CatalogSweep:
    """One swept catalog: when it is probed, what its tables were brought up to, who it answers for."""

    ref: CatalogRef
    """How the catalog is opened: the reference of the first table that joined the sweep."""
    last_s: float | None = None
    """When it was last probed."""
    known: dict[str, str] = field(default_factory=dict)
    """Per identifier, the metadata file the engine last brought its tables up to (or that no
    table of the engine names): an identifier whose probed file differs is refreshed."""
    members: dict[str, float] = field(default_factory=dict)
    """The table ids whose checks this sweep makes (`RefreshState.sweep`), each with the minimum
    refresh interval it wants."""
    _wanted: Counter[float] = field(default_factory=Counter)
    """How many members want each interval: the shortest is found among the few distinct ones,
    not by walking every member each round."""

    @property
    def interval_s(self) -> float:
        """How often it is probed: the shortest minimum refresh interval of its members (inf:
        none left), so it grows back when the table that wanted it shortest leaves."""
        return min(self._wanted, default=math.inf)

    @property
    def next_s(self) -> float:
        """When it is probed next (inf: no table wants it)."""
        return -math.inf if self.last_s is None else self.last_s + self.interval_s

    def due(self, now_s: float) -> bool:
        """Whether the catalog is to be probed now."""
        return now_s >= self.next_s

    def join(self, table_id: str, min_interval_s: float) -> None:
        """The table's checks are this sweep's from now; it wants them every `min_interval_s` at least."""
        self.leave(table_id)
        self.members[table_id] = min_interval_s
        self._wanted[min_interval_s] += 1

    def leave(self, table_id: str) -> None:
        """The table's checks are no longer this sweep's (it was not a member: nothing changes)."""
        wanted = self.members.pop(table_id, None)
        if wanted is not None:
            self._wanted[wanted] -= 1
            if not self._wanted[wanted]:
                del self._wanted[wanted]

    def swept(self, now_s: float, locations: Mapping[str, str]) -> set[str]:
        """A probe at `now_s` found `locations` (identifier: metadata file): the identifiers whose
        file moved, appeared or went since the last; each is known at its new file from now on,
        unless `forget` says its tables were not brought up to it."""
        moved = {identifier for identifier, _ in locations.items() ^ self.known.items()}
        self.known = dict(locations)
        self.last_s = now_s
        return moved

    def forget(self, identifier: str) -> None:
        """A table naming `identifier` is not up to date with its probed file (busy, held back, its
        load failed): the next probe finds it moved again."""
        self.known.pop(identifier, None)
