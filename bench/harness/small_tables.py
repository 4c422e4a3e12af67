"""Catalogs of many small tables: one SQL catalog (SQLite), one small file per table.

The point of such a catalog is per-table overhead (refreshes, status, maintenance), not data:
each table holds 100 rows. Made once per table count and kept; benchmarks that write to the
tables work on a copy.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def catalog_properties(directory: Path) -> dict[str, str]:
    """The pyiceberg properties of the catalog kept under `directory`."""
    return {
        "type": "sql",
        "uri": f"sqlite:///{directory}/catalog.db",
        "warehouse": (directory / "wh").as_uri(),
    }


def make_catalog(directory: Path, tables: int) -> None:
    """The catalog of `tables` tables ``db.t00000``... with one small file each, made once."""
    if (directory / "done").exists():
        return
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "catalog.db").unlink(missing_ok=True)
    properties = catalog_properties(directory)
    catalog = SqlCatalog("lake", **{k: v for k, v in properties.items() if k != "type"})
    catalog.create_namespace("db")
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array([str(i) for i in range(100)])})
    started = time.perf_counter()
    for index in range(tables):
        catalog.create_table(table_name(index), rows.schema).append(rows)
    print(f"made {tables} tables in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    (directory / "done").write_text(str(tables))


def table_name(index: int) -> str:
    """The identifier of the catalog's table number `index`."""
    return f"db.t{index:05d}"
