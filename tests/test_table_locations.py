"""Which locations orphan cleanup may list, and the gc.enabled rule, as plain values: no catalog."""

from __future__ import annotations

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
from floe.tables.catalog_locations import OtherTables
from floe.tables.listing import fs_path
from floe.tables.table_locations import (
    Overlap,
    TableLocations,
    find_overlap,
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
    assert find_overlap(roots, apart) is None
    nested = {**apart, "db.b": {fs("s3a://b/wh/a/b/"): "s3a://b/wh/a/b/"}}
    assert find_overlap(roots, nested) == Overlap("s3://b/wh/a", "contains", "db.b", "s3a://b/wh/a/b/")
    outer = {"db.w": {fs("s3://b/wh"): "s3://b/wh"}}
    assert find_overlap(roots, outer) == Overlap("s3://b/wh/a", "lies inside", "db.w", "s3://b/wh")


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
    others = OtherTables({"db.b": TableLocations("s3://b/wh/b", ("s3a://b/shared/data",))})
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
