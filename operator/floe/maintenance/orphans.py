"""Orphan-file cleanup: files under the table's locations that no metadata references.

Listing goes through the pyarrow FileSystem behind the table's PyArrowFileIO
(`floe.tables.listing`), so local directories and S3-style object stores are handled alike,
and paths are compared in the FileSystem's own form.

What keeps concurrent work safe:
- the listing happens before the metadata is read, so every file a commit made before
  the listing finished is known to be referenced;
- only files older than the safety age (at least `MIN_ORPHAN_AGE_S`) go, so files a
  writer or an optimizing process is still writing, not yet committed, stay;
- files whose name starts with a protected prefix (an in-flight process's output) stay.
Hidden files ("." or "_" names), as in Iceberg Java, are not Iceberg's and stay, except a
Hadoop checksum ``.name.crc`` whose ``name`` is gone or removed with it.
"""

from __future__ import annotations

from collections.abc import Collection

from pyarrow.fs import FileInfo
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from floe.api.models import MIN_ORPHAN_AGE_S
from floe.maintenance.reachable import delete_files, referenced_files
from floe.tables.listing import fs_path, list_files
from floe.tables.maintenance_job import MaintenanceJob, MaintenanceReport

# Hadoop-catalog tables point at their current metadata with this file; no metadata names it.
VERSION_HINT = "version-hint.text"


def remove_orphan_files(
    table: Table,
    *,
    older_than_s: float,
    now_s: float,
    protected_prefixes: Collection[str] = (),
    dry_run: bool = False,
) -> MaintenanceReport:
    """Remove files under `table`'s locations that no metadata references and that are old enough.

    A file is removed when its modification time is more than `older_than_s` before
    `now_s` (seconds since the epoch), its name starts with none of `protected_prefixes`,
    and neither any snapshot (manifest lists, manifests, data and delete files, deleted
    entries included), nor the metadata log, the current metadata file or the statistics
    files reference it. Raises ValueError when `older_than_s` is below `MIN_ORPHAN_AGE_S`
    and TypeError when the table's FileIO is not pyiceberg's PyArrowFileIO. A dry run
    lists the orphans in `paths` and removes nothing.
    """
    if older_than_s < MIN_ORPHAN_AGE_S:
        raise ValueError(
            f"older_than_s={older_than_s:g} is below the minimum of {MIN_ORPHAN_AGE_S:g} s: "
            "younger files may belong to a commit still being written"
        )
    io = table.io
    if not isinstance(io, PyArrowFileIO):
        raise TypeError(
            f"orphan cleanup lists files through PyArrowFileIO; table {table.name()} uses "
            f"{type(io).__name__} (set py-io-impl=pyiceberg.io.pyarrow.PyArrowFileIO)"
        )
    table.refresh()
    cutoff_ns = int((now_s - older_than_s) * 1e9)
    listed = list_files(io, _roots(table, io))
    old = [
        info
        for info in listed
        if info.mtime_ns is not None
        and info.mtime_ns < cutoff_ns
        and info.base_name != VERSION_HINT
        and not info.base_name.startswith(tuple(protected_prefixes))
    ]
    # Read the metadata only now, after the listing: see the module docstring.
    table.refresh()
    referenced = {fs_path(io, p) for p in _referenced_locations(table)}
    unreferenced = {info.path for info in old if not _hidden(info) and info.path not in referenced}
    # A Hadoop checksum goes with its file: when that is gone or going, so is the checksum.
    existing = {info.path for info in listed}
    unreferenced.update(
        info.path
        for info in old
        if (checked := _checksummed_path(info)) is not None
        and (checked not in existing or checked in unreferenced)
    )
    orphans = sorted((info for info in old if info.path in unreferenced), key=lambda i: i.path)
    paths = tuple(listed[info] for info in orphans)
    if not dry_run:
        delete_files(io, paths)
    count, size = len(orphans), sum(info.size or 0 for info in orphans)
    verb = "would remove" if dry_run else "removed"
    return MaintenanceReport(
        job=MaintenanceJob.ORPHANS,
        summary=f"{verb} {count} orphan files ({size} bytes) of {len(old)} files older than "
        f"{older_than_s:g} s",
        files_removed=count,
        bytes_removed=size,
        dry_run=dry_run,
        paths=paths,
    )


def _hidden(info: FileInfo) -> bool:
    """Names starting with "." or "_" are not Iceberg files (checksums, markers): never orphans."""
    name: str = info.base_name
    return name.startswith((".", "_"))


def _checksummed_path(info: FileInfo) -> str | None:
    """For a Hadoop checksum ``dir/.name.crc`` (Iceberg Java writes them locally), ``dir/name``."""
    name: str = info.base_name
    if not (name.startswith(".") and name.endswith(".crc")):
        return None
    return f"{info.path[: -len(name)]}{name[1:-4]}"


def _roots(table: Table, io: PyArrowFileIO) -> dict[str, str]:
    """The locations to list (the table's, and data/metadata paths set outside it), by FileSystem path."""
    properties = table.metadata.properties
    candidates = [
        table.metadata.location,
        *(properties[key] for key in ("write.data.path", "write.metadata.path") if key in properties),
    ]
    roots: dict[str, str] = {}
    for location in sorted(candidates, key=lambda c: len(fs_path(io, c))):
        path = fs_path(io, location)
        if not any(path == root or path.startswith(root + "/") for root in roots):
            roots[path] = location
    return roots


def _referenced_locations(table: Table) -> set[str]:
    """Every location the table's metadata references, as written there."""
    metadata = table.metadata
    found = referenced_files(table.io, metadata.snapshots, live_only=False).all_paths()
    found.update(entry.metadata_file for entry in metadata.metadata_log)
    found.update(s.statistics_path for s in (*metadata.statistics, *metadata.partition_statistics))
    found.add(table.metadata_location)
    return found
