"""The executor side of maintenance: running a file task (`floe.protocol.file_tasks`) on one of
a group's executors, with the table's FileIO and no catalog."""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.serializers import FromInputFile

from floe.kit.files import delete_paths
from floe.maintenance.orphans import find_orphans, referenced_locations
from floe.protocol.file_tasks import (
    DeleteFilesResult,
    DeleteFilesSpec,
    FileTaskResult,
    FileTaskSpec,
    OrphanFile,
    OrphanScanResult,
)
from floe.tables.listing import fs_path, list_files


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
