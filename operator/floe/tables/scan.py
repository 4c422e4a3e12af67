"""Read a snapshot's live files through pyiceberg into the plain values planning works on."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record

from floe.planning.files import (
    ContentFile,
    FileKind,
    PartitionKey,
    TableFiles,
    deletion_vector_key,
    partition_identity,
)
from floe.tables.manifest_contents import MANIFEST_CONTENTS, ManifestContent, ManifestContents
from floe.tables.manifest_io import (
    deletion_vector_location,
    file_first_row_id,
    manifest_entries,
    snapshot_manifests,
)
from floe.tables.writer import POS_DELETE_FILE_PATH_ID

_FILE_KINDS = {
    DataFileContent.DATA: FileKind.DATA,
    DataFileContent.POSITION_DELETES: FileKind.POSITION_DELETES,
    DataFileContent.EQUALITY_DELETES: FileKind.EQUALITY_DELETES,
}


@dataclass(frozen=True)
class ScannedTable:
    """Live files of one snapshot plus what is needed to map plans back to Iceberg."""

    files: TableFiles
    partition_records: dict[PartitionKey, Record]
    file_formats: frozenset[tuple[FileKind, FileFormat]] = frozenset()
    """The (kind, format) pairs of the live files: whether any is not Parquet."""

    @property
    def spec_ids(self) -> frozenset[int]:
        """The partition specs the live files were written with."""
        return frozenset(key.spec_id for key in self.partition_records)

    def partition_path(self, metadata: TableMetadata, key: PartitionKey) -> str:
        """Iceberg's partition path (``day=2024-01-01``), empty when unpartitioned."""
        spec = metadata.specs()[key.spec_id]
        if spec.is_unpartitioned():
            return ""
        return spec.partition_to_path(self.partition_records[key], metadata.schema())


class EntryConverter:
    """Turns the manifest entries of one table into `ContentFile` values.

    What does not change from entry to entry is worked out once: which specs are
    unpartitioned, and one shared `PartitionKey` per partition (so a scan of 100,000
    files holds 1,000 keys, not 100,000, and dict lookups on them hit identity first).
    """

    def __init__(self, metadata: TableMetadata) -> None:
        self._unpartitioned = {spec_id: spec.is_unpartitioned() for spec_id, spec in metadata.specs().items()}
        self._keys: dict[tuple[int, tuple[Any, ...]], PartitionKey] = {}

    def partition_key(self, spec_id: int, partition: Record) -> PartitionKey:
        """Hashable key of a file's partition."""
        values = tuple(partition[i] for i in range(len(partition)))
        # By identity, not values: Python's == would merge 0.0 with -0.0 and split NaNs.
        cache_key = (spec_id, partition_identity(values))
        key = self._keys.get(cache_key)
        if key is None:
            key = PartitionKey(spec_id=spec_id, values=values, global_scope=self._unpartitioned[spec_id])
            self._keys[cache_key] = key
        return key

    def share(self, key: PartitionKey) -> None:
        """Use `key` (from an earlier scan) for the files of its partition converted from now on."""
        self._keys.setdefault((key.spec_id, partition_identity(key.values)), key)

    def manifest_content(self, entries: list[ManifestEntry]) -> ManifestContent:
        """One manifest's live `entries` as planning sees them."""
        files: list[ContentFile] = []
        records: dict[PartitionKey, Record] = {}
        formats: set[tuple[FileKind, FileFormat]] = set()
        for entry in entries:
            file = self.content_file(entry)
            files.append(file)
            records.setdefault(file.partition, entry.data_file.partition)
            formats.add((file.kind, entry.data_file.file_format))
        return ManifestContent(tuple(files), tuple(records.items()), frozenset(formats))

    def content_file(self, entry: ManifestEntry) -> ContentFile:
        """Plain-value view of one live manifest entry."""
        df = entry.data_file
        kind = _FILE_KINDS[df.content]
        vector = deletion_vector_location(df)
        return ContentFile(
            path=df.file_path if vector is None else deletion_vector_key(df.file_path, vector[1]),
            kind=kind,
            partition=self.partition_key(df.spec_id, df.partition),
            record_count=df.record_count,
            size_bytes=df.file_size_in_bytes,
            data_sequence_number=entry.sequence_number or 0,
            equality_ids=tuple(df.equality_ids or ()) if kind == FileKind.EQUALITY_DELETES else (),
            referenced_data_file=(vector[0] if vector else referenced_data_file(df))
            if kind == FileKind.POSITION_DELETES
            else None,
            content_offset=vector[1] if vector else None,
            content_size=vector[2] if vector else None,
            first_row_id=file_first_row_id(df) if kind == FileKind.DATA else None,
        )


