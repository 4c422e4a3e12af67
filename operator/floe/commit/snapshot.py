"""Low-level snapshot production: manifests, manifest list, summary, and the atomic swap.

pyiceberg's own producers cannot write delete manifests, remove delete files, or give
added files an explicit data sequence number; floe's commits need all three, so this
module writes the metadata files itself with pyiceberg's Avro writers and commits the
snapshot with an ``assert-ref-snapshot-id`` requirement (optimistic concurrency).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import cast

from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.avro.file import AvroOutputFile
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestListWriterV2,
    ManifestWriter,
    ManifestWriterV2,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import (
    Operation,
    Snapshot,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    SetSnapshotRefUpdate,
    update_table_metadata,
)
from pyiceberg.typedef import TableVersion
from pyiceberg.types import IntegerType, ListType, NestedField, StructType

from floe.kit.files import delete_quietly
from floe.tables.manifest_io import ROW_LINEAGE_VERSION, content_key, manifest_entries, snapshot_manifests
from floe.tables.support import SUPPORTED_FORMAT_VERSIONS, UnsupportedTableError

V3_DATA_FILE_FIELDS = len(DATA_FILE_TYPE[ROW_LINEAGE_VERSION].fields)
V3_MANIFEST_FIELDS = len(MANIFEST_LIST_FILE_SCHEMAS[ROW_LINEAGE_VERSION].fields)


class CommitStateUnknown(RuntimeError):
    """The catalog call that swaps main failed in a way that may have applied it (a timeout, a
    connection lost after sending, a 5xx): whether the snapshot landed is found out by reading
    the table again. The draft's files stay, since the snapshot may reference them."""


class SnapshotRefused(RuntimeError):
    """The snapshot would break a rule of the spec or of Iceberg Java's readers; it is not
    committed (its metadata files are the draft's to discard)."""


_EQUALITY_IDS = NestedField(
    field_id=135,
    name="equality_ids",
    field_type=ListType(element_id=136, element_type=IntegerType(), element_required=True),
    required=False,
    doc="Field ids used to determine row equality in equality delete files.",
)


def _spec_compliant(entry_schema: Schema) -> Schema:
    """The manifest entry schema with ``equality_ids`` as ``list<int>``, as the spec says.

    pyiceberg 0.12 declares it ``list<long>``, which Iceberg Java cannot read back
    (ClassCastException Long -> Integer when planning a scan with equality deletes).
    """
    fields = []
    for entry_field in entry_schema.fields:
        if entry_field.field_id == 2 and isinstance(entry_field.field_type, StructType):
            data_file = StructType(
                *[_EQUALITY_IDS if f.field_id == 135 else f for f in entry_field.field_type.fields]
            )
            entry_field = NestedField(2, entry_field.name, data_file, required=entry_field.required)
        fields.append(entry_field)
    return Schema(*fields)


class _DataManifestWriterV2(ManifestWriterV2):
    """pyiceberg's v2 manifest writer with the spec's type for equality_ids, for the content
    `manifest_content` names (pyiceberg's writes data manifests only)."""

    manifest_content = ManifestContent.DATA

    def content(self) -> ManifestContent:
        return self.manifest_content

    @property
    def _meta(self) -> dict[str, str]:
        return {
            **super()._meta,
            "content": "deletes" if self.manifest_content == ManifestContent.DELETES else "data",
        }

    def _with_partition(self, format_version: TableVersion) -> Schema:
        return _spec_compliant(super()._with_partition(format_version))


class _DeleteManifestWriterV2(_DataManifestWriterV2):
    """The v2 manifest writer for delete files (content=deletes)."""

    manifest_content = ManifestContent.DELETES


