"""Read a snapshot's live files through pyiceberg into the plain values planning works on."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record

from floe.planning.files import ContentFile, FileKind, PartitionKey, TableFiles

# Iceberg's reserved field id of the `file_path` column of position delete files.
POS_DELETE_FILE_PATH_ID = 2147483546


@dataclass(frozen=True)
class ScannedTable:
    """Live files of one snapshot plus what is needed to map plans back to Iceberg."""

    files: TableFiles
    partition_records: dict[PartitionKey, Record]

    def partition_path(self, metadata: TableMetadata, key: PartitionKey) -> str:
        """Iceberg's partition path (``day=2024-01-01``), empty when unpartitioned."""
        spec = metadata.specs()[key.spec_id]
        if spec.is_unpartitioned():
            return ""
        return spec.partition_to_path(self.partition_records[key], metadata.schema())


def partition_key(metadata: TableMetadata, spec_id: int, partition: Record) -> PartitionKey:
    """Hashable key of a file's partition."""
    spec = metadata.specs()[spec_id]
    values = tuple(partition[i] for i in range(len(partition)))
    return PartitionKey(spec_id=spec_id, values=values, global_scope=spec.is_unpartitioned())


def referenced_data_file(data_file: DataFile) -> str | None:
    """The single data file a position delete file targets, when its bounds prove it."""
    lower = (data_file.lower_bounds or {}).get(POS_DELETE_FILE_PATH_ID)
    upper = (data_file.upper_bounds or {}).get(POS_DELETE_FILE_PATH_ID)
    if lower is not None and lower == upper:
        return lower.decode("utf-8")
    return None


def content_file(metadata: TableMetadata, entry: ManifestEntry) -> ContentFile:
    """Plain-value view of one live manifest entry."""
    df = entry.data_file
    kind = FileKind(int(df.content))
    return ContentFile(
        path=df.file_path,
        kind=kind,
        partition=partition_key(metadata, df.spec_id, df.partition),
        record_count=df.record_count,
        size_bytes=df.file_size_in_bytes,
        data_sequence_number=entry.sequence_number or 0,
        equality_ids=tuple(df.equality_ids or ()) if kind == FileKind.EQUALITY_DELETES else (),
        referenced_data_file=referenced_data_file(df) if kind == FileKind.POSITION_DELETES else None,
    )


def live_entries(table: Table, snapshot_id: int | None) -> list[ManifestEntry]:
    """All live (added or existing) manifest entries of a snapshot, manifests read in parallel."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    if snapshot is None:
        return []
    manifests: list[ManifestFile] = snapshot.manifests(table.io)
    with ThreadPoolExecutor(max_workers=8) as pool:
        chunks = pool.map(lambda m: m.fetch_manifest_entry(table.io, discard_deleted=True), manifests)
        return [entry for chunk in chunks for entry in chunk]


def scan_table(table: Table, snapshot_id: int | None = None) -> ScannedTable:
    """Live data and delete files of a snapshot (the current one by default)."""
    metadata = table.metadata
    if snapshot_id is None:
        current = metadata.current_snapshot()
        snapshot_id = current.snapshot_id if current else None
    snapshot = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    data: list[ContentFile] = []
    deletes: list[ContentFile] = []
    records: dict[PartitionKey, Record] = {}
    for entry in live_entries(table, snapshot_id):
        file = content_file(metadata, entry)
        records.setdefault(file.partition, entry.data_file.partition)
        (data if entry.data_file.content == DataFileContent.DATA else deletes).append(file)
    files = TableFiles(
        snapshot_id=snapshot_id,
        sequence_number=snapshot.sequence_number if snapshot and snapshot.sequence_number else 0,
        data_files=tuple(data),
        delete_files=tuple(deletes),
    )
    return ScannedTable(files=files, partition_records=records)
