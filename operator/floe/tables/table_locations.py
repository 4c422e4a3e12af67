"""Where a table writes, and whether two locations overlap: the pure part of orphan cleanup's
check that it lists only what the table owns (`floe.maintenance.orphan_roots`).

Locations are compared in the form the table's FileSystem lists them (`floe.tables.listing.fs_path`:
``/dir`` locally, ``bucket/key`` on object stores, so ``s3://b/k``, ``s3a://b/k/`` and
``s3n://b/k`` are one place), part by part: a trailing or doubled slash, a ``.`` part and a
resolved ``..`` change nothing, and ``wh/db/a`` neither contains nor lies inside ``wh/db/ab``.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

WRITE_PATH_PROPERTIES = (
    "write.data.path",
    "write.metadata.path",
    # Older spellings of the data path that Iceberg Java's LocationProviders still honour.
    "write.object-storage.path",
    "write.folder-storage.path",
)
"""Table properties that make a table write outside its location."""

Relation = Literal["is", "lies inside", "contains"]


@dataclass(frozen=True)
class TableLocations:
    """Where one table writes: its location, and the write paths its properties set."""

    location: str
    write_paths: tuple[str, ...] = ()

    def all(self) -> tuple[str, ...]:
        """The location, then each write path."""
        return (self.location, *self.write_paths)


def table_locations(location: str, properties: Mapping[str, str]) -> TableLocations:
    """The locations of a table whose metadata has `location` and `properties`."""
    paths = tuple(properties[key] for key in WRITE_PATH_PROPERTIES if properties.get(key))
    return TableLocations(location, paths)


@lru_cache(maxsize=1 << 16)  # every cleanup compares its roots with every other table's locations
def path_parts(path: str) -> tuple[str, ...]:
    """A FileSystem path as its parts; an absolute path starts with the part "/"."""
    parts: list[str] = ["/"] if path.startswith("/") else []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == ".." and len(parts) > (1 if path.startswith("/") else 0):
            parts.pop()
        elif part != "..":
            parts.append(part)
    return tuple(parts)


def relation(path: str, other: str) -> Relation | None:
    """How the FileSystem path `path` stands to `other`: it is that place, lies inside it, contains
    it, or (None) none of these."""
    mine, theirs = path_parts(path), path_parts(other)
    if mine == theirs:
        return "is"
    if mine[: len(theirs)] == theirs:
        return "lies inside"
    if theirs[: len(mine)] == mine:
        return "contains"
    return None


@dataclass(frozen=True)
class Overlap:
    """A root of one table that is, lies inside or contains a location of another table."""

    root: str
    relation: Relation
    table: str
    location: str

    def describe(self) -> str:
        """One sentence for a refusal."""
        return f"{self.root}, which {self.relation} {self.location}, a location of table {self.table}"


@dataclass(frozen=True)
class _Place:
    """One location of one table in a `LocationIndex`."""

    table: str
    order: int
    """Its place among the table's locations."""
    location: str


class LocationIndex:
    """The locations of many tables by the parts of their FileSystem paths: which of them a root
    is, lies inside or contains, found from the root's own parts instead of by comparing the root
    with every table (orphan cleanup checks its roots against every table of its catalog)."""

    def __init__(self, tables: Mapping[str, Mapping[str, str]]) -> None:
        """`tables`: table → its locations, by FileSystem path."""
        self._at: dict[tuple[str, ...], list[_Place]] = {}
        self._below: dict[tuple[str, ...], list[_Place]] = {}
        """Every proper prefix of a location's parts → the places below it."""
        for table, paths in tables.items():
            for order, (path, location) in enumerate(paths.items()):
                parts = path_parts(path)
                place = _Place(table, order, location)
                self._at.setdefault(parts, []).append(place)
                for depth in range(len(parts)):
                    self._below.setdefault(parts[:depth], []).append(place)

    def first_overlap(self, roots: Mapping[str, str], excluded: Container[str] = ()) -> Overlap | None:
        """The first root of `roots` (FileSystem path → location) that is, lies inside or contains
        a location of a table not in `excluded`: first by table name, then by the table's
        location, then by root; None when every root is apart from every such table's."""
        found: list[tuple[tuple[str, int, int], Overlap]] = []
        for root_order, (root_path, root) in enumerate(roots.items()):
            parts = path_parts(root_path)
            around: list[tuple[_Place, Relation]] = [
                (place, "lies inside")
                for depth in range(len(parts))
                for place in self._at.get(parts[:depth], ())
            ]
            around += [(place, "is") for place in self._at.get(parts, ())]
            around += [(place, "contains") for place in self._below.get(parts, ())]
            found += [
                ((place.table, place.order, root_order), Overlap(root, how, place.table, place.location))
                for place, how in around
                if place.table not in excluded
            ]
        return min(found, key=lambda candidate: candidate[0])[1] if found else None


def nest_roots(paths: Mapping[str, str]) -> dict[str, str]:
    """`paths` (FileSystem path → location) without those lying inside another: what to list
    so that each file is listed once."""
    roots: dict[str, str] = {}
    for path in sorted(paths, key=lambda p: len(path_parts(p))):
        if not any(relation(path, root) is not None for root in roots):
            roots[path] = paths[path]
    return roots