class _DataManifestWriterV3(_DataManifestWriterV2):
    """A v3 manifest writer: v2's rules for sequence numbers, with the v3 file fields.

    pyiceberg 0.12 writes manifests of v1 and v2 tables only. Entries read by
    `floe.tables.manifest_io` carry the v3 fields (an inherited ``first_row_id`` included,
    so an EXISTING file keeps its row ids); files floe creates get them empty: a new data
    file inherits its ``first_row_id`` from the manifest, as the spec says.
    """

    @property
    def version(self) -> TableVersion:
        return ROW_LINEAGE_VERSION

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        schema = self._with_partition(ROW_LINEAGE_VERSION)
        return AvroOutputFile[ManifestEntry](
            output_file=self._output_file,
            file_schema=schema,
            record_schema=schema,
            schema_name="manifest_entry",
            metadata=self._meta,
        )

    def prepare_entry(self, entry: ManifestEntry) -> ManifestEntry:
        entry = super().prepare_entry(entry)
        missing = V3_DATA_FILE_FIELDS - len(entry.data_file)
        if missing > 0:
            padded = DataFile(*(entry.data_file[i] for i in range(len(entry.data_file))), *([None] * missing))
            padded.spec_id = entry.data_file.spec_id
            entry = ManifestEntry.from_args(
                status=entry.status,
                snapshot_id=entry.snapshot_id,
                sequence_number=entry.sequence_number,
                file_sequence_number=entry.file_sequence_number,
                data_file=padded,
            )
        return entry


class _DeleteManifestWriterV3(_DataManifestWriterV3):
    """The v3 manifest writer for delete files (deletion vectors and equality deletes)."""

    manifest_content = ManifestContent.DELETES


class _ManifestListWriterV3(ManifestListWriterV2):
    """A v3 manifest list: v2's, plus a ``first_row_id`` for each data manifest without one.

    As the spec's "First Row ID Assignment" says: ids start at the table's ``next-row-id`` and
    each assigned manifest takes as many as it holds added and existing rows; `added_rows` is
    the number taken, the snapshot's ``added-rows``.
    """

    def __init__(
        self,
        output_file: OutputFile,
        snapshot_id: int,
        parent_snapshot_id: int | None,
        sequence_number: int,
        first_row_id: int,
        compression: AvroCompressionCodec,
    ) -> None:
        super().__init__(output_file, snapshot_id, parent_snapshot_id, sequence_number, compression)
        self._format_version = ROW_LINEAGE_VERSION
        self._meta = {**self._meta, "format-version": "3", "first-row-id": str(first_row_id)}
        self.first_row_id = first_row_id
        self.next_row_id = first_row_id

    @property
    def added_rows(self) -> int:
        """Row ids assigned so far."""
        return self.next_row_id - self.first_row_id

    def __enter__(self) -> _ManifestListWriterV3:
        schema = MANIFEST_LIST_FILE_SCHEMAS[ROW_LINEAGE_VERSION]
        self._writer = AvroOutputFile[ManifestFile](
            output_file=self._output_file,
            record_schema=schema,
            file_schema=schema,
            schema_name="manifest_file",
            metadata=self._meta,
        )
        self._writer.__enter__()
        return self

    def prepare_manifest(self, manifest_file: ManifestFile) -> ManifestFile:
        prepared = super().prepare_manifest(manifest_file)
        fields = [prepared[i] for i in range(len(prepared))]
        fields += [None] * (V3_MANIFEST_FIELDS - len(fields))
        if prepared.content == ManifestContent.DATA and fields[V3_MANIFEST_FIELDS - 1] is None:
            if prepared.added_rows_count is None or prepared.existing_rows_count is None:
                # The manifest's rows take as many ids as the two counts say (Iceberg Java's V3
                # manifest list writer adds them too): without them, none would be reserved and
                # the next manifest's ids would overlap theirs; the v3 list requires them anyway.
                raise SnapshotRefused(
                    f"data manifest {prepared.manifest_path} has no first_row_id and no row counts "
                    "(written before format v2): its rows cannot be given row ids"
                )
            fields[V3_MANIFEST_FIELDS - 1] = self.next_row_id
            self.next_row_id += (prepared.added_rows_count or 0) + (prepared.existing_rows_count or 0)
        return ManifestFile(*fields)


