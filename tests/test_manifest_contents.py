"""A scan decodes only the manifests it has not read before, and finds what a full scan finds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from pyspark.sql import SparkSession

from floe.local.reference_reader import qualified_name
from floe.planning.files import ContentFile
from floe.tables.manifest_contents import ManifestContent, ManifestContents
from floe.tables.scan import ScannedTable, scan_table

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "cat", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="cat"))


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[SqlCatalog]:
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh").as_uri())
    catalog.create_namespace("db")
    yield catalog
    catalog.engine.dispose()


def _append(table: Table, first: int) -> None:
    ids = list(range(first, first + 4))
    table.append(pa.table({"id": pa.array(ids, pa.int64()), "cat": [str(i % 2) for i in ids]}))


def _same(cached: ScannedTable, full: ScannedTable) -> None:
    """The scan through the store finds exactly what a scan without one finds."""
    assert cached.files == full.files
    assert cached.partition_records == full.partition_records
    assert cached.file_formats == full.file_formats


def test_a_scan_after_an_append_decodes_only_the_appended_manifest(catalog: SqlCatalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, partition_spec=SPEC)
    for first in range(0, 20, 4):
        _append(table, first)
    contents = ManifestContents()
    _same(scan_table(table, contents=contents), scan_table(table, contents=None))
    assert (contents.hits, contents.misses) == (0, 5)

    _append(table, 20)
    table = catalog.load_table("db.t")
    scanned = scan_table(table, contents=contents)
    _same(scanned, scan_table(table, contents=None))
    assert (contents.hits, contents.misses) == (5, 6)
    # Files of one partition share one key, whether their manifest was read now or before.
    keys = {id(f.partition) for f in scanned.files.data_files if f.partition.values == ("0",)}
    assert len(keys) == 1 and len(scanned.files.data_files) == 12


def test_a_delete_that_rewrites_a_manifest_is_seen(catalog: SqlCatalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, partition_spec=SPEC)
    for first in range(0, 12, 4):
        _append(table, first)
    contents = ManifestContents()
    before = scan_table(table, contents=contents)
    # Copy-on-write: the files holding id 5 are replaced, their manifests rewritten.
    table.delete(EqualTo("id", 5))
    table = catalog.load_table("db.t")
    after = scan_table(table, contents=contents)
    _same(after, scan_table(table, contents=None))
    assert after.files.data_files != before.files.data_files
    assert contents.hits > 0


def test_the_store_keeps_the_most_recently_used_manifests_up_to_its_bound() -> None:
    contents = ManifestContents(max_files=4)

    def manifest(files: int) -> ManifestContent:
        file = ContentFile.__new__(ContentFile)
        return ManifestContent((file,) * files, (), frozenset())

    contents.put("a", 2, manifest(2))
    contents.put("b", 2, manifest(1))
    assert contents.get("a", 2) is not None  # a is now the most recently used
    contents.put("c", 2, manifest(2))  # 5 files: b goes
    assert contents.get("b", 2) is None and contents.files == 4
    assert contents.get("a", 3) is None  # read under another format version: not the same
    contents.put("huge", 2, manifest(5))  # more than the whole store: not kept, nothing evicted
    assert contents.get("huge", 2) is None and contents.files == 4
    contents.put("a", 2, manifest(1))  # read again: replaced, counted once
    assert contents.files == 3


def test_a_v3_tables_row_ids_and_deletion_vectors_come_back_from_the_store(
    v3_table: SqlCatalog, spark: SparkSession
) -> None:
    contents = ManifestContents()
    table = v3_table.load_table("db.t")
    first = scan_table(table, contents=contents)
    _same(first, scan_table(table, contents=None))
    name = qualified_name(v3_table.name, "db.t")
    spark.sql(f"INSERT INTO {name} VALUES (1000, '0', 1.0)")
    spark.sql(f"DELETE FROM {name} WHERE id = 3")
    table = v3_table.load_table("db.t")
    scanned = scan_table(table, contents=contents)
    _same(scanned, scan_table(table, contents=None))
    assert contents.hits > 0
    assert all(f.first_row_id is not None for f in scanned.files.data_files)
    assert any(f.content_offset is not None for f in scanned.files.delete_files)
