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

A table's locations come from its metadata: in a SQL catalog its metadata file is read as plain
JSON (``location``, ``properties``), which no schema pyiceberg cannot parse stops; elsewhere the
table is loaded. A catalog that cannot be listed, or a table that cannot be read, is reported
(`OtherTables.unchecked`), not guessed at.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.io import load_file_io
from pyiceberg.serializers import Compressor

from floe.tables.catalog import short_error
from floe.tables.metadata_probe import metadata_locations
from floe.tables.selection import list_table_identifiers
from floe.tables.table_locations import TableLocations, table_locations

_READERS = 8
"""Tables read at once: a catalog's first check reads them all."""


@dataclass(frozen=True)
class OtherTables:
    """The other tables of a table's catalog, as one check found them."""

    locations: Mapping[str, TableLocations] = field(default_factory=dict)
    """By identifier (``namespace.table``)."""
    unchecked: str = ""
    """Why some or all other tables are not in `locations`; empty when every one is."""


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
        self, catalog: Catalog, probe: Callable[[Catalog], dict[str, str] | None] = metadata_locations
    ) -> None:
        self.catalog = catalog
        self._probe = probe
        """Every table's metadata file in one call, or None where the catalog cannot tell."""
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self.reads = 0
        """Tables read so far (tests check what a check reads again)."""

    def others(self, identifier: str, table_uuid: str, now_s: float, max_age_s: float) -> OtherTables:
        """Every table of the catalog but `identifier` (whose UUID is `table_uuid`), those new
        and those last known current more than `max_age_s` before `now_s` read again; see the
        module docstring."""
        with self._lock:
            try:
                probed = self._probe(self.catalog)
                identifiers = set(probed if probed is not None else list_table_identifiers(self.catalog))
            except Exception as exc:  # not permitted, not answering: reported, never guessed at
                return OtherTables(unchecked=f"the catalog's tables could not be listed ({short_error(exc)})")
            self._entries = {i: e for i, e in self._entries.items() if i in identifiers}
            stale = []
            for other in sorted(identifiers - {identifier}):
                entry = self._entries.get(other)
                if entry is not None and probed is not None and probed[other] == entry.metadata_location:
                    entry.current_s = now_s  # the file read is still the table's: current now
                elif entry is None or entry.current_s < now_s - max_age_s:
                    stale.append(other)
            failed = self._read(stale, probed, now_s)
            others = {
                i: e.locations
                for i, e in self._entries.items()
                if not _is_self(i, e.table_uuid, identifier, table_uuid)
            }
        unchecked = ""
        if failed:
            named = "; ".join(f"{i} ({reason})" for i, reason in sorted(failed.items())[:3])
            unchecked = f"{len(failed)} tables could not be read: {named}"
        return OtherTables(others, unchecked)

    def _read(self, identifiers: list[str], probed: Mapping[str, str] | None, now_s: float) -> dict[str, str]:
        """Read `identifiers` into the cache; returns why each one that failed did."""
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
                if isinstance(outcome, _Entry):
                    self._entries[identifier] = outcome
                else:
                    self._entries.pop(identifier, None)
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


def _is_self(identifier: str, table_uuid: str, own: str, own_uuid: str) -> bool:
    """Whether the catalog's `identifier` is the table checked: the same identifier, or one that
    differs only in case (catalogs that fold case) with the same UUID. Another identifier of the
    same UUID (a table registered twice) is another table writing to the same place."""
    return identifier == own or (identifier.lower() == own.lower() and table_uuid == own_uuid)
