"""What a soak run found: failures (with what it takes to replay them) and its figures."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Failure:
    """One thing the soak found wrong."""

    seed: int
    table: str
    where: str
    """The snapshot (or the writer's operation) it was found at."""
    lines: tuple[str, ...]

    def describe(self) -> str:
        """A few lines: the seed, the table, the snapshot and the row differences."""
        head = f"seed {self.seed}, table {self.table}, {self.where}:"
        return "\n".join([head, *(f"  {line}" for line in self.lines)])


@dataclass
class Figures:
    """Counts of a soak run, added up over its seeds."""

    seeds: list[int] = field(default_factory=list)
    seconds: float = 0.0
    snapshots_seen: int = 0
    snapshots_checked: int = 0
    snapshots_expired_first: int = 0
    """Seen, but expired by floe or the other engine before Iceberg Java could read them."""
    snapshots_unobserved: int = 0
    """Made and expired between two looks at the table's metadata."""
    commits: Counter[str] = field(default_factory=Counter)
    """Per writer (and per floe or Spark job): snapshots committed."""
    conflicts: Counter[str] = field(default_factory=Counter)
    """Per writer (and Spark maintenance): commits that lost to a concurrent one."""
    maintenance_runs: Counter[str] = field(default_factory=Counter)
    """Spark's procedures run by the other engine (those that change nothing commit nothing)."""

    def add(self, other: Figures) -> None:
        """Add ``other``'s counts to these."""
        self.seeds.extend(other.seeds)
        self.seconds += other.seconds
        self.snapshots_seen += other.snapshots_seen
        self.snapshots_checked += other.snapshots_checked
        self.snapshots_expired_first += other.snapshots_expired_first
        self.snapshots_unobserved += other.snapshots_unobserved
        self.commits.update(other.commits)
        self.conflicts.update(other.conflicts)
        self.maintenance_runs.update(other.maintenance_runs)

    def describe(self) -> str:
        """The figures, a few lines."""
        return "\n".join(
            [
                f"seeds: {len(self.seeds)} ({', '.join(map(str, self.seeds))})",
                f"minutes: {self.seconds / 60:.1f}",
                f"snapshots: {self.snapshots_seen} seen, {self.snapshots_checked} checked, "
                f"{self.snapshots_expired_first} expired before they could be read, "
                f"{self.snapshots_unobserved} made and expired unseen",
                f"commits: {_counts(self.commits)}",
                f"conflicts (not applied): {_counts(self.conflicts)}",
                f"other engine's procedures run: {_counts(self.maintenance_runs)}",
            ]
        )


def _counts(counts: Counter[str]) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))
