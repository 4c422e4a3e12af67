"""What the UI's pages show, read from the engine at most once per `SNAPSHOT_TTL_S`: every
table's row (its view and its wait) and every group's figures, then sorted, filtered and paged
in memory. 10,000 tables cost one pass over the engine per snapshot, and a page renders only its
own rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from floe.api.group import OptimizerGroup
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.views import TableDetail, TableView
from floe.optimizing.waiting import Waiting
from floe.scheduling.records import GroupSchedulingStats
from floe.service.metrics import ScalingSource
from floe.ui.history import RunPoint, RunPoints

SNAPSHOT_TTL_S = 2.0
"""How long one reading of the engine serves the pages: a burst of page views reads it once."""
PAGE_SIZE = 100
"""Tables per page of the tables list."""
MAX_FILTER_LENGTH = 200
"""A filter's text is cut to this many characters."""

BUSY_STATES = frozenset({"PLANNING", "MINOR_OPTIMIZING", "MAJOR_OPTIMIZING", "FULL_OPTIMIZING", "COMMITTING"})


@dataclass(frozen=True)
class TableRow:
    """One table as the pages list it."""

    view: TableView
    wait: Waiting | None

    @property
    def backlog(self) -> int:
        """Tasks queued in its group plus those its would-be plan holds (due, not planned yet)."""
        return self.view.queued_tasks + self.view.due_tasks

    @property
    def reason(self) -> str:
        """What it waits for (`Waiting.reason`), empty when unknown."""
        return self.wait.reason if self.wait is not None else ""


@dataclass(frozen=True)
class GroupRow:
    """One optimizer group's figures."""

    key: str
    """The group's name in the task service: ``namespace/name`` in the operator, ``name`` embedded."""
    group: OptimizerGroup | None
    """Its manifest; None for a group the task service has but the engine forgot."""
    stats: GroupSchedulingStats
    optimizers: int
    demand: int
    ready_executors: int | None
    """Executor pods ready, desired: None where nobody counts pods (``floe run``'s local Spark)."""
    desired_executors: int | None
    over_quota: int
    """Its tables that used at least their whole quota over the last hour."""
    tables: int


@dataclass(frozen=True)
class Snapshot:
    """Every table's row (ordered by id) and every group's, at one reading."""

    rows: tuple[TableRow, ...]
    groups: tuple[GroupRow, ...]
    by_id: Mapping[str, TableRow] = field(repr=False)


