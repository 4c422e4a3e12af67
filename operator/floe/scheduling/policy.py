"""The orders in which a group considers its tables: by quota occupation or by staleness.

The same order decides which pending table is planned next and which table's tasks a
polling optimizer thread gets first. Ties are broken by table id so a schedule is
reproducible.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, TypeVar

from floe.api.group import SchedulingPolicy


class Candidate(Protocol):
    """What a policy needs to know about a table."""

    @property
    def table_id(self) -> str:
        """Unique within the group."""
        ...

    @property
    def last_optimized_s(self) -> float | None:
        """When the table's last optimizing of any type committed; None if never."""
        ...

    def occupation(self, now: float) -> float:
        """Quota occupation at ``now`` (see `floe.scheduling.occupation`)."""
        ...


C = TypeVar("C", bound=Candidate)


class TablePolicy(Protocol):
    """Orders tables, most deserving first."""

    kind: SchedulingPolicy

    def order(self, candidates: Iterable[C], now: float) -> list[C]:
        """The candidates, most deserving first."""
        ...


class QuotaPolicy:
    """Lowest quota occupation first: the table furthest below its share gets served."""

    kind = SchedulingPolicy.QUOTA

    def order(self, candidates: Iterable[C], now: float) -> list[C]:
        """The candidates by ascending occupation at ``now``, then by table id."""
        return sorted(candidates, key=lambda c: (c.occupation(now), c.table_id))


class BalancedPolicy:
    """Stalest first: never optimized, then the oldest last optimizing of any type."""

    kind = SchedulingPolicy.BALANCED

    def order(self, candidates: Iterable[C], now: float) -> list[C]:
        """The candidates by how long ago they were last optimized, longest first, then by table id.

        ``now`` is not needed: staleness only depends on when each table last committed.
        """
        return sorted(
            candidates,
            key=lambda c: (c.last_optimized_s is not None, c.last_optimized_s or 0.0, c.table_id),
        )


def planning_order(policy: TablePolicy, candidates: Iterable[C], now: float) -> Iterator[C]:
    """The order pending tables are planned in: the policy's, those below 100 % occupation first
    (a saturated table is planned only when no other waits, so that threads do not idle). Lazy:
    the next table to plan costs one occupation per table up to the first one below 100 %."""
    saturated = []
    for candidate in policy.order(candidates, now):
        if candidate.occupation(now) < 1.0:
            yield candidate
        else:
            saturated.append(candidate)
    yield from saturated


_POLICIES: dict[SchedulingPolicy, TablePolicy] = {
    SchedulingPolicy.QUOTA: QuotaPolicy(),
    SchedulingPolicy.BALANCED: BalancedPolicy(),
}


def policy_for(kind: SchedulingPolicy) -> TablePolicy:
    """The policy implementing ``kind``."""
    return _POLICIES[kind]
