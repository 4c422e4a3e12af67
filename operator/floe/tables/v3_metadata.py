"""Let pyiceberg's catalogs write format v3 table metadata files.

pyiceberg 0.12 parses v3 metadata (``next-row-id``, snapshots' ``first-row-id`` and
``added-rows``) and applies a v3 snapshot update right, raising ``next-row-id``, but its
``TableMetadataV3.model_dump_json`` refuses to run, so a catalog that writes the metadata file
itself (SQL, Glue, Hive; not REST, where the server writes it) cannot commit to a v3 table.
The refusal is a blanket guard: serialized by pydantic as v1 and v2 metadata are, a metadata
file written by Iceberg Java 1.10 comes back with every field it had (`tests/test_v3_maintenance.py`
checks this on one Spark writes). Snapshots floe adds carry v3 manifests and manifest lists it
writes itself (`floe.commit.snapshot`); expiry's commit changes the metadata only. Importing
`floe.tables` turns this on, so every floe process has it before its first commit.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table.metadata import TableMetadataV3
from pyiceberg.typedef import IcebergBaseModel


def _metadata_json(
    self: TableMetadataV3,
    exclude_none: bool = True,
    exclude: Any | None = None,
    by_alias: bool = True,
    **kwargs: Any,
) -> str:
    return IcebergBaseModel.model_dump_json(
        self, exclude_none=exclude_none, exclude=exclude, by_alias=by_alias, **kwargs
    )


def allow_v3_metadata_writes() -> None:
    """Make pyiceberg serialize v3 table metadata (idempotent; for the whole process)."""
    if TableMetadataV3.model_dump_json is not _metadata_json:
        TableMetadataV3.model_dump_json = _metadata_json  # type: ignore[method-assign]
