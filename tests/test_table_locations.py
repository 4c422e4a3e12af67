"""Which locations orphan cleanup may list, and the gc.enabled rule, as plain values: no catalog."""

from __future__ import annotations

import random

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from floe.maintenance.job import (
    GC_DISABLED,
    LOCATION_NOT_OWNED,
    LOCATION_SHARED,
    MaintenanceJob,
    MaintenanceRefused,
    require_gc_enabled,
)
from floe.maintenance.orphan_roots import check_roots, listed_roots
from floe.tables.catalog_locations import LocationSnapshot, OtherTables
from floe.tables.listing import fs_path
from floe.tables.table_locations import (
    LocationIndex,
    Overlap,
    TableLocations,
    nest_roots,
    path_parts,
    relation,
    table_locations,
)

IO = PyArrowFileIO()


def fs(location: str) -> str:
    return fs_path(IO, location)


@pytest.mark.parametrize(
    ("path", "other", "expected"),
    [
        ("bucket/wh/a", "bucket/wh/a/", "is"),
        ("bucket//wh/./a", "bucket/wh/a", "is"),
        ("bucket/wh/a/data", "bucket/wh/a", "lies inside"),
        ("bucket/wh", "bucket/wh/a", "contains"),
        ("bucket/wh/a", "bucket/wh/ab", None),
        ("bucket/wh/ab", "bucket/wh/a", None),
        ("/wh/a/../b", "/wh/b", "is"),
        # A local path and an object-store key of the same spelling are different places.
        ("/bucket/wh", "bucket/wh", None),
    ],
)
def test_locations_are_compared_part_by_part(path: str, other: str, expected: str | None) -> None:
    assert relation(path, other) == expected


def test_scheme_spellings_and_trailing_slashes_name_one_place() -> None:
    spellings = ["s3://b/wh/a", "s3a://b/wh/a/", "s3n://b/wh//a", "file:///wh/a", "file:/wh/a", "/wh/a/"]
    paths = {path_parts(fs(location)) for location in spellings}
    assert paths == {("b", "wh", "a"), ("/", "wh", "a")}


def test_a_table_writes_to_its_location_and_the_write_paths_its_properties_set() -> None:
    properties = {
        "write.data.path": "s3://b/shared/data",
        "write.metadata.path": "s3://b/meta/a",
        "write.object-storage.path": "s3://b/objects",
        "write.folder-storage.path": "",
        "write.target-file-size-bytes": "1",
    }
    assert table_locations("s3://b/wh/a", properties) == TableLocations(
        "s3://b/wh/a", ("s3://b/shared/data", "s3://b/meta/a", "s3://b/objects")
    )


def test_the_first_overlap_with_another_table_is_named() -> None:
    roots = {fs("s3://b/wh/a"): "s3://b/wh/a"}
    apart = {"db.c": {fs("s3://b/wh/c"): "s3://b/wh/c", fs("s3://b/wh/ab"): "s3://b/wh/ab"}}
    assert LocationIndex(apart).first_overlap(roots) is None
    nested = {**apart, "db.b": {fs("s3a://b/wh/a/b/"): "s3a://b/wh/a/b/"}}
    assert LocationIndex(nested).first_overlap(roots) == Overlap(
        "s3://b/wh/a", "contains", "db.b", "s3a://b/wh/a/b/"
    )
    outer = {"db.w": {fs("s3://b/wh"): "s3://b/wh"}}
    assert LocationIndex(outer).first_overlap(roots) == Overlap(
        "s3://b/wh/a", "lies inside", "db.w", "s3://b/wh"
    )


def _first_pairwise(roots: dict[str, str], others: dict[str, dict[str, str]]) -> Overlap | None:
    """The definition the index answers: every root against every location, in order."""
    for table in sorted(others):
        for path, location in others[table].items():
            for root_path, root in roots.items():
                found = relation(root_path, path)
                if found is not None:
                    return Overlap(root, found, table, location)
    return None


def _random_locations(chooser: random.Random, most: int) -> dict[str, str]:
    """1 to `most` locations by FileSystem path, of up to 4 parts drawn from a few names and ``..``."""
    names = ["wh", "db", "a", "b", "data", ".."]
    paths = ["/".join(chooser.choice(names) for _ in range(chooser.randint(0, 4))) for _ in range(most)]
    return {path: f"s3://b/{path}" for path in paths[: chooser.randint(1, most)]}


