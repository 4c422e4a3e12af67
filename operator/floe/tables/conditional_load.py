"""Loading a table only when it changed, where its catalog can say so without sending it.

A REST catalog answers a table load with an ``ETag`` (Iceberg 1.11's server: a hash of the
metadata file's location); asked again with ``If-None-Match`` set to it, it answers 304 Not
Modified, with no body, while that file is still the table's current one. A refresh that gets
the 304 has nothing to read: metadata files never change, so the snapshot, schema and properties
are those it last evaluated. The full load it saves is a JSON document that grows with the
table's snapshots and schemas, parsed and validated on the operator's one core, every refresh of
every table. Catalogs without ETags (SQL, whose tables `metadata_probe` answers for at once; Glue;
Hive; REST servers that send none) are loaded in full.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import AuthorizationExpiredError, NoSuchTableError, UnauthorizedError
from pyiceberg.table import Table
from requests import HTTPError

from floe.tables.catalog import table_load_errors
from floe.tables.pyiceberg_compat import raise_rest_error, rest_load_response, rest_table

NOT_MODIFIED = 304


@dataclass(frozen=True)
class LoadedTable:
    """What a conditional load found: the table, or None when it is unchanged since the ETag
    given; and the ETag that names what was loaded, where the catalog sent one."""

    table: Table | None
    etag: str | None


def load_table_if_changed(catalog: Catalog, identifier: str, etag: str | None) -> LoadedTable:
    """Load `identifier` (``namespace.table``) unless the catalog says it is unchanged since
    `etag` (from an earlier `LoadedTable`); raises what `load_table` raises."""
    with table_load_errors(catalog, identifier):
        if isinstance(catalog, RestCatalog):
            return _load_rest_table(catalog, identifier, etag)
        return LoadedTable(catalog.load_table(identifier), None)


def _load_rest_table(catalog: RestCatalog, identifier: str, etag: str | None) -> LoadedTable:
    # pyiceberg's own load_table, with the request's header added and the response's read.
    response = rest_load_response(catalog, identifier, etag)
    if response.status_code == NOT_MODIFIED and etag:
        return LoadedTable(None, etag)
    try:
        response.raise_for_status()
    except HTTPError as exc:
        try:
            raise_rest_error(exc, {404: NoSuchTableError})
        except (UnauthorizedError, AuthorizationExpiredError):
            # pyiceberg's load refreshes an expired token and tries again.
            return LoadedTable(catalog.load_table(identifier), None)
    return LoadedTable(rest_table(catalog, identifier, response), response.headers.get("ETag"))
