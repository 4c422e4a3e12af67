"""Orphan cleanup lists only what the table owns, on real tables of one SQL catalog: a shared
``write.data.path``, tables nested in each other, named locations, and the catalog index that
keeps the other tables' locations between runs. Iceberg Java's reader judges the other table."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from floe.api.table import MaintenanceSpec
from floe.local.reference_reader import ReferenceReader
from floe.maintenance.job import (
    LOCATION_NOT_OWNED,
    LOCATION_SHARED,
    MaintenanceJob,
    MaintenanceRefused,
)
from floe.maintenance.jobs import run_maintenance_job
from floe.maintenance.orphans import remove_orphan_files
from floe.tables.catalog_locations import CatalogLocations
from floe.tables.writer import conform

HOUR = 3600.0
DAY = 86400.0
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "v", StringType(), required=False),
)


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://").removeprefix("file:"))


def _table(catalog: SqlCatalog, name: str, location: str | None = None, **properties: str) -> Table:
    """`db.<name>` with two appends of ten rows each."""
    table = catalog.create_table(f"db.{name}", SCHEMA, location=location, properties=properties)
    for start in (0, 10):
        ids = list(range(start, start + 10))
        table.append(
            conform(table, pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{name}{i}" for i in ids]}))
        )
    return table


def _age(*directories: Path) -> None:
    """Make every file under `directories` two days old, as if the tables were."""
    then = time.time() - 2 * DAY
    for directory in directories:
        for path in directory.rglob("*"):
            if path.is_file():
                os.utime(path, (then, then))


def _plant(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not referenced by any metadata")
    then = time.time() - 2 * DAY
    os.utime(path, (then, then))
    return path


def _files(directory: Path) -> set[Path]:
    return {p for p in directory.rglob("*") if p.is_file()}


def _cleanup(table: Table, **options: Any) -> Any:
    return remove_orphan_files(table, older_than_s=HOUR, now_s=time.time(), **options)


def _expected(name: str) -> Counter[Any]:
    return Counter((i, f"{name}{i}") for i in range(20))


def test_a_shared_data_path_is_listed_only_when_named_and_then_refused(
    sql_catalog: SqlCatalog, reference: ReferenceReader, tmp_path: Path
) -> None:
    shared = (tmp_path / "shared-data").as_uri()
    a = _table(sql_catalog, "a", **{"write.data.path": shared})
    _table(sql_catalog, "b", **{"write.data.path": shared})
    _age(tmp_path / "warehouse", tmp_path / "shared-data")
    stray = _plant(_local(a.location()) / "metadata" / "stray.avro")
    shared_files = _files(tmp_path / "shared-data")
    assert len(shared_files) == 4  # two data files of each table

    report = _cleanup(a)

    # Only a's location was listed: its stray file went, the shared path was not touched.
    assert report.paths == (str(stray),) and not stray.exists()
    assert _files(tmp_path / "shared-data") == shared_files
    assert reference.rows(sql_catalog.name, "db.b") == _expected("b")

    # Named, the shared path is refused: b writes there.
    with pytest.raises(MaintenanceRefused, match=r"table db\.b") as refused:
        _cleanup(a, locations=[shared])
    assert refused.value.reason == LOCATION_SHARED
    assert _files(tmp_path / "shared-data") == shared_files
    assert reference.rows(sql_catalog.name, "db.b") == _expected("b")
    assert reference.rows(sql_catalog.name, "db.a") == _expected("a")


@pytest.mark.parametrize("nested", ["b in a", "a in b"])
def test_a_table_nested_in_another_is_refused_both_ways(
    sql_catalog: SqlCatalog, reference: ReferenceReader, tmp_path: Path, nested: str
) -> None:
    warehouse = tmp_path / "warehouse"
    outer = (warehouse / "outer").as_uri()
    inner = f"{outer}/inner"
    a = _table(sql_catalog, "a", location=outer if nested == "b in a" else inner)
    _table(sql_catalog, "b", location=inner if nested == "b in a" else outer)
    _age(warehouse)
    before = _files(warehouse)

    with pytest.raises(MaintenanceRefused) as refused:
        _cleanup(a)

    relation = "contains" if nested == "b in a" else "lies inside"
    assert refused.value.reason == LOCATION_SHARED and f"{relation} " in refused.value.detail
    assert _files(warehouse) == before
    assert reference.rows(sql_catalog.name, "db.b") == _expected("b")
    assert reference.rows(sql_catalog.name, "db.a") == _expected("a")


def test_a_named_location_must_be_one_the_table_writes_to(
    sql_catalog: SqlCatalog, reference: ReferenceReader, tmp_path: Path
) -> None:
    data = tmp_path / "a-data"
    a = _table(sql_catalog, "a", **{"write.data.path": data.as_uri()})
    _age(tmp_path / "warehouse", data)
    elsewhere = _plant(tmp_path / "someone-else" / "theirs.parquet")
    spec = MaintenanceSpec.model_validate(
        {"orphanFiles": {"locations": [(tmp_path / "someone-else").as_uri()]}}
    )

    with pytest.raises(MaintenanceRefused, match="not a location the table writes to") as refused:
        run_maintenance_job(a, MaintenanceJob.ORPHANS, spec, now_s=time.time())
    assert refused.value.reason == LOCATION_NOT_OWNED and elsewhere.exists()

    # The table's own data path, named, is listed: an orphan in it goes, the live files stay.
    orphan = _plant(data / "crashed-writer.parquet")
    spec = MaintenanceSpec.model_validate(
        {"orphanFiles": {"olderThan": "1d", "locations": [f"{data.as_uri()}/"]}}
    )
    report = run_maintenance_job(a, MaintenanceJob.ORPHANS, spec, now_s=time.time())
    assert report.paths == (str(orphan),) and not orphan.exists()
    assert reference.rows(sql_catalog.name, "db.a") == _expected("a")


def test_the_catalog_index_finds_a_table_created_after_it_was_built(
    sql_catalog: SqlCatalog, reference: ReferenceReader, tmp_path: Path
) -> None:
    a = _table(sql_catalog, "a")
    b = _table(sql_catalog, "b")
    index = CatalogLocations(sql_catalog)
    _cleanup(a, catalog_locations=index)
    _cleanup(b, catalog_locations=index)
    # a's check read b, b's read a; the second check read nothing again.
    assert index.reads == 2

    _table(sql_catalog, "c", location=f"{a.location()}/c")
    _age(tmp_path / "warehouse")
    before = _files(tmp_path / "warehouse")
    with pytest.raises(MaintenanceRefused, match=r"table db\.c"):
        _cleanup(a, catalog_locations=index)
    assert _files(tmp_path / "warehouse") == before
    assert reference.rows(sql_catalog.name, "db.c") == _expected("c")
    assert index.reads == 3  # c, new; b unchanged

    # b commits: its new metadata file is read once the one read is older than olderThan.
    b.append(conform(b, pa.table({"id": pa.array([99], pa.int64()), "v": ["b99"]})))
    with pytest.raises(MaintenanceRefused, match=r"table db\.c"):
        _cleanup(a, catalog_locations=index)
    assert index.reads == 3
    later = index.others("db.a", str(a.metadata.table_uuid), time.time() + 2 * HOUR, HOUR)
    assert set(later.locations) == {"db.b", "db.c"} and index.reads == 4  # b; c is unchanged


def test_a_changed_table_is_read_again_once_the_file_last_seen_as_its_own_is_older_than_the_age(
    sql_catalog: SqlCatalog, tmp_path: Path
) -> None:
    a = _table(sql_catalog, "a")
    b = _table(sql_catalog, "b")
    index = CatalogLocations(sql_catalog)
    uuid, read_s = str(a.metadata.table_uuid), time.time()
    assert set(index.others("db.a", uuid, read_s, HOUR).locations) == {"db.b"} and index.reads == 1
    # Checks long after the read still find b's file current: it is current as of the last one.
    seen_s = read_s + 5 * HOUR
    index.others("db.a", uuid, seen_s, HOUR)
    # b moves its data path into a's location, after that check: files written there are younger.
    b.transaction().set_properties({"write.data.path": f"{a.location()}/data/b"}).commit_transaction()
    for now_s in (seen_s + 1, seen_s + HOUR - 1):
        assert index.others("db.a", uuid, now_s, HOUR).locations["db.b"].write_paths == ()
    assert index.reads == 1
    renewed = index.others("db.a", uuid, seen_s + HOUR + 1, HOUR)
    assert renewed.locations["db.b"].write_paths == (f"{a.location()}/data/b",) and index.reads == 2
    # Read again, the new file is b's: later checks read nothing more.
    index.others("db.a", uuid, seen_s + 3 * HOUR, HOUR)
    assert index.reads == 2
    # A table dropped is forgotten at the next check.
    sql_catalog.drop_table("db.b")
    assert index.others("db.a", uuid, seen_s + 3 * HOUR, HOUR).locations == {}


def test_where_the_catalog_tells_no_metadata_files_only_reads_older_than_the_age_are_renewed(
    sql_catalog: SqlCatalog,
) -> None:
    a = _table(sql_catalog, "a")
    b = _table(sql_catalog, "b")
    # As a REST catalog: identifiers listed, tables loaded one by one.
    index = CatalogLocations(sql_catalog, probe=lambda _catalog, _now_s: None)
    now = time.time()
    assert set(index.others("db.a", str(a.metadata.table_uuid), now, HOUR).locations) == {"db.b"}
    # b moves its data path into a's location: files it writes there are younger than the read.
    b.transaction().set_properties({"write.data.path": f"{a.location()}/data/b"}).commit_transaction()
    within = index.others("db.a", str(a.metadata.table_uuid), now + HOUR - 1, HOUR)
    assert within.locations["db.b"].write_paths == () and index.reads == 1
    renewed = index.others("db.a", str(a.metadata.table_uuid), now + HOUR + 1, HOUR)
    assert renewed.locations["db.b"].write_paths == (f"{a.location()}/data/b",) and index.reads == 2


def test_a_catalog_that_cannot_list_its_tables_leaves_the_table_location_and_says_so(
    sql_catalog: SqlCatalog, tmp_path: Path
) -> None:
    a = _table(sql_catalog, "a")
    _age(tmp_path / "warehouse")
    stray = _plant(_local(a.location()) / "data" / "stray.parquet")
    # pyiceberg's NoopCatalog lists nothing: it raises, as a catalog that forbids listing does.
    report = _cleanup(a, catalog_locations=CatalogLocations(NoopCatalog("forbidden")))
    assert report.paths == (str(stray),)
    assert (
        "other tables of the catalog not checked: the catalog's tables could not be listed" in report.summary
    )
