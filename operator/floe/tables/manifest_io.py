"""Read manifest lists and manifests with the fields of the table's own format version.

pyiceberg 0.12 reads every manifest list and manifest with the v2 schema, which drops what
format v3 adds: a data manifest's ``first_row_id``, and a file's ``first_row_id``,
``referenced_data_file``, ``content_offset`` and ``content_size_in_bytes``. Rewriting a v3
manifest from such a read would lose row lineage and every deletion vector's location, so
floe reads v3 metadata with the v3 schema and assigns inherited ``first_row_id`` values as
the spec's "First Row ID Inheritance" says. v1 and v2 tables are read by pyiceberg as before.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldSummary,
)
from pyiceberg.table.snapshots import Snapshot

from floe.planning.files import deletion_vector_key
from floe.tables.pyiceberg_compat import (
    ROW_LINEAGE_VERSION,
    V3_FILE_CONTENT_OFFSET,
    V3_FILE_CONTENT_SIZE,
    V3_FILE_FIRST_ROW_ID,
    V3_FILE_REFERENCED_DATA_FILE,
    V3_MANIFEST_FIRST_ROW_ID,
    inherit_from_manifest,
)


def snapshot_manifests(snapshot: Snapshot, io: FileIO, format_version: int) -> list[ManifestFile]:
    """The manifests a snapshot's manifest list names, with ``first_row_id`` on a v3 table."""
    if format_version < ROW_LINEAGE_VERSION:
        return snapshot.manifests(io)
    with AvroFile[ManifestFile](
        io.new_input(snapshot.manifest_list),
        MANIFEST_LIST_FILE_SCHEMAS[ROW_LINEAGE_VERSION],
        read_types={-1: ManifestFile, 508: PartitionFieldSummary},
        read_enums={517: ManifestContent},
    ) as reader:
        return list(reader)


def manifest_entries(
    manifest: ManifestFile, io: FileIO, format_version: int, discard_deleted: bool = True
) -> list[ManifestEntry]:
    """A manifest's entries (only the live ones with `discard_deleted`), with what they inherit
    from the manifest: sequence numbers, spec id and, on a v3 table, each data file's
    ``first_row_id``."""
    if format_version < ROW_LINEAGE_VERSION:
        return manifest.fetch_manifest_entry(io, discard_deleted=discard_deleted)
    with AvroFile[ManifestEntry](
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[ROW_LINEAGE_VERSION],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as reader:
        entries = [inherit_from_manifest(entry, manifest) for entry in reader]
    next_row_id = manifest_first_row_id(manifest)
    if manifest.content == ManifestContent.DATA and next_row_id is not None:
        # Files without a first_row_id take the next ids in manifest order; deleted entries
        # take none (Iceberg Java's ManifestReader does the same).
        for entry in entries:
            if entry.status != ManifestEntryStatus.DELETED and file_first_row_id(entry.data_file) is None:
                entry.data_file[V3_FILE_FIRST_ROW_ID] = next_row_id
                next_row_id += entry.data_file.record_count
    return [e for e in entries if not discard_deleted or e.status != ManifestEntryStatus.DELETED]


def added_entries(snapshot: Snapshot, io: FileIO, format_version: int) -> list[ManifestEntry]:
    """The entries of the files ``snapshot`` itself added: ADDED in the manifests it wrote."""
    return [
        entry
        for manifest in snapshot_manifests(snapshot, io, format_version)
        if manifest.added_snapshot_id == snapshot.snapshot_id
        for entry in manifest_entries(manifest, io, format_version)
        if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id
    ]


def manifest_first_row_id(manifest: ManifestFile) -> int | None:
    """The first row id of a v3 data manifest; None before v3, and for a delete manifest."""
    first_row_id: int | None = _field(manifest, V3_MANIFEST_FIRST_ROW_ID)
    return first_row_id


def file_first_row_id(data_file: DataFile) -> int | None:
    """The ``_row_id`` of a v3 data file's first row (inherited values included once read here)."""
    first_row_id: int | None = _field(data_file, V3_FILE_FIRST_ROW_ID)
    return first_row_id


def deletion_vector_location(data_file: DataFile) -> tuple[str, int, int] | None:
    """(referenced data file, blob offset, blob length) of a deletion vector; None for any
    other file, or one read without the v3 fields."""
    if data_file.file_format != FileFormat.PUFFIN:
        return None
    referenced = _field(data_file, V3_FILE_REFERENCED_DATA_FILE)
    offset = _field(data_file, V3_FILE_CONTENT_OFFSET)
    size = _field(data_file, V3_FILE_CONTENT_SIZE)
    if referenced is None or offset is None or size is None:
        return None
    return referenced, offset, size


def content_key(data_file: DataFile) -> str:
    """The path floe knows a content file by: its own, or a deletion vector's key
    (`floe.planning.files.deletion_vector_key`), since one Puffin file holds many."""
    vector = deletion_vector_location(data_file)
    if vector is None:
        return data_file.file_path
    return deletion_vector_key(data_file.file_path, vector[1])


def _field(record: ManifestFile | DataFile, position: int) -> Any:
    return record[position] if len(record) > position else None
