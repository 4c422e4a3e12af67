"""The locations of every table of a catalog, kept between orphan cleanups: what their check
against the catalog's other tables (`floe.maintenance.orphan_roots`) compares a root with.

Listing a catalog of thousands of tables and loading each one before every cleanup would cost
more than the cleanups, so one `CatalogLocations` per catalog keeps each table's locations
(`TableLocations`) with the time they were last known to be current, and every check:

* lists the catalog's identifiers again (cheap: a query, or a call per namespace), forgets the
  tables gone and always reads a new identifier's locations;
* reads a known table again only when its locations were last known current longer ago than
  the cleanup's ``olderThan`` (`max_age_s`). That is enough: a table whose location or write
  paths moved since can only have written files younger than that time at its new place, and
  orphan cleanup never deletes a file younger than ``olderThan``, so those files are safe from
  a cleanup that still sees the old locations;
* in a SQL catalog, whose one query tells every table's current metadata file
  (`floe.tables.metadata_probe.metadata_locations`), knows a table whose metadata file is the
  one it read to be current now (metadata files never change), and reads again only a table
  whose metadata file changed, by the rule above: at most once per ``olderThan``, however often
  the table commits.

A probe may be a few seconds old (`floe.optimizing.catalog_access` hands an orphan cleanup the
refresh's probe when it is younger than ``PROBE_REUSE_S``): what it tells is taken as current
at the time it was made, not at the check's, and a table it does not show yet (made or moved
since) has only files younger than the probe at its new place, which the same ``olderThan``
keeps from the cleanup. That only widens, by those seconds, the wait every check already has
between its look at the catalog and the cleanup's deletes, which its listing takes.

What a check finds is shared (`LocationSnapshot`) until a table's locations change, with the
index of them each FileSystem form asked for (`floe.tables.table_locations.LocationIndex`): at
10,000 tables, comparing every root with every table on each cleanup was most of its CPU.

A table's locations come from its metadata: in a SQL catalog its metadata file is read as plain
JSON (``location``, ``properties``), which no schema pyiceberg cannot parse stops; elsewhere the
table is loaded. A catalog that cannot be listed, or a table that cannot be read, is reported
(`OtherTables.unchecked`), not guessed at.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.io import load_file_io
from pyiceberg.serializers import Compressor

from floe.tables.catalog import short_error
from floe.tables.metadata_probe import Probe, fresh_probe
from floe.tables.selection import list_table_identifiers
from floe.tables.table_locations import LocationIndex, TableLocations, table_locations

_READERS = 8
"""Tables read at once: a catalog's first check reads them all."""


class LocationSnapshot:
    """The locations of every table of a catalog as a check found them, and their indexes; kept
    (never changed) until a table's locations change."""

    def __init__(self, tables: Mapping[str, TableLocations], uuids: Mapping[str, str] | None = None) -> None:
        self.tables = tables
        """By identifier (``namespace.table``)."""
        self._uuids = uuids or {}
        self._by_lower: dict[str, list[str]] = {}
        for identifier in tables:
            self._by_lower.setdefault(identifier.lower(), []).append(identifier)
        self._indexes: dict[Hashable, LocationIndex] = {}

    def selves(self, identifier: str, table_uuid: str) -> frozenset[str]:
        """The identifiers that name the table `identifier` (whose UUID is `table_uuid`): itself,
        and one that differs only in case (catalogs that fold case) with the same UUID. Another
        identifier of the same UUID (a table registered twice) is another table writing to the
        same place."""
        same = [i for i in self._by_lower.get(identifier.lower(), ()) if self._uuids.get(i) == table_uuid]
        return frozenset([identifier, *same])

    def index(self, fs: Callable[[str], str]) -> LocationIndex:
        """The tables' locations indexed by `fs` (a location → its FileSystem path; equal `fs`
        give the same index), built at its first use."""
        index = self._indexes.get(fs)
        if index is None:
            paths = {t: {fs(location): location for location in ls.all()} for t, ls in self.tables.items()}
            index = self._indexes.setdefault(fs, LocationIndex(paths))
        return index


@dataclass(frozen=True)
class OtherTables:
    """The other tables of a table's catalog, as one check found them."""

    tables: LocationSnapshot = field(default_factory=lambda: LocationSnapshot({}))
    """Every table of the catalog read, the checked table among them."""
    excluded: frozenset[str] = frozenset()
    """The identifiers in `tables` that name the checked table."""
    unchecked: str = ""
    """Why some or all other tables are not in `tables`; empty when every one is."""

    @property
    def locations(self) -> dict[str, TableLocations]:
        """The other tables' locations, by identifier."""
        return {i: locations for i, locations in self.tables.tables.items() if i not in self.excluded}


@dataclass
class _Entry:
    locations: TableLocations
    table_uuid: str
    current_s: float
    """When `locations` were last known to be the table's."""
    metadata_location: str | None
    """The metadata file they were read from (SQL catalogs)."""


