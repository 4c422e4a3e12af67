"""The engine's way to its catalogs: one open catalog per name and properties, table loads
(conditional where the catalog can say "not modified"), one-call probes of every table's
metadata location, and the counts of each kind of call.

The refresh sweeps a SQL catalog every few seconds; an orphan cleanup that checks its roots
against the catalog's other tables soon after is handed that probe (younger than
`PROBE_REUSE_S`) rather than asking again: at 10,000 tables, whose cleanups run a few times a
minute, asking again was half of what the probes cost (`floe.tables.catalog_locations` says
why a probe that old is as safe as a new one).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import partial
from typing import Literal

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Table

from floe.api.table import CatalogRef
from floe.optimizing.table_state import TableRuntime
from floe.service.metrics import ServiceMetrics
from floe.tables.budgeted_http import budget_rest_catalog
from floe.tables.catalog import CatalogConfigError, load_table, open_catalog
from floe.tables.catalog_locations import CatalogLocations
from floe.tables.conditional_load import LoadedTable, load_table_if_changed
from floe.tables.metadata_probe import Probe, fresh_probe
from floe.tables.request_budget import BudgetExhausted, BudgetStats, RequestBudget, budget_settings

CatalogKey = tuple[str, tuple[tuple[str, str], ...]]
"""A catalog's name and properties: the tables that share them share one open catalog."""

PROBE_REUSE_S = 15.0
"""How old a probe an orphan cleanup's check may take rather than probe again: longer than the
default refresh interval (10 s), so a swept catalog is asked once per sweep, and far shorter than
the hour orphan cleanup's ``olderThan`` is at least."""


