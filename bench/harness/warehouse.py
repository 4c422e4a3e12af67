"""Local Iceberg tables: SQLite catalogs over file warehouses, and what a table's live files hold."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from floe.planning.files import FileKind
from floe.tables.scan import scan_table


def sql_catalog_properties(database: Path, warehouse: Path) -> dict[str, str]:
    """The pyiceberg properties of a SQLite catalog in ``database`` over the ``warehouse`` directory."""
    return {
        "type": "sql",
        "uri": f"sqlite:///{database.resolve()}",
        "warehouse": warehouse.resolve().as_uri(),
    }


@contextlib.contextmanager
def opened(catalog: SqlCatalog) -> Iterator[SqlCatalog]:
    """Use ``catalog``, then close its database connections (another process may replace the file)."""
    try:
        yield catalog
    finally:
        catalog.engine.dispose()


def live_files(table: Table) -> dict[str, int]:
    """Counts and bytes of the live files of the table's current snapshot."""
    files = scan_table(table).files
    deletes = files.delete_files
    return {
        "data_files": len(files.data_files),
        "data_bytes": sum(f.size_bytes for f in files.data_files),
        "records": sum(f.record_count for f in files.data_files),
        "pos_delete_files": sum(1 for f in deletes if f.kind == FileKind.POSITION_DELETES),
        "eq_delete_files": sum(1 for f in deletes if f.kind == FileKind.EQUALITY_DELETES),
        "delete_bytes": sum(f.size_bytes for f in deletes),
        "delete_records": sum(f.record_count for f in deletes),
    }
