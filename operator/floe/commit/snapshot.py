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
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
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
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate
from pyiceberg.typedef import TableVersion
from pyiceberg.types import IntegerType, ListType, NestedField, StructType

from floe.tables.support import UnsupportedTableError, unsupported_features


class CommitStateUnknown(RuntimeError):
    """The catalog call that swaps main failed in a way that may have applied it (a timeout, a
    connection lost after sending, a 5xx): whether the snapshot landed is found out by reading
    the table again. The draft's files stay, since the snapshot may reference them."""


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
    """pyiceberg's v2 manifest writer with the spec's type for equality_ids."""

    def _with_partition(self, format_version: TableVersion) -> Schema:
        return _spec_compliant(super()._with_partition(format_version))


class _DeleteManifestWriterV2(_DataManifestWriterV2):
    """The v2 manifest writer for delete files (content=deletes)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


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
        refused = unsupported_features(self.metadata)
        if refused:
            raise UnsupportedTableError(".".join(self.table.name()), refused)
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
                else m.fetch_manifest_entry(self.io, discard_deleted=True),
            )
            for m in head.manifests(self.io)
        ]

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
        """The head's manifests (each with its live entries) for the new snapshot, minus `removed` paths.

        Manifests holding none of them are kept as they are; the others are rewritten with
        those files DELETED and the rest EXISTING. Returns the manifests and the removed files.
        """
        kept: list[ManifestFile] = []
        rewritten: list[ManifestEntry] = []
        removed_files: list[DataFile] = []
        for manifest, entries in head:
            if not any(e.data_file.file_path in removed for e in entries):
                kept.append(manifest)
                continue
            for e in entries:
                if e.data_file.file_path in removed:
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
        parent = self.parent
        manifest_list = self._new_path(f"snap-{self.snapshot_id}-1-{self.commit_uuid}.avro")
        with write_manifest_list(
            format_version=self.metadata.format_version,
            output_file=self.io.new_output(manifest_list),
            snapshot_id=self.snapshot_id,
            parent_snapshot_id=parent.snapshot_id if parent else None,
            sequence_number=self.sequence_number,
            avro_compression=self._avro_compression(),
        ) as writer:
            writer.add_manifests(manifests)
        parent_id = parent.snapshot_id if parent else None
        snapshot = Snapshot.model_validate(
            {
                "snapshot-id": self.snapshot_id,
                "parent-snapshot-id": parent_id,
                "manifest-list": manifest_list,
                "sequence-number": self.sequence_number,
                "summary": summary,
                "schema-id": self.metadata.current_schema_id,
            }
        )
        main = {"snapshot-id": self.snapshot_id, "ref-name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH}
        try:
            self.table.catalog.commit_table(
                self.table,
                requirements=(
                    AssertRefSnapshotId.model_validate({"snapshot-id": parent_id, "ref": MAIN_BRANCH}),
                ),
                updates=(AddSnapshotUpdate(snapshot=snapshot), SetSnapshotRefUpdate.model_validate(main)),
            )
        except CommitFailedException:
            raise  # the catalog refused it: main moved, nothing was applied
        except Exception as exc:
            # Anything else may have happened after the catalog applied the commit.
            self.written.clear()
            raise CommitStateUnknown(
                f"the catalog call committing snapshot {self.snapshot_id} failed: {type(exc).__name__}: {exc}"
            ) from exc
        return snapshot

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


def delete_quietly(io: FileIO, path: str) -> None:
    """Delete a file, ignoring one that is already gone."""
    try:
        io.delete(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if "not found" not in str(exc).lower() and "no such file" not in str(exc).lower():
            raise
