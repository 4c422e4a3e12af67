"""The files a process wrote that no snapshot will ever reference, found by name and removed.

Every file a task writes is named ``<process id>-tNNNN-...`` in its task's output directory. The
results the task service accepted say which of them a commit takes; the others belong to
attempts that were lost (an executor or driver killed mid-task, a superseded attempt, a failed
task) and would otherwise wait for orphan cleanup, days later. Once a process has committed or
failed, `remove_uncommitted_outputs` lists each output directory for the process's names and
deletes what the commit did not take.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection

from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO

from floe.kit.files import delete_quietly
from floe.tables.listing import fs_path, list_files


def remove_uncommitted_outputs(
    io: FileIO,
    process_id: str,
    output_dirs: Collection[str],
    committed: Collection[str],
    reported: Collection[str] = (),
) -> list[str]:
    """Delete the files process `process_id` wrote in `output_dirs` that are not in `committed`;
    return their locations.

    `reported` are files the accepted results named: without a listing FileIO (not
    PyArrowFileIO) only those can be found, and those not committed are deleted. Either way
    only names of the process's own files in `output_dirs` are ever deleted.
    """
    prefix = f"{process_id}-t"
    if not isinstance(io, PyArrowFileIO):
        own_dirs = {directory.rstrip("/") for directory in output_dirs}
        removed = sorted(
            path
            for path in set(reported) - set(committed)
            if posixpath.dirname(path) in own_dirs and posixpath.basename(path).startswith(prefix)
        )
    else:
        keep = {fs_path(io, path) for path in committed}
        directories = {fs_path(io, directory): directory for directory in output_dirs}
        removed = sorted(
            location
            for info, location in list_files(io, directories, recursive=False).items()
            if info.base_name.startswith(prefix) and info.path not in keep
        )
    for location in removed:
        delete_quietly(io, location)
    return removed
