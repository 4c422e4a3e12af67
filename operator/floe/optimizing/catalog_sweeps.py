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
from dataclasses import dataclass, field

from floe.api.table import CatalogRef


@dataclass
class CatalogSweep:
    """One swept catalog: when it is probed, what its tables were brought up to, who it answers for."""

    ref: CatalogRef
    """How the catalog is opened: the reference of the first table that joined the sweep."""
    interval_s: float = math.inf
    """How often it is probed: the shortest minimum refresh interval of the tables that joined
    since it was made (inf: none has)."""
    last_s: float | None = None
    """When it was last probed."""
    known: dict[str, str] = field(default_factory=dict)
    """Per identifier, the metadata file the engine last brought its tables up to (or that no
    table of the engine names): an identifier whose probed file differs is refreshed."""
    members: set[str] = field(default_factory=set)
    """The table ids whose checks this sweep makes (`RefreshState.sweep`)."""

    @property
    def next_s(self) -> float:
        """When it is probed next (inf: no table wants it)."""
        return -math.inf if self.last_s is None else self.last_s + self.interval_s

    def due(self, now_s: float) -> bool:
        """Whether the catalog is to be probed now."""
        return now_s >= self.next_s

    def join(self, table_id: str, min_interval_s: float) -> None:
        """The table's checks are this sweep's from now; it wants them every `min_interval_s` at least."""
        self.members.add(table_id)
        self.interval_s = min(self.interval_s, min_interval_s)

    def swept(self, now_s: float, locations: dict[str, str]) -> set[str]:
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