class CatalogLocations:
    """The locations of the tables of one catalog, read again by the rules of the module docstring.

    Safe to use from several threads; the checks of one catalog take turns.
    """

    def __init__(
        self, catalog: Catalog, probe: Callable[[Catalog, float], Probe | None] = fresh_probe
    ) -> None:
        self.catalog = catalog
        self._probe = probe
        """Every table's metadata file in one call as of a time no later than the check's, or None
        where the catalog cannot tell."""
        self._entries: dict[str, _Entry] = {}
        self._snapshot: LocationSnapshot | None = None
        """What `_entries` hold, shared by the checks; None after they changed."""
        self._last_probe: Mapping[str, str] = {}
        self._last_probe_s = 0.0
        self._pending: set[str] = set()
        """Identifiers probed whose entry is missing or read from another metadata file."""
        self._lock = threading.Lock()
        self.reads = 0
        """Tables read so far (tests check what a check reads again)."""

    def others(self, identifier: str, table_uuid: str, now_s: float, max_age_s: float) -> OtherTables:
        """Every table of the catalog but `identifier` (whose UUID is `table_uuid`), those new
        and those last known current more than `max_age_s` before `now_s` read again; see the
        module docstring."""
        with self._lock:
            try:
                probe = self._probe(self.catalog, now_s)
                listed = None if probe is not None else set(list_table_identifiers(self.catalog))
            except Exception as exc:  # not permitted, not answering: reported, never guessed at
                return OtherTables(unchecked=f"the catalog's tables could not be listed ({short_error(exc)})")
            if probe is not None:
                stale = self._stale_probed(probe.locations, identifier, now_s - max_age_s)
                self._last_probe, self._last_probe_s = probe.locations, probe.taken_s
                failed = self._read(stale, probe.locations, probe.taken_s)
            else:
                stale = self._stale_listed(listed or set(), identifier, now_s - max_age_s)
                failed = self._read(stale, None, now_s)
            if self._snapshot is None:
                entries = self._entries.items()
                self._snapshot = LocationSnapshot(
                    {i: e.locations for i, e in entries}, {i: e.table_uuid for i, e in entries}
                )
            snapshot = self._snapshot
        unchecked = ""
        if failed:
            named = "; ".join(f"{i} ({reason})" for i, reason in sorted(failed.items())[:3])
            unchecked = f"{len(failed)} tables could not be read: {named}"
        return OtherTables(snapshot, snapshot.selves(identifier, table_uuid), unchecked)

    def _stale_probed(self, probed: Mapping[str, str], identifier: str, current_after_s: float) -> list[str]:
        """The tables to read, where the catalog told every table's metadata file (`probed`):
        only those whose file changed since the last probe are looked at, so a check of an
        unchanged catalog costs set operations, not a walk of every table."""
        self._forget(self._entries.keys() - probed.keys())
        self._pending.intersection_update(probed.keys())
        for other, metadata_location in probed.items() - self._last_probe.items():
            entry = self._entries.get(other)
            if (
                entry is not None
                and other in self._last_probe
                and self._last_probe[other] == entry.metadata_location
            ):
                entry.current_s = self._last_probe_s  # its file was the table's until the last probe
            if entry is None or entry.metadata_location != metadata_location:
                self._pending.add(other)
            else:
                self._pending.discard(other)
        return [
            other
            for other in sorted(self._pending - {identifier})
            if other not in self._entries or self._entries[other].current_s < current_after_s
        ]

    def _stale_listed(self, listed: set[str], identifier: str, current_after_s: float) -> list[str]:
        """The tables to read, where the catalog only lists its identifiers: new ones, and those
        read before `current_after_s`."""
        self._forget(self._entries.keys() - listed)
        self._last_probe, self._pending = {}, set()
        return [
            other
            for other in sorted(listed - {identifier})
            if other not in self._entries or self._entries[other].current_s < current_after_s
        ]

    def _forget(self, gone: set[str]) -> None:
        for identifier in gone:
            del self._entries[identifier]
            self._snapshot = None

    def _read(self, identifiers: list[str], probed: Mapping[str, str] | None, now_s: float) -> dict[str, str]:
        """Read `identifiers` into the cache, as current at `now_s` (a probe's time: the metadata
        file it named was the table's then); returns why each one that failed did."""
        if not identifiers:
            return {}
        read: Callable[[str], _Entry]
        if probed is not None:
            read = lambda i: self._read_metadata(probed[i], now_s)  # noqa: E731
        else:
            read = lambda i: self._load(i, now_s)  # noqa: E731
        failed: dict[str, str] = {}
        with ThreadPoolExecutor(max_workers=_READERS) as pool:
            for identifier, outcome in zip(identifiers, pool.map(_outcome(read), identifiers), strict=True):
                before = self._entries.get(identifier)
                if isinstance(outcome, _Entry):
                    self._entries[identifier] = outcome
                    self._pending.discard(identifier)
                    if before is None or (before.locations, before.table_uuid) != (
                        outcome.locations,
                        outcome.table_uuid,
                    ):
                        self._snapshot = None
                else:
                    if before is not None:
                        del self._entries[identifier]
                        self._snapshot = None
                    failed[identifier] = outcome
        self.reads += len(identifiers)
        return failed

    def _read_metadata(self, metadata_location: str, now_s: float) -> _Entry:
        io = load_file_io(dict(self.catalog.properties), metadata_location)
        with Compressor.get_compressor(metadata_location).stream_decompressor(
            io.new_input(metadata_location).open()
        ) as stream:
            document: dict[str, Any] = json.load(stream)
        properties = {str(k): str(v) for k, v in (document.get("properties") or {}).items()}
        locations = table_locations(str(document["location"]), properties)
        return _Entry(locations, str(document.get("table-uuid", "")), now_s, metadata_location)

    def _load(self, identifier: str, now_s: float) -> _Entry:
        metadata = self.catalog.load_table(identifier).metadata
        locations = table_locations(metadata.location, metadata.properties)
        return _Entry(locations, str(metadata.table_uuid), now_s, None)


def _outcome(read: Callable[[str], _Entry]) -> Callable[[str], _Entry | str]:
    """`read`, its failure turned into why it failed."""

    def attempt(identifier: str) -> _Entry | str:
        try:
            return read(identifier)
        except Exception as exc:  # one unreadable table: reported with the others
            return short_error(exc)

    return attempt
