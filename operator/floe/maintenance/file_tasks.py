"""Maintenance work a group's executors do for the operator: listing a big table's files
for orphans, and deleting files, so neither holds the operator's one core for minutes.

The specs travel through the task service beside the rewrite tasks (wire format v1; an
older optimizer refuses them: ``extra="forbid"``). Like a rewrite task, a file task needs
no catalog, only the table's FileIO: its properties travel in the task, with the storage
credentials of a catalog Secret left to the optimizer's mounted copy (`storage_secret`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.serializers import FromInputFile

from floe.kit.files import delete_paths
from floe.kit.redaction import MAX_SECRET_NAME, STORAGE_SECRET_NAME
from floe.maintenance.orphans import find_orphans, referenced_locations
from floe.tables.listing import fs_path, list_files

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

    task_id: str
    orphans: list[OrphanFile]
    old_files: int = Field(ge=0, description="files listed that were old enough to be orphans")


class DeleteFilesResult(_Wire):
    """How many files a delete task removed."""

    task_id: str
    deleted: int = Field(ge=0)


FileTaskResult = OrphanScanResult | DeleteFilesResult


def run_file_task(spec: FileTaskSpec, io_properties: Mapping[str, str]) -> FileTaskResult:
    """Run `spec` with the complete FileIO `io_properties` (its own plus mounted credentials)."""
    if isinstance(spec, DeleteFilesSpec):
        io = load_file_io(dict(io_properties), location=spec.paths[0])
        delete_paths(io, spec.paths, workers=8, on_error="raise")
        return DeleteFilesResult(task_id=spec.task_id, deleted=len(spec.paths))
    io = PyArrowFileIO(dict(io_properties))
    listed = list_files(io, spec.roots)
    # The metadata is read after the listing, as the local cleanup does; the operator then
    # checks what commits made since this metadata file reference (`referenced_since`).
    metadata = FromInputFile.table_metadata(io.new_input(spec.metadata_location))
    referenced = {fs_path(io, p) for p in referenced_locations(io, metadata, spec.metadata_location)}
    found = find_orphans(
        listed, referenced, cutoff_ns=spec.cutoff_ns, protected_prefixes=spec.protected_prefixes
    )
    return OrphanScanResult(
        task_id=spec.task_id,
        orphans=[
            OrphanFile(location=listed[info], path=info.path, size=info.size or 0) for info in found.orphans
        ],
        old_files=found.old_files,
    )