class CatalogAccess:
    """Open catalogs, loads and probes, counted; safe from the refresh threads."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._metrics = metrics
        self._catalogs: dict[CatalogKey, Catalog] = {}
        self._keys: dict[str, tuple[CatalogRef, CatalogKey]] = {}
        """Per table: its catalog reference and `catalog_key` of it, which each probe asks of
        every table and which stays the same while the reference does."""
        self._locations: dict[CatalogKey, CatalogLocations] = {}
        """Per catalog: its tables' locations, which orphan cleanups check their roots against."""
        self._probes: dict[CatalogKey, Probe] = {}
        """Per catalog: its latest probe."""
        self._lock = threading.Lock()  # the refresh threads load tables concurrently
        self._budgets: dict[CatalogKey, RequestBudget] = {}
        self.table_loads = 0
        """Tables loaded through their catalog so far (refreshes, plans, maintenance)."""
        self.not_modified_loads = 0
        """Refreshes the catalog answered with "not modified" (`load_table_if_changed`): no load."""
        self.catalog_probes = 0
        """Calls that told the metadata locations of a catalog's tables at once (`metadata_locations`)."""

    def key_of(self, runtime: TableRuntime) -> CatalogKey:
        """The table's catalog key, kept while its catalog reference is the same object."""
        ref = runtime.spec.catalog
        cached = self._keys.get(runtime.table_id)
        if cached is None or cached[0] is not ref:
            cached = self._keys[runtime.table_id] = (ref, catalog_key(ref))
        return cached[1]

    def forget(self, table_id: str) -> None:
        """Drop what is kept of a removed table."""
        self._keys.pop(table_id, None)

    def catalog(self, ref: CatalogRef) -> Catalog:
        """The open catalog of `ref`, opened on first use; a REST catalog's calls within its
        request budget (`floe.tables.request_budget`). Raises `CatalogConfigError` for a budget
        property that is not a positive number."""
        key = catalog_key(ref)
        catalog = self._catalogs.get(key)
        if catalog is None:
            try:
                settings = budget_settings(ref.properties)
            except ValueError as exc:
                raise CatalogConfigError(f"catalog {ref.name!r}: {exc}") from exc
            catalog = open_catalog(ref)
            if isinstance(catalog, RestCatalog):
                budget = RequestBudget(settings)
                budget_rest_catalog(catalog, budget)
                with self._lock:
                    self._budgets[key] = budget
            self._catalogs[key] = catalog
        return catalog

    def budgets(self) -> dict[str, BudgetStats]:
        """Each budgeted catalog's `BudgetStats`, by catalog name (the same name's budgets added up)."""
        with self._lock:
            budgets = list(self._budgets.items())
        out: dict[str, BudgetStats] = {}
        for (name, _), budget in budgets:
            stats = budget.stats()
            known = out.get(name)
            out[name] = stats if known is None else known.plus(stats)
        return out

    def load(self, runtime: TableRuntime) -> Table:
        """Load the table through its catalog."""
        self._count("load")
        return load_table(self.catalog(runtime.spec.catalog), runtime.spec.table)

    def load_if_changed(self, runtime: TableRuntime, conditional: bool = True) -> LoadedTable:
        """A refresh's load: none where the catalog says the table's metadata file is still the
        one its last evaluation read (`load_table_if_changed`); `conditional` False: loaded anyway."""
        etag = runtime.etag_to_send() if conditional else None
        try:
            loaded = load_table_if_changed(self.catalog(runtime.spec.catalog), runtime.spec.table, etag)
        except BudgetExhausted:
            raise  # no call made
        except Exception:
            self._count("load")  # a call that failed, as `load` counts it
            raise
        self._count("load" if loaded.table is not None else "not-modified")
        return loaded

    def probe(
        self, refs: Mapping[CatalogKey, CatalogRef], now_s: float
    ) -> dict[CatalogKey, Mapping[str, str]]:
        """The metadata locations of every table of each catalog of `refs` that can tell them all
        in one call (`metadata_locations`), asked at `now_s` or later, by catalog key. A table
        whose metadata file is the one its last evaluation read needs no load
        (`TableRuntime.unchanged_at`); the others are loaded. A catalog that fails here fails
        again in the loads, which report it."""
        found: dict[CatalogKey, Mapping[str, str]] = {}
        for key, ref in refs.items():
            try:
                probe = self._probe(key, self.catalog(ref), now_s)
            except Exception:  # the loads that follow report the catalog's error
                continue
            if probe is not None:
                found[key] = probe.locations
        return found

    def catalog_locations(self, ref: CatalogRef) -> CatalogLocations:
        """The locations of the tables of `ref`'s catalog, one index shared by all its tables; its
        checks take a probe younger than `PROBE_REUSE_S` rather than probe again."""
        catalog = self.catalog(ref)
        key = catalog_key(ref)
        with self._lock:
            locations = self._locations.get(key)
            if locations is None:
                locations = self._locations[key] = CatalogLocations(catalog, partial(self._recent_probe, key))
            return locations

    def _recent_probe(self, key: CatalogKey, catalog: Catalog, now_s: float) -> Probe | None:
        """The catalog's latest probe if it is younger than `PROBE_REUSE_S` at `now_s`, else a new one."""
        with self._lock:
            recent = self._probes.get(key)
        if recent is not None and 0 <= now_s - recent.taken_s < PROBE_REUSE_S:
            return recent
        return self._probe(key, catalog, now_s)

    def _probe(self, key: CatalogKey, catalog: Catalog, now_s: float) -> Probe | None:
        """Probe the catalog (asked at `now_s` or later), counted and kept as its latest."""
        probe = fresh_probe(catalog, now_s)
        if probe is None:
            return None
        self._count("probe")
        with self._lock:
            latest = self._probes.get(key)
            if latest is None or latest.taken_s <= now_s:
                self._probes[key] = probe
        return probe

    def _count(self, kind: Literal["load", "probe", "not-modified"]) -> None:
        """One call to a catalog: its counter and its metric."""
        with self._lock:
            if kind == "load":
                self.table_loads += 1
            elif kind == "probe":
                self.catalog_probes += 1
            else:
                self.not_modified_loads += 1
        self._metrics.catalog_calls.labels(kind).inc()


def catalog_key(ref: CatalogRef) -> CatalogKey:
    """The key of `ref`'s catalog: its name and properties."""
    return ref.name, tuple(sorted(ref.properties.items()))
