"""Which locations orphan cleanup lists: only places the table owns.

As Iceberg Java's DeleteOrphanFiles lists ``table.location()``, floe lists the table location by
default. A place outside it where the table writes (``write.data.path``, ``write.metadata.path``,
``write.object-storage.path``, ``write.folder-storage.path``) is often shared with other tables,
so it is listed only when the user names it (``spec.maintenance.orphanFiles.locations``,
``floe optimize --location``), and a named location must be, or lie inside, the table location or
one of those write paths: a typo never points the job at another team's directory.

Before anything is listed, every root is checked against the catalog's other tables
(`floe.tables.catalog_locations`): a root that is, lies inside or contains another table's
location or write path is refused, since that table's files would look like orphans. Java
shares that risk with a nested table; floe refuses it. Where the catalog cannot be listed (not
permitted, not answering) the job goes on, and its summary says the other tables were not
checked and why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from floe.maintenance.job import (
    LOCATION_NOT_OWNED,
    LOCATION_SHARED,
    MaintenanceJob,
    MaintenanceRefused,
)
from floe.tables.catalog_locations import CatalogLocations, OtherTables
from floe.tables.listing import location_path
from floe.tables.table_locations import TableLocations, nest_roots, relation, table_locations


@dataclass(frozen=True)
class OrphanRoots:
    """What one orphan cleanup lists, and what its summary must add."""

    roots: dict[str, str]
    """FileSystem path → location."""
    note: str = ""
    """Why the catalog's other tables were not all checked; empty when they were."""


def orphan_roots(
    table: Table,
    io: PyArrowFileIO,
    *,
    locations: Sequence[str],
    catalog_locations: CatalogLocations | None,
    now_s: float,
    older_than_s: float,
) -> OrphanRoots:
    """The roots orphan cleanup of `table` (as last refreshed) lists: its location and the named
    `locations`, each checked against the other tables of its catalog (`catalog_locations`, or
    one read now). Raises `MaintenanceRefused` for a named location the table does not write to
    and for a root another table uses."""
    name = ".".join(table.name())
    metadata = table.metadata
    fs = _FileSystemPaths(tuple(sorted((key, str(value)) for key, value in io.properties.items())))
    roots = listed_roots(name, table_locations(metadata.location, metadata.properties), locations, fs)
    index = catalog_locations if catalog_locations is not None else CatalogLocations(table.catalog)
    others = index.others(name, str(metadata.table_uuid), now_s, older_than_s)
    check_roots(name, roots, others, fs)
    note = f"other tables of the catalog not checked: {others.unchecked}" if others.unchecked else ""
    return OrphanRoots(roots, note)


@dataclass(frozen=True)
class _FileSystemPaths:
    """`location_path` for a FileIO with `properties`; equal for equal properties, so the checks
    of one catalog share the index of its tables' locations (`LocationSnapshot.index`)."""

    properties: tuple[tuple[str, str], ...]

    def __call__(self, location: str) -> str:
        return location_path(location, dict(self.properties))


def listed_roots(
    table: str, own: TableLocations, named: Sequence[str], fs: Callable[[str], str]
) -> dict[str, str]:
    """The table location and the `named` locations, by FileSystem path (`fs` of a location), none
    inside another. Raises `MaintenanceRefused` (`LOCATION_NOT_OWNED`) for a named location that is
    not, and does not lie inside, a location of `own`."""
    bases = {fs(location) for location in own.all()}
    paths = {fs(own.location): own.location}
    for location in named:
        path = fs(location)
        if not any(relation(path, base) in ("is", "lies inside") for base in bases):
            raise MaintenanceRefused(
                table,
                MaintenanceJob.ORPHANS,
                LOCATION_NOT_OWNED,
                f"{location} is not a location the table writes to (its location and write paths: "
                f"{', '.join(own.all())})",
            )
        paths.setdefault(path, location)
    return nest_roots(paths)


def check_roots(table: str, roots: dict[str, str], others: OtherTables, fs: Callable[[str], str]) -> None:
    """Raise `MaintenanceRefused` (`LOCATION_SHARED`) when a root of `roots` is, lies inside or
    contains a location of one of `others`; `fs` gives a location's FileSystem path."""
    overlap = others.tables.index(fs).first_overlap(roots, others.excluded)
    if overlap is not None:
        raise MaintenanceRefused(
            table,
            MaintenanceJob.ORPHANS,
            LOCATION_SHARED,
            f"orphan cleanup would list {overlap.describe()}: that table's files would look like orphans",
        )