def referenced_data_file(data_file: DataFile) -> str | None:
    """The single data file a position delete file targets, when its bounds prove it."""
    lower = (data_file.lower_bounds or {}).get(POS_DELETE_FILE_PATH_ID)
    upper = (data_file.upper_bounds or {}).get(POS_DELETE_FILE_PATH_ID)
    if lower is not None and lower == upper:
        return lower.decode("utf-8")
    return None


def content_file(metadata: TableMetadata, entry: ManifestEntry) -> ContentFile:
    """Plain-value view of one live manifest entry (a loop over many should share an `EntryConverter`)."""
    return EntryConverter(metadata).content_file(entry)


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector off while a scan allocates its many small objects.

    Decoding a manifest creates several tracked containers per entry (records, dicts,
    lists) and nothing cyclic; with the collector on, its collections, each walking an
    ever larger heap, took half of the scan's CPU at 100,000 files. Pauses may nest and
    overlap across threads: the collector comes back, if it was on, when the last ends.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def live_entries(table: Table, snapshot_id: int | None) -> list[ManifestEntry]:
    """All live (added or existing) manifest entries of a snapshot, manifests read in parallel."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    if snapshot is None:
        return []
    version = table.metadata.format_version
    manifests = snapshot_manifests(snapshot, table.io, version)
    return [entry for chunk in _read_entries(table, manifests) for entry in chunk]


def _read_entries(table: Table, manifests: list[ManifestFile]) -> Iterator[list[ManifestEntry]]:
    """The live entries of each of `manifests`, in their order."""
    version = table.metadata.format_version
    # Threads overlap the reads of remote manifests; decoding itself holds the GIL.
    with ThreadPoolExecutor(max_workers=8) as pool:
        yield from pool.map(lambda m: manifest_entries(m, table.io, version), manifests)


def scan_table(
    table: Table, snapshot_id: int | None = None, contents: ManifestContents | None = MANIFEST_CONTENTS
) -> ScannedTable:
    """Live data and delete files of a snapshot (the current one by default); the manifests
    `contents` holds are not read again, and those read are added to it."""
    metadata = table.metadata
    if snapshot_id is None:
        current = metadata.current_snapshot()
        snapshot_id = current.snapshot_id if current else None
    snapshot = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    version = metadata.format_version
    converter = EntryConverter(metadata)
    data: list[ContentFile] = []
    deletes: list[ContentFile] = []
    records: dict[PartitionKey, Record] = {}
    formats: set[tuple[FileKind, FileFormat]] = set()
    with gc_paused():
        manifests = snapshot_manifests(snapshot, table.io, version) if snapshot else []
        known = [contents.get(m.manifest_path, version) if contents is not None else None for m in manifests]
        for content in known:
            for key, _ in content.partition_records if content else ():
                converter.share(key)  # new files' partitions are the same key objects
        unread = [m for m, content in zip(manifests, known, strict=True) if content is None]
        read = iter(_read_entries(table, unread))
        for manifest, content in zip(manifests, known, strict=True):
            if content is None:
                content = converter.manifest_content(next(read))
                if contents is not None:
                    contents.put(manifest.manifest_path, version, content)
            for file in content.files:
                (data if file.kind == FileKind.DATA else deletes).append(file)
            for key, record in content.partition_records:
                records.setdefault(key, record)
            formats |= content.file_formats
    files = TableFiles(
        snapshot_id=snapshot_id,
        sequence_number=snapshot.sequence_number if snapshot and snapshot.sequence_number else 0,
        data_files=tuple(data),
        delete_files=tuple(deletes),
        format_version=metadata.format_version,
    )
    return ScannedTable(files=files, partition_records=records, file_formats=frozenset(formats))
