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
    write_manifest_list,
)
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

from floe.kit.files import delete_quietly
from floe.tables.manifest_io import content_key, manifest_entries, snapshot_manifests
from floe.tables.pyiceberg_compat import (
    ROW_LINEAGE_VERSION,
    ManifestListWriterV3,
    RowIdsUnassignable,
    manifest_writer,
)
from floe.tables.support import SUPPORTED_FORMAT_VERSIONS, UnsupportedTableError


class CommitStateUnknown(RuntimeError):
    """The catalog call that swaps main failed in a way that may have applied it (a timeout, a
    connection lost after sending, a 5xx): whether the snapshot landed is found out by reading
    the table again. The draft's files stay, since the snapshot may reference them."""


class SnapshotRefused(RuntimeError):
    """The snapshot would break a rule of the spec or of Iceberg Java's readers; it is not
    committed (its metadata files are the draft's to discard)."""


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
        return manifest_writer(
            self.metadata.format_version,
            content,
            self.metadata.specs()[spec_id],
            self.metadata.schema(),
            output,
            self.snapshot_id,
            self._avro_compression(),
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
            try:
                with ManifestListWriterV3(
                    output,
                    self.snapshot_id,
                    parent_id,
                    self.sequence_number,
                    first_row_id,
                    self._avro_compression(),
                ) as lineage_writer:
                    lineage_writer.add_manifests(manifests)
            except RowIdsUnassignable as exc:
                # The writer sits in floe.tables, below this layer's refusal.
                raise SnapshotRefused(str(exc)) from exc
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
