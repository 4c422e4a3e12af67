"""Orphan-file cleanup: files under the table's locations that no metadata references.

Only locations the table owns are listed (`floe.maintenance.orphan_roots`: the table location,
and places it writes to that the user names, none shared with another table of the catalog), and
a table whose ``gc.enabled`` is false is refused, as Iceberg Java's DeleteOrphanFiles refuses it.

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

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from pyarrow.fs import FileInfo
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from floe.api.table import MIN_ORPHAN_AGE_S
from floe.kit.files import delete_paths
from floe.maintenance.job import MaintenanceJob, MaintenanceReport, require_gc_enabled
from floe.maintenance.orphan_roots import OrphanRoots, orphan_roots
from floe.maintenance.reachable import referenced_files
from floe.tables.catalog_locations import CatalogLocations
from floe.tables.listing import fs_path, list_files

# Hadoop-catalog tables point at their current metadata with this file; no metadata names it.
VERSION_HINT = "version-hint.text"


def remove_orphan_files(
    table: Table,
    *,
    older_than_s: float,
    now_s: float,
    protected_prefixes: Collection[str] = (),
    dry_run: bool = False,
    locations: Sequence[str] = (),
    catalog_locations: CatalogLocations | None = None,
) -> MaintenanceReport:
    """Remove files under `table`'s locations that no metadata references and that are old enough.

    The table location is listed, and the named `locations` outside it where the table writes;
    each is checked against the other tables of the catalog (`catalog_locations`, kept between
    runs; without it, the catalog is read now). Raises `MaintenanceRefused`, before anything is
    listed or deleted, for a table whose ``gc.enabled`` is false, a named location the table does
    not write to, and a location another table uses (`floe.maintenance.orphan_roots`).

    A file is removed when its modification time is more than `older_than_s` before
    `now_s` (seconds since the epoch), its name starts with none of `protected_prefixes`,
    and neither any snapshot (manifest lists, manifests, data and delete files, deleted
    entries included), nor the metadata log, the current metadata file or the statistics
    files reference it. Raises ValueError when `older_than_s` is below `MIN_ORPHAN_AGE_S`
    and TypeError when the table's FileIO is not pyiceberg's PyArrowFileIO. A dry run
    lists the orphans in `paths` and removes nothing.
    """
    io, roots = cleanup_roots(table, older_than_s, now_s, locations, catalog_locations)
    cutoff_ns = int((now_s - older_than_s) * 1e9)
    listed = list_files(io, roots.roots)
    # Read the metadata only now, after the listing: see the module docstring.
    table.refresh()
    # GC turned off during the listing: refused all the same.
    require_gc_enabled(".".join(table.name()), MaintenanceJob.ORPHANS, table.metadata.properties)
    referenced = {fs_path(io, p) for p in referenced_locations(io, table.metadata, table.metadata_location)}
    found = find_orphans(listed, referenced, cutoff_ns=cutoff_ns, protected_prefixes=protected_prefixes)
    paths = tuple(listed[info] for info in found.orphans)
    if not dry_run:
        delete_paths(io, paths, workers=8, on_error="raise")
    return orphans_report(
        len(found.orphans),
        sum(info.size or 0 for info in found.orphans),
        found.old_files,
        older_than_s,
        paths,
        dry_run,
        roots.note,
    )


def cleanup_roots(
    table: Table,
    older_than_s: float,
    now_s: float,
    locations: Sequence[str],
    catalog_locations: CatalogLocations | None,
) -> tuple[PyArrowFileIO, OrphanRoots]:
    """The FileIO one cleanup of `table` lists through (`listing_io`), and the roots it lists
    (`orphan_roots`), the table refreshed first. Raises `MaintenanceRefused` for a table whose
    ``gc.enabled`` is false, as Iceberg Java's DeleteOrphanFilesSparkAction refuses it ("Cannot
    delete orphan files: GC is disabled"), and for a root the table does not own."""
    io = listing_io(table, older_than_s)
    table.refresh()
    require_gc_enabled(".".join(table.name()), MaintenanceJob.ORPHANS, table.metadata.properties)
    roots = orphan_roots(
        table,
        io,
        locations=locations,
        catalog_locations=catalog_locations,
        now_s=now_s,
        older_than_s=older_than_s,
    )
    return io, roots


def listing_io(table: Table, older_than_s: float) -> PyArrowFileIO:
    """The table's FileIO, which orphan cleanup lists through; ValueError for an age below
    `MIN_ORPHAN_AGE_S`, TypeError for a FileIO other than PyArrowFileIO."""
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
    return io