@dataclass
class SnapshotDraft:
    """One attempt at a new snapshot on top of `metadata`'s main branch.

    Every metadata file written is remembered so an abandoned attempt can delete them.
    """

    table: Table
    metadata: TableMetadata
    snapshot_id: int = 0
    commit_uuid: uuid.UUID = field(default_factory=uuid.uuid4)
    written: list[str] = field(default_factory=list)
    _counter: int = 0

    def __post_init__(self) -> None:
        # Planning refuses such tables already; a commit never writes metadata it cannot write right.
        version = self.metadata.format_version
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise UnsupportedTableError(".".join(self.table.name()), [f"format version {version}"])
        self.snapshot_id = self.metadata.new_snapshot_id()

    @property
    def io(self) -> FileIO:
        """The table's FileIO."""
        return self.table.io

    @property
    def parent(self) -> Snapshot | None:
        """Current head of main, the parent of the new snapshot."""
        return self.metadata.snapshot_by_name(MAIN_BRANCH)

    def head_entries(
        self, known: Mapping[str, list[ManifestEntry]] | None = None
    ) -> list[tuple[ManifestFile, list[ManifestEntry]]]:
        """The head's manifests, each with its live entries (none without a head), as `carry_over` takes them.

        Manifests are immutable, so entries already read (`known`, by manifest path) are
        reused: a retry after a concurrent commit reads only the manifests that commit wrote.
        """
        head = self.parent
        if head is None:
            return []
        known = known or {}
        return [
            (
                m,
                known[m.manifest_path]
                if m.manifest_path in known
                else manifest_entries(m, self.io, self.metadata.format_version),
            )
            for m in self.manifests(head)
        ]

    def manifests(self, snapshot: Snapshot) -> list[ManifestFile]:
        """The manifests of a snapshot of this table, read with its format version's fields."""
        return snapshot_manifests(snapshot, self.io, self.metadata.format_version)

    @property
    def sequence_number(self) -> int:
        """Sequence number the new snapshot will get."""
        return self.metadata.next_sequence_number()

    def _new_path(self, file_name: str) -> str:
        path = self.table.location_provider().new_metadata_location(file_name)
        self.written.append(path)
        return path

    def _avro_compression(self) -> AvroCompressionCodec:
        # pyiceberg's Avro writer resolves the codec name (its default "gzip" included).
        codec = self.metadata.properties.get(
            TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT
        )
        return cast(AvroCompressionCodec, codec)

    def manifest_writer(self, spec_id: int, content: ManifestContent) -> ManifestWriter:
        """A writer for a new manifest of the given spec and content."""
        self._counter += 1
        output = self.io.new_output(self._new_path(f"{self.commit_uuid}-m{self._counter}.avro"))
        spec = self.metadata.specs()[spec_id]
        schema = self.metadata.schema()
        compression = self._avro_compression()
        if self.metadata.format_version >= ROW_LINEAGE_VERSION:
            writer = _DeleteManifestWriterV3 if content == ManifestContent.DELETES else _DataManifestWriterV3
            return writer(spec, schema, output, self.snapshot_id, compression)
        if content == ManifestContent.DELETES:
            return _DeleteManifestWriterV2(spec, schema, output, self.snapshot_id, compression)
        return write_manifest(
            self.metadata.format_version, spec, schema, output, self.snapshot_id, compression
        )

    def write_entries(
        self, entries: Iterable[ManifestEntry], added_sequence_number: int | None
    ) -> list[ManifestFile]:
        """Write entries into new manifests, one per (spec, content).

        Entries with status ADDED get `added_sequence_number` as their data sequence
        number when given (floe's rewritten files keep the starting snapshot's), else
        they inherit the new snapshot's.
        """
        groups: dict[tuple[int, ManifestContent], list[ManifestEntry]] = {}
        for entry in entries:
            content = (
                ManifestContent.DATA
                if entry.data_file.content == DataFileContent.DATA
                else ManifestContent.DELETES
            )
            groups.setdefault((entry.data_file.spec_id, content), []).append(entry)
        manifests: list[ManifestFile] = []
        for (spec_id, content), group in sorted(groups.items(), key=lambda kv: (kv[0][0], int(kv[0][1]))):
            with self.manifest_writer(spec_id, content) as writer:
                for entry in group:
                    if entry.status == ManifestEntryStatus.ADDED:
                        writer.add_entry(
                            ManifestEntry.from_args(
                                status=ManifestEntryStatus.ADDED,
                                snapshot_id=self.snapshot_id,
                                sequence_number=added_sequence_number,
                                file_sequence_number=None,
                                data_file=entry.data_file,
                            )
                        )
                    elif entry.status == ManifestEntryStatus.DELETED:
                        writer.delete(entry)
                    else:
                        writer.existing(entry)
            manifests.append(writer.to_manifest_file())
        return manifests

    def carry_over(
        self, head: Sequence[tuple[ManifestFile, list[ManifestEntry]]], removed: Set[str]
    ) -> tuple[list[ManifestFile], list[DataFile]]:
        """The head's manifests (each with its live entries) for the new snapshot, minus `removed` paths
        (a deletion vector's by its `content_key`).

        Manifests holding none of them are kept as they are; the others are rewritten with
        those files DELETED and the rest EXISTING. Returns the manifests and the removed files.
        """
        kept: list[ManifestFile] = []
        rewritten: list[ManifestEntry] = []
        removed_files: list[DataFile] = []
        for manifest, entries in head:
            if not any(content_key(e.data_file) in removed for e in entries):
                kept.append(manifest)
                continue
            for e in entries:
                if content_key(e.data_file) in removed:
                    removed_files.append(e.data_file)
                    rewritten.append(_with_status(e, ManifestEntryStatus.DELETED))
                else:
                    rewritten.append(_with_status(e, ManifestEntryStatus.EXISTING))
        return self.write_entries(rewritten, added_sequence_number=None) + kept, removed_files

    def summary(
        self,
        operation: Operation,
        added: Iterable[DataFile],
        removed: Iterable[DataFile],
        extra: dict[str, str],
    ) -> Summary:
        """Snapshot summary with Iceberg's added/removed/total counters."""
        schema = self.metadata.schema()
        specs = self.metadata.specs()
        collector = SnapshotSummaryCollector()
        for f in added:
            collector.add_file(f, schema, specs[f.spec_id])
        for f in removed:
            collector.remove_file(f, schema, specs[f.spec_id])
        parent = self.parent
        # pyiceberg's total bookkeeping refuses `replace`; the arithmetic is the same, so
        # compute it as an overwrite and relabel.
        summary = update_snapshot_summaries(
            Summary(Operation.OVERWRITE, **collector.build(), **extra),
            parent.summary if parent else None,
        )
        properties = summary.model_dump()
        properties.pop("operation")
        return Summary(operation, **properties)

    def commit(self, manifests: list[ManifestFile], summary: Summary) -> Snapshot:
        """Write the manifest list and swap main to the new snapshot atomically.

        Raises pyiceberg's CommitFailedException when main moved since `metadata` was read.
        """
        snapshot = self.build(manifests, summary)
        self.swap([snapshot])
        return snapshot

    def build(self, manifests: list[ManifestFile], summary: Summary) -> Snapshot:
        """Write the manifest list of the new snapshot on top of the draft's head; commit nothing."""
        parent = self.parent
        parent_id = parent.snapshot_id if parent else None
        manifest_list = self._new_path(f"snap-{self.snapshot_id}-1-{self.commit_uuid}.avro")
        output = self.io.new_output(manifest_list)
        row_ids: dict[str, int] = {}
        if self.metadata.format_version >= ROW_LINEAGE_VERSION:
            first_row_id = getattr(self.metadata, "next_row_id", None) or 0
            with _ManifestListWriterV3(
                output,
                self.snapshot_id,
                parent_id,
                self.sequence_number,
                first_row_id,
                self._avro_compression(),
            ) as lineage_writer:
                lineage_writer.add_manifests(manifests)
            row_ids = {"first-row-id": first_row_id, "added-rows": lineage_writer.added_rows}
        else:
            with write_manifest_list(
                format_version=self.metadata.format_version,
                output_file=output,
                snapshot_id=self.snapshot_id,
                parent_snapshot_id=parent_id,
                sequence_number=self.sequence_number,
                avro_compression=self._avro_compression(),
            ) as writer:
                writer.add_manifests(manifests)
        return Snapshot.model_validate(
            {
                "snapshot-id": self.snapshot_id,
                "parent-snapshot-id": parent_id,
                "manifest-list": manifest_list,
                "sequence-number": self.sequence_number,
                "summary": summary,
                "schema-id": self.metadata.current_schema_id,
                **row_ids,
            }
        )

    def stacked(self, snapshot: Snapshot) -> SnapshotDraft:
        """A draft of the next snapshot on top of `snapshot` (built by this draft, not committed):
        its sequence number, and on v3 its ``first-row-id``, follow `snapshot`'s, as the catalog
        will apply them. Its files are this draft's: `discard` on either deletes both's."""
        main = {"snapshot-id": snapshot.snapshot_id, "ref-name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH}
        metadata = update_table_metadata(
            self.metadata, (AddSnapshotUpdate(snapshot=snapshot), SetSnapshotRefUpdate.model_validate(main))
        )
        return SnapshotDraft(table=self.table, metadata=metadata, written=self.written)

    def swap(self, snapshots: Sequence[Snapshot]) -> None:
        """Add `snapshots` (each the parent of the next, the first on the draft's head) and point
        main at the last, in one catalog commit asserting main is still at the draft's head: all
        land, or none.

        Raises pyiceberg's CommitFailedException when main moved since `metadata` was read, or
        the table's format version changed, and CommitStateUnknown when the call failed in a way
        that may have applied it.
        """
        self._check_format_version()
        parent = self.parent
        parent_id = parent.snapshot_id if parent else None
        last = snapshots[-1].snapshot_id
        main = {"snapshot-id": last, "ref-name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH}
        try:
            self.table.catalog.commit_table(
                self.table,
                requirements=(
                    AssertRefSnapshotId.model_validate({"snapshot-id": parent_id, "ref": MAIN_BRANCH}),
                ),
                updates=(
                    *(AddSnapshotUpdate(snapshot=snapshot) for snapshot in snapshots),
                    SetSnapshotRefUpdate.model_validate(main),
                ),
            )
        except CommitFailedException:
            raise  # the catalog refused it: main moved, nothing was applied
        except Exception as exc:
            # Anything else may have happened after the catalog applied the commit.
            self.written.clear()
            raise CommitStateUnknown(
                f"the catalog call committing snapshot {last} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _check_format_version(self) -> None:
        """Raise CommitFailedException when the table's format version is no longer the draft's.

        An upgrade (v2 to v3) adds no snapshot, so main's assertion lets it pass, and the
        snapshot would land on metadata whose spec forbids what the draft wrote (Parquet position
        deletes on v3, v2 manifests without row ids). No catalog requirement can assert the
        format version (Iceberg Java's commits do not either), so the table is read again just
        before the commit: what is left is the moment between that read and the commit. The
        conflict makes the caller decide again on the new metadata (`on_fresh_head`).
        """
        current = self.table.catalog.load_table(self.table.name()).metadata.format_version
        if current != self.metadata.format_version:
            raise CommitFailedException(
                f"the table's format version changed from v{self.metadata.format_version} to v{current} "
                "since the snapshot was drafted"
            )

    def discard(self) -> None:
        """Delete the metadata files this attempt wrote (it did not commit)."""
        for path in self.written:
            delete_quietly(self.io, path)
        self.written.clear()


def _with_status(entry: ManifestEntry, status: ManifestEntryStatus) -> ManifestEntry:
    return ManifestEntry.from_args(
        status=status,
        snapshot_id=entry.snapshot_id,
        sequence_number=entry.sequence_number,
        file_sequence_number=entry.file_sequence_number,
        data_file=entry.data_file,
    )
