"""Catalog properties from Secrets.

A table's ``spec.catalog.secretRef`` names a Secret in the table's namespace whose keys
are pyiceberg catalog properties. The values reach the engine only; every status field
and Event message passes through a `floe.tables.credentials.Redactor`, and the operator's
log handlers filter too, because a catalog error can quote its URI, password included.
"""

from __future__ import annotations

from floe.api.models import OptimizedTable


def with_catalog_properties(resource: OptimizedTable, properties: dict[str, str]) -> OptimizedTable:
    """The table with the Secret's properties under its inline ones (inline wins: it is explicit)."""
    catalog = resource.spec.catalog
    merged = {**properties, **catalog.properties}
    spec = resource.spec.model_copy(update={"catalog": catalog.model_copy(update={"properties": merged})})
    return resource.model_copy(update={"spec": spec})