@dataclass(frozen=True)
class FoundOrphans:
    """What one listing held: the orphans, by FileSystem path order, and how many files were old enough."""

    orphans: list[FileInfo]
    old_files: int


def find_orphans(
    listed: Mapping[FileInfo, str],
    referenced: Collection[str],
    *,
    cutoff_ns: int,
    protected_prefixes: Collection[str],
) -> FoundOrphans:
    """The files of `listed` that are orphans: modified before `cutoff_ns`, not named by
    `referenced` (FileSystem paths), not hidden, not protected; and the Hadoop checksums of
    files that are gone or go with them."""
    old = [
        info
        for info in listed
        if info.mtime_ns is not None
        and info.mtime_ns < cutoff_ns
        and info.base_name != VERSION_HINT
        and not info.base_name.startswith(tuple(protected_prefixes))
    ]
    unreferenced = {info.path for info in old if not _hidden(info) and info.path not in referenced}
    # A Hadoop checksum goes with its file: when that is gone or going, so is the checksum.
    existing = {info.path for info in listed}
    unreferenced.update(
        info.path
        for info in old
        if (checked := checksummed_path(info.path)) is not None
        and (checked not in existing or checked in unreferenced)
    )
    orphans = sorted((info for info in old if info.path in unreferenced), key=lambda i: i.path)
    return FoundOrphans(orphans, len(old))


def orphans_report(
    count: int,
    size: int,
    old_files: int,
    older_than_s: float,
    paths: tuple[str, ...],
    dry_run: bool,
    note: str = "",
) -> MaintenanceReport:
    """The report of an orphan cleanup that removed (or would remove) `count` files of `size` bytes;
    `note` is added to its summary."""
    verb = "would remove" if dry_run else "removed"
    return MaintenanceReport(
        job=MaintenanceJob.ORPHANS,
        summary=f"{verb} {count} orphan files ({size} bytes) of {old_files} files older than "
        f"{older_than_s:g} s{'; ' + note if note else ''}",
        files_removed=count,
        bytes_removed=size,
        dry_run=dry_run,
        paths=paths,
    )


def _hidden(info: FileInfo) -> bool:
    """Names starting with "." or "_" are not Iceberg files (checksums, markers): never orphans."""
    name: str = info.base_name
    return name.startswith((".", "_"))


def checksummed_path(path: str) -> str | None:
    """For a Hadoop checksum ``dir/.name.crc`` (Iceberg Java writes them locally), ``dir/name``."""
    directory, _, name = path.rpartition("/")
    if not (name.startswith(".") and name.endswith(".crc")):
        return None
    return f"{directory}/{name[1:-4]}" if directory or path.startswith("/") else name[1:-4]


def referenced_locations(io: FileIO, metadata: TableMetadata, metadata_location: str) -> set[str]:
    """Every location the metadata in `metadata_location` references, as written there."""
    found = referenced_files(io, metadata.snapshots, live_only=False).all_paths()
    return found | metadata_references(metadata, metadata_location)


def referenced_since(
    io: FileIO, metadata: TableMetadata, metadata_location: str, known_snapshot_ids: Collection[int]
) -> set[str]:
    """The locations `metadata` references that an earlier metadata file, whose snapshots were
    `known_snapshot_ids`, may not have: what commits made since then reference.

    Only the new snapshots' manifest lists and the manifests they added are read: a manifest
    is never changed once written, and one an earlier snapshot added was read with it.
    """
    known = set(known_snapshot_ids)
    new = [snapshot for snapshot in metadata.snapshots if snapshot.snapshot_id not in known]
    found = {snapshot.manifest_list for snapshot in new}
    manifests: dict[str, ManifestFile] = {}
    for snapshot in new:
        for manifest in snapshot.manifests(io):
            if manifest.added_snapshot_id not in known:
                manifests.setdefault(manifest.manifest_path, manifest)
    found.update(manifests)
    for manifest in manifests.values():
        found.update(
            entry.data_file.file_path for entry in manifest.fetch_manifest_entry(io, discard_deleted=False)
        )
    return found | metadata_references(metadata, metadata_location)


def metadata_references(metadata: TableMetadata, metadata_location: str) -> set[str]:
    """The metadata files and statistics files a metadata file names, itself included."""
    found = {entry.metadata_file for entry in metadata.metadata_log}
    found.update(s.statistics_path for s in (*metadata.statistics, *metadata.partition_statistics))
    found.add(metadata_location)
    return found
