"""Catalogs of many small tables: one SQL catalog (SQLite), one small file per table; or the
same tables in any catalog (`fill_catalog`).

The point of such a catalog is per-table overhead (refreshes, status, maintenance), not data:
each table holds 100 rows. Made once per table count and kept; benchmarks that write to the
tables work on a copy.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog


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
    from pyiceberg.catalog.sql import SqlCatalog

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "catalog.db").unlink(missing_ok=True)
    properties = catalog_properties(directory)
    fill_catalog(SqlCatalog("lake", **{k: v for k, v in properties.items() if k != "type"}), tables)
    (directory / "done").write_text(str(tables))


def fill_catalog(catalog: Catalog, tables: int, snapshots: int = 1, workers: int = 1) -> None:
    """Create namespace ``db`` and `tables` tables in it, each with `snapshots` appends of a file
    of 100 rows (committed at once: the metadata of a table with that history), by `workers`
    threads (a REST catalog's server works while the client waits: 10,000 tables one by one take
    a quarter of an hour)."""
    import pyarrow as pa

    catalog.create_namespace("db")
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array([str(i) for i in range(100)])})
    started = time.perf_counter()

    def make(first: int) -> None:
        for index in range(first, tables, workers):
            table = catalog.create_table(table_name(index), rows.schema)
            with table.transaction() as transaction:
                for _ in range(snapshots):
                    transaction.append(rows)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(make, range(workers)))
    print(f"made {tables} tables in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def table_name(index: int) -> str:
    """The identifier of the catalog's table number `index`."""
    return f"db.t{index:05d}"
