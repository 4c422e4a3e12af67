"""Tables other engines left in a state floe refuses, made the way those engines commit."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from uuid import uuid4

from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import text

UNKNOWN_SORT = "sort order 1 with the unknown transform zorder[4]"
"""How floe names the sort order `unknown_sort_order` gives a table."""


def commit_metadata(catalog: SqlCatalog, name: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """Commit an edited copy of table ``db.<name>``'s metadata the way another engine commits to
    the SQL catalog (a new metadata file, the catalog's pointer moved to it), so that pyiceberg
    need not be able to read the result."""
    with catalog.engine.begin() as connection:
        current = connection.execute(
            text("SELECT metadata_location FROM iceberg_tables WHERE table_name = :name"), {"name": name}
        ).scalar_one()
        # Spark writes file:/path, pyiceberg file:///path.
        document = json.loads(Path(urlparse(current).path).read_text())
        edit(document)
        location = Path(urlparse(document["location"]).path) / "metadata" / f"{uuid4()}.metadata.json"
        location.write_text(json.dumps(document))
        connection.execute(
            text("UPDATE iceberg_tables SET metadata_location = :new WHERE table_name = :name"),
            {"new": location.as_uri(), "name": name},
        )


def unknown_sort_order(document: dict[str, Any]) -> None:
    """A metadata edit: a default sort order with a transform floe does not know."""
    field = {"transform": "zorder[4]", "source-id": 1, "direction": "asc", "null-order": "nulls-first"}
    document["sort-orders"].append({"order-id": 1, "fields": [field]})
    document["default-sort-order-id"] = 1
