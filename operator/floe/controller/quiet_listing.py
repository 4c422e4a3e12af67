"""When an OptimizedTableSet's periodic listing may skip reading its OptimizedTables.

A listing reads the set's catalog, then every OptimizedTable of its namespace from the API
server (about 5 KB each with its status: 50 MB at 10,000 tables) to find the ones to create,
change or delete. When the last listing changed nothing, the catalog still lists the same
tables and no OptimizedTable was applied or removed since (the operator's watch sees each such
change: `Controller.table_changes`) and the set itself is as it was (its generation), reading
them again would change nothing either, so the periodic listing reads the catalog only. A
listing the set's own change or a restart asks for always reads everything, and so does one in
every `FULL_LISTING_INTERVAL_S`, a backstop against a change the watch missed.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

FULL_LISTING_INTERVAL_S = 3600.0


@dataclass(frozen=True)
class QuietListing:
    """A set's full listing that changed nothing, and what it found."""

    generation: int | None
    """The set's ``metadata.generation`` then."""
    selected: frozenset[str]
    table_changes: int
    """`Controller.table_changes` when its OptimizedTables were read."""
    listed_s: float
    counts: dict[str, int] = field(default_factory=dict)
    message: str = ""

    def still_holds(
        self, generation: int | None, selected: Collection[str], table_changes: int, now_s: float
    ) -> bool:
        """Whether a full listing now would change nothing either (see the module's docstring)."""
        return (
            generation == self.generation
            and table_changes == self.table_changes
            and now_s - self.listed_s < FULL_LISTING_INTERVAL_S
            and frozenset(selected) == self.selected
        )
