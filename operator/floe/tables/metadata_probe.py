"""Where each table's current metadata file is, for many tables in one catalog call.

A refresh that finds a table's metadata where its last evaluation read it has nothing to do:
metadata files are immutable, so the snapshot, schema and properties are the ones evaluated.
Loading the table to learn that (a catalog lookup, then reading and validating the metadata
file) is most of what an idle table costs the engine (``bench/catalog_scale.py``); one query
that returns the locations of all of a catalog's tables costs a few microseconds per table.

Only catalogs that can answer for many tables at once are probed: the SQL catalog (the JDBC
catalog's ``iceberg_tables`` table, shared with Iceberg Java). Others (REST, Glue, Hive) answer
one table per call: a REST catalog that sends ETags answers an unchanged table with 304 Not
Modified (`conditional_load`), the rest are loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from sqlalchemy import select


@dataclass(frozen=True)
class Probe:
    """What one probe of a catalog found, and when."""

    locations: Mapping[str, str]
    """Each table (``namespace.table``) and its metadata file."""
    taken_s: float
    """No later than the probe: each file was its table's current one then."""


def metadata_locations(catalog: Catalog) -> dict[str, str] | None:
    """Each table of `catalog` (``namespace.table``) and its current metadata file; None when the
    catalog cannot tell for all its tables in one call. Raises what the catalog raises."""
    if not isinstance(catalog, SqlCatalog):
        return None
    query = select(IcebergTables.table_namespace, IcebergTables.table_name, IcebergTables.metadata_location)
    # A plain connection, not an ORM session: rows as tuples, without the ORM's loading per row.
    with catalog.engine.connect() as connection:
        rows = connection.execute(query.where(IcebergTables.catalog_name == catalog.name)).all()
        return {f"{namespace}.{name}": location for namespace, name, location in rows if location}


def fresh_probe(catalog: Catalog, now_s: float) -> Probe | None:
    """`metadata_locations` of `catalog` asked now (`now_s`); None where it cannot tell."""
    locations = metadata_locations(catalog)
    return None if locations is None else Probe(locations, now_s)
