"""Open pyiceberg catalogs and tables, turning their failures into errors a user can act on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from floe.api.table import CatalogRef
from floe.tables.request_budget import BudgetExhausted
from floe.tables.support import UnsupportedTableError, unreadable_schema_type


class TableAccessError(RuntimeError):
    """Base of the errors raised when a catalog or table cannot be used."""


class CatalogConfigError(TableAccessError):
    """The catalog configuration is missing or malformed."""


class CatalogUnreachable(TableAccessError):
    """The catalog could not be contacted or opened."""


class TableNotFound(TableAccessError):
    """The catalog has no such table."""


class NotAnIcebergTable(TableAccessError):
    """A path was given where an Iceberg table identifier is expected."""


def catalog_ref_from_file(path: Path) -> CatalogRef:
    """Read a catalog config file.

    Two layouts are accepted: pyiceberg's own ``.pyiceberg.yaml`` (``catalog: {NAME: {props}}``,
    first catalog used) or a flat mapping with ``name`` plus the properties. In both, a top-level
    ``secretProperties`` lists further property names whose values are secret (`CatalogRef`).
    """
    if not path.is_file():
        raise CatalogConfigError(f"catalog config {path}: no such file")
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CatalogConfigError(f"catalog config {path}: not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise CatalogConfigError(f"catalog config {path}: expected a mapping of catalog properties")
    marked = document.pop("secretProperties", [])
    name, properties = _named_properties(path, document)
    try:
        return CatalogRef(name=name, properties=properties, secret_properties=marked)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise CatalogConfigError(f"catalog config {path}: {where}: {error['msg']}") from exc


def _named_properties(path: Path, document: dict[Any, Any]) -> tuple[str, dict[str, str]]:
    if isinstance(document.get("catalog"), dict):
        catalogs = document["catalog"]
        if not catalogs:
            raise CatalogConfigError(f"catalog config {path}: 'catalog' names no catalog")
        name, props = next(iter(catalogs.items()))
        if not isinstance(props, dict):
            raise CatalogConfigError(f"catalog config {path}: catalog {name!r} must be a mapping")
        return str(name), {str(k): str(v) for k, v in props.items()}
    props = {str(k): str(v) for k, v in document.items()}
    name = props.pop("name", "")
    if not name:
        raise CatalogConfigError(f"catalog config {path}: missing 'name' (the catalog's name)")
    return name, props


def open_catalog(ref: CatalogRef) -> Catalog:
    """Load the catalog and check it answers, so a dead catalog fails here with its name."""
    if not ref.properties:
        raise CatalogConfigError(f"catalog {ref.name!r} has no properties (type, uri, warehouse, ...)")
    try:
        catalog = load_catalog(ref.name, **ref.properties)
        catalog.list_namespaces()
    except Exception as exc:
        raise CatalogUnreachable(f"catalog {ref.name!r} is unreachable: {short_error(exc)}") from exc
    return catalog


def load_table(catalog: Catalog, identifier: str) -> Table:
    """Load a table by ``namespace.table``; paths and unknown tables get specific errors, and a
    table whose schema pyiceberg cannot read is `UnsupportedTableError`."""
    with table_load_errors(catalog, identifier):
        return catalog.load_table(identifier)


@contextmanager
def table_load_errors(catalog: Catalog, identifier: str) -> Iterator[None]:
    """Check `identifier`, then turn what loading it from `catalog` raises into the errors of
    `load_table`."""
    if "/" in identifier or identifier.startswith("."):
        raise NotAnIcebergTable(_describe_path(identifier))
    if "." not in identifier:
        raise TableNotFound(f"{identifier!r} is not a table identifier: expected namespace.table")
    try:
        yield
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        raise TableNotFound(f"table {identifier!r} not found in catalog {catalog.name!r}") from exc
    except BudgetExhausted:
        raise  # not an error: the table is asked about at a later round
    except Exception as exc:
        unreadable = unreadable_schema_type(exc)
        if unreadable is not None:
            # The catalog answered; the table's schema has a type pyiceberg cannot parse.
            raise UnsupportedTableError(identifier, [f"the column type {unreadable!r}"]) from exc
        raise CatalogUnreachable(
            f"catalog {catalog.name!r} failed to load {identifier!r}: {short_error(exc)}"
        ) from exc


def _describe_path(identifier: str) -> str:
    path = Path(identifier.removeprefix("file://"))
    metadata = path / "metadata"
    if metadata.is_dir() and any(metadata.glob("*.metadata.json")):
        return (
            f"{identifier} is an Iceberg table location, not a catalog identifier: floe commits through a "
            "catalog, so register the table in one and pass namespace.table"
        )
    return f"{identifier} is not an Iceberg table: expected a catalog identifier namespace.table"


def short_error(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
