"""The file tasks of maintenance, as they travel to a group's executors: listing a big table's
files for orphans, and deleting files, so neither holds the operator's one core for minutes.
Executors run them with `floe.maintenance.executor.run_file_task`.

The specs travel through the task service beside the rewrite tasks (wire format v1; an
older optimizer refuses them: ``extra="forbid"``). Like a rewrite task, a file task needs
no catalog, only the table's FileIO: its properties travel in the task, with the storage
credentials of a catalog Secret left to the optimizer's mounted copy (`storage_secret`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from floe.kit.redaction import MAX_SECRET_NAME, STORAGE_SECRET_NAME

DELETE_BATCH = 2000
"""Paths per delete task: a task is retried whole, and deleting a path twice is harmless."""


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _FileTaskBase(_Wire):
    task_id: str
    io_properties: dict[str, str] = Field(
        description="pyiceberg FileIO properties (PyArrowFileIO); never the catalog's own authentication"
    )
    storage_secret: str | None = Field(
        default=None,
        max_length=MAX_SECRET_NAME,
        pattern=STORAGE_SECRET_NAME,
        description="the catalog Secret, mounted in the optimizer's pods, whose storage credentials "
        "complete `io_properties`",
    )


class OrphanScanSpec(_FileTaskBase):
    """List a table's locations, then read one metadata file, and return the orphans found:
    what `floe.maintenance.orphans.remove_orphan_files` does before deleting."""

    kind: Literal["orphan-scan"] = "orphan-scan"
    roots: dict[str, str] = Field(min_length=1, description="FileSystem path → location to list")
    metadata_location: str = Field(description="the metadata file read after the listing")
    cutoff_ns: int = Field(description="only files modified before this (ns since the epoch) are orphans")
    protected_prefixes: list[str] = Field(default_factory=list, description="file names never removed")


class DeleteFilesSpec(_FileTaskBase):
    """Delete files (a missing one counts as deleted)."""

    kind: Literal["delete-files"] = "delete-files"
    paths: list[str] = Field(min_length=1, max_length=DELETE_BATCH)


FileTaskSpec = OrphanScanSpec | DeleteFilesSpec


class OrphanFile(_Wire):
    """A file found orphaned: its location (for the FileIO), FileSystem path and size."""

    location: str
    path: str
    size: int


class OrphanScanResult(_Wire):
    """What an orphan scan found."""

    kind: Literal["orphan-scan"] = Field(
        default="orphan-scan",
        description="what this is the result of; left out only by optimizers older than the field",
    )
    task_id: str
    orphans: list[OrphanFile]
    old_files: int = Field(ge=0, description="files listed that were old enough to be orphans")


class DeleteFilesResult(_Wire):
    """How many files a delete task removed."""

    kind: Literal["delete-files"] = Field(
        default="delete-files",
        description="what this is the result of; left out only by optimizers older than the field",
    )
    task_id: str
    deleted: int = Field(ge=0)


FileTaskResult = OrphanScanResult | DeleteFilesResult