def test_the_index_names_the_overlap_comparing_every_pair_would() -> None:
    chooser = random.Random(7)
    for _ in range(300):
        tables = [f"db.t{chooser.randint(0, 9)}" for _ in range(chooser.randint(0, 6))]
        others = {table: _random_locations(chooser, 3) for table in tables}
        roots = _random_locations(chooser, 3)
        excluded = {table for table in others if chooser.random() < 0.2}
        kept = {table: paths for table, paths in others.items() if table not in excluded}
        assert LocationIndex(others).first_overlap(roots, excluded) == _first_pairwise(roots, kept)


def test_the_checked_table_is_left_out_by_its_name_and_by_its_name_in_another_case_with_its_uuid() -> None:
    snapshot = LocationSnapshot(
        {"db.a": OWN, "DB.A": OWN, "Db.a": OWN, "db.b": TableLocations("s3://b/wh/b")},
        {"db.a": "u1", "DB.A": "u1", "Db.a": "u2", "db.b": "u3"},
    )
    # Db.a has another UUID: a second table registered at the same place, refused.
    assert snapshot.selves("db.a", "u1") == {"db.a", "DB.A"}
    others = OtherTables(snapshot, snapshot.selves("db.a", "u1"))
    assert set(others.locations) == {"Db.a", "db.b"}
    with pytest.raises(MaintenanceRefused, match=r"a location of table Db\.a"):
        check_roots("db.a", listed_roots("db.a", OWN, [], fs), others, fs)
    # The index is built once per FileSystem form and shared by the checks.
    assert snapshot.index(fs) is snapshot.index(fs)


def test_nested_roots_are_listed_once() -> None:
    paths = {"/wh/a/data/x": "/wh/a/data/x", "/wh/a": "/wh/a", "/elsewhere": "/elsewhere"}
    assert nest_roots(paths) == {"/wh/a": "/wh/a", "/elsewhere": "/elsewhere"}


OWN = TableLocations("s3://b/wh/a", ("s3://b/shared/data", "s3://b/meta/a"))


def test_only_the_table_location_is_listed_unless_a_write_path_is_named() -> None:
    assert listed_roots("db.a", OWN, [], fs) == {"b/wh/a": "s3://b/wh/a"}
    named = ["s3a://b/shared/data/", "s3://b/meta/a/old", "s3://b/wh/a/data"]
    assert listed_roots("db.a", OWN, named, fs) == {
        "b/wh/a": "s3://b/wh/a",
        "b/shared/data": "s3a://b/shared/data/",
        "b/meta/a/old": "s3://b/meta/a/old",
    }


@pytest.mark.parametrize(
    "named", ["s3://b/shared", "s3://b/shared/data2", "s3://other/wh/a", "s3://b/meta/a/../b"]
)
def test_a_named_location_the_table_does_not_write_to_is_refused(named: str) -> None:
    with pytest.raises(MaintenanceRefused, match="not a location the table writes to") as refused:
        listed_roots("db.a", OWN, [named], fs)
    assert (refused.value.reason, refused.value.job, refused.value.table) == (
        LOCATION_NOT_OWNED,
        MaintenanceJob.ORPHANS,
        "db.a",
    )
    assert named in str(refused.value) and "db.a" in str(refused.value)


def test_a_root_shared_with_another_table_is_refused() -> None:
    roots = listed_roots("db.a", OWN, ["s3://b/shared/data"], fs)
    others = OtherTables(LocationSnapshot({"db.b": TableLocations("s3://b/wh/b", ("s3a://b/shared/data",))}))
    with pytest.raises(
        MaintenanceRefused, match="s3://b/shared/data, which is s3a://b/shared/data"
    ) as refused:
        check_roots("db.a", roots, others, fs)
    assert refused.value.reason == LOCATION_SHARED and "table db.b" in str(refused.value)
    # The same table without the shared path named: only its own location is listed.
    check_roots("db.a", listed_roots("db.a", OWN, [], fs), others, fs)


@pytest.mark.parametrize(
    ("value", "refused"),
    [(None, False), ("true", False), ("TRUE", False), ("false", True), ("False", True), ("no", True)],
)
def test_gc_disabled_refuses_expiry_and_orphan_cleanup(value: str | None, refused: bool) -> None:
    properties = {} if value is None else {"gc.enabled": value}
    for job, words in (
        (MaintenanceJob.EXPIRE, "Cannot expire snapshots"),
        (MaintenanceJob.ORPHANS, "Cannot delete orphan files"),
    ):
        if not refused:
            require_gc_enabled("db.t", job, properties)
            continue
        with pytest.raises(MaintenanceRefused, match=f"{words}: GC is disabled") as raised:
            require_gc_enabled("db.t", job, properties)
        assert raised.value.reason == GC_DISABLED and str(raised.value).startswith(
            f"{job} of table db.t refused"
        )
