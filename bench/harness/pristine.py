"""Pristine copies of a local table, restored before every timed run so that every engine starts alike."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from harness.warehouse import opened, sql_catalog_properties


@dataclass(frozen=True)
class Layout:
    """A live table and pristine copies of it, under one work directory, so every engine starts alike.

    The live warehouse always sits at the same path (Iceberg metadata holds absolute
    paths), but each restore gives its SQLite database a new file and a new catalog
    name: Spark keeps a catalog, and its JDBC connection, for the session's life, so a
    name must never see its database replaced.
    """

    root: Path

    @property
    def live(self) -> Path:
        """The directory engines work on: ``warehouse/`` and one ``<catalog>.db`` per restore."""
        return self.root / "live"

    @property
    def warehouse_uri(self) -> str:
        """The live warehouse, as the URI both pyiceberg and Iceberg Java are given."""
        return (self.live / "warehouse").as_uri()

    def database(self, name: str) -> Path:
        """The SQLite database of catalog ``name``."""
        return self.live / f"{name}.db"

    def catalog(self, name: str) -> contextlib.AbstractContextManager[SqlCatalog]:
        """The pyiceberg catalog ``name`` over the live warehouse, `opened`."""
        self.live.mkdir(parents=True, exist_ok=True)
        properties = sql_catalog_properties(self.database(name), self.live / "warehouse")
        return opened(SqlCatalog(name, **properties))

    def save(self, copy: str, name: str) -> None:
        """Keep the live warehouse and catalog ``name``'s database as the pristine ``copy``."""
        pristine = self.root / f"pristine-{copy}"
        _link_tree(self.live / "warehouse", pristine / "warehouse")
        shutil.copyfile(self.database(name), pristine / "catalog.db")

    def restore(self, copy: str, name: str) -> None:
        """Make the live directory the pristine ``copy``, with its catalog now called ``name``."""
        pristine = self.root / f"pristine-{copy}"
        if self.live.exists():
            shutil.rmtree(self.live)
        _link_tree(pristine / "warehouse", self.live / "warehouse")
        shutil.copyfile(pristine / "catalog.db", self.database(name))
        with closing(sqlite3.connect(self.database(name))) as db, db:
            for catalog_table in ("iceberg_tables", "iceberg_namespace_properties"):
                db.execute(f"UPDATE {catalog_table} SET catalog_name = ?", (name,))


def _link_tree(source: Path, target: Path) -> None:
    """Copy a warehouse with hard links: Iceberg writers never change a file once written."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, copy_function=os.link)