class UiSource:
    """The engine as the pages read it: one snapshot at a time, taken again after `ttl_s`.

    `scaling`: each group's executor counts (the operator's `GroupScaling.samples`); None where
    no pods are counted. `notice`: a line every page shows (e.g. that this replica does not
    lead, so its figures are not current), empty for none. `redact` masks credentials in every
    text a page shows.
    """

    def __init__(
        self,
        engine: OptimizingEngine,
        redact: Callable[[str], str],
        scaling: ScalingSource | None = None,
        notice: Callable[[], str] = lambda: "",
        title: str = "floe",
        ttl_s: float = SNAPSHOT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.redact = redact
        self.scaling = scaling
        self.notice = notice
        self.title = title
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: tuple[float, Snapshot] | None = None
        self.runs = RunPoints()
        engine.subscribe_runs(self.runs.put)
        self.readings = 0
        """Times the engine was read (the tests check that a burst of pages reads it once)."""

    def snapshot(self) -> Snapshot:
        """The current snapshot, read from the engine when the last is older than `ttl_s`."""
        with self._lock:
            now = self._clock()
            if self._snapshot is None or now - self._snapshot[0] >= self._ttl_s:
                self._snapshot = (now, self._read())
                self.readings += 1
            return self._snapshot[1]

    def detail(self, table_id: str) -> TableDetail | None:
        """The table's runs and health (from its runtime alone, not the snapshot)."""
        return self.engine.table_detail(table_id)

    def points(self, detail: TableDetail) -> list[RunPoint]:
        """The table's optimizing runs to chart: those seen ending here, and those it kept."""
        return self.runs.of(detail.table_id, detail.runs)

    def _read(self) -> Snapshot:
        engine = self.engine
        views = engine.table_views()
        waits = engine.waits({view.table_id: view.occupation for view in views})
        rows = tuple(TableRow(view, waits.get(view.table_id)) for view in views)
        demands = engine.group_demands()
        executors = {s.group: (s.ready, s.desired) for s in self.scaling()} if self.scaling else {}
        per_group: dict[str, list[TableRow]] = {}
        for row in rows:
            per_group.setdefault(row.view.group_key, []).append(row)
        groups = []
        for key, stats, optimizers in sorted(engine.service.snapshot(), key=lambda group: group[0]):
            mine = per_group.get(key, [])
            ready, desired = executors.get(key, (None, None))
            groups.append(
                GroupRow(
                    key=key,
                    group=engine.groups.get(key),
                    stats=stats,
                    optimizers=optimizers,
                    demand=demands.get(key, 0),
                    ready_executors=ready,
                    desired_executors=desired,
                    over_quota=sum(1 for r in mine if r.view.occupation >= 1.0),
                    tables=len(mine),
                )
            )
        return Snapshot(rows, tuple(groups), {row.view.table_id: row for row in rows})


SORTS: dict[str, Callable[[TableRow], tuple[float | str, ...]]] = {
    # Unknown health (not evaluated yet) sorts after every score, either way round.
    "health": lambda r: (r.view.health is None, r.view.health or 0, r.view.table_id),
    "backlog": lambda r: (r.backlog, r.view.table_id),
    "state": lambda r: (r.view.state, r.view.table_id),
    "occupation": lambda r: (r.view.occupation, r.view.table_id),
    "name": lambda r: (r.view.table_id,),
    "waiting": lambda r: (r.reason, r.wait.queue_position or 0 if r.wait else 0, r.view.table_id),
}
"""The orders the tables list offers, each ascending."""
DESCENDING_FIRST = frozenset({"backlog", "occupation"})
"""Orders a click first shows largest first: the tables that need looking at come first."""


@dataclass(frozen=True)
class TableQuery:
    """The tables list's sort, filters and page, from the page's query string."""

    sort: str = "health"
    descending: bool = False
    group: str = ""
    state: str = ""
    reason: str = ""
    name: str = ""
    page: int = 1

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> TableQuery:
        """The query a page's URL asks for; what it cannot use falls back to the default."""
        sort = query.get("sort", "health")
        if sort not in SORTS:
            sort = "health"
        order = query.get("order", "")
        descending = order == "desc" if order in ("asc", "desc") else sort in DESCENDING_FIRST
        page_text = query.get("page", "1")
        page = int(page_text) if page_text.isdigit() and len(page_text) <= 9 else 1
        return cls(
            sort=sort,
            descending=descending,
            group=query.get("group", "")[:MAX_FILTER_LENGTH],
            state=query.get("state", "")[:MAX_FILTER_LENGTH],
            reason=query.get("reason", "")[:MAX_FILTER_LENGTH],
            name=query.get("name", "")[:MAX_FILTER_LENGTH],
            page=max(1, page),
        )

    def params(self, **changes: str | int | bool) -> dict[str, str]:
        """This query's parameters with `changes`, leaving out those at their default."""
        values: dict[str, str | int | bool] = {
            "sort": self.sort,
            "order": "desc" if self.descending else "asc",
            "group": self.group,
            "state": self.state,
            "reason": self.reason,
            "name": self.name,
            "page": self.page,
        }
        values.update(changes)
        return {k: str(v) for k, v in values.items() if v != "" and not (k == "page" and v == 1)}

    def matches(self, row: TableRow) -> bool:
        """Whether the row passes every filter (the name filter: a case-blind substring)."""
        view = row.view
        return (
            (not self.group or view.group_key == self.group)
            and (not self.state or view.state == self.state)
            and (not self.reason or row.reason == self.reason)
            and (not self.name or self.name.lower() in view.table_id.lower())
        )


@dataclass(frozen=True)
class TablePage:
    """One page of the tables list."""

    rows: Sequence[TableRow]
    matching: int
    """Tables that pass the filters, over every page."""
    pages: int
    page: int


def select(rows: Sequence[TableRow], query: TableQuery, page_size: int = PAGE_SIZE) -> TablePage:
    """The rows `query` filters, in its order, cut to its page (the last page when it asks past it)."""
    matching = [row for row in rows if query.matches(row)]
    matching.sort(key=SORTS[query.sort], reverse=query.descending)
    pages = max(1, -(-len(matching) // page_size))
    page = min(query.page, pages)
    start = (page - 1) * page_size
    return TablePage(matching[start : start + page_size], len(matching), pages, page)
