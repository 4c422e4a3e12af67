"""Data retention (TTL): delete the rows whose time column is older than the retention.

Most expired rows go without reading any data: a data file whose upper bound on the
column lies before the cutoff (and that holds no null there, since nulls never expire)
is dropped whole, with the delete files that then apply to no remaining file; with
identity, day or month partitions on the column, whole partitions drop this way. Only
files whose range straddles the cutoff are read (that one column), and their expired
rows are deleted by position delete files. Both go into one ``delete`` snapshot, made
only if main has not moved since planning; otherwise the work is planned again.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.types import DateType, NestedField, PrimitiveType, TimestampType, TimestamptzType

from floe.commit.retry import on_fresh_head
from floe.commit.snapshot import SnapshotDraft, SnapshotRefused
from floe.commit.validation import removable_delete_paths
from floe.commit.vectors import check_one_vector_per_data_file
from floe.kit.files import delete_quietly
from floe.maintenance.job import MaintenanceJob, MaintenanceReport
from floe.planning.files import partition_identity
from floe.tables.deletion_vectors import read_deletion_vector
from floe.tables.manifest_io import content_key, deletion_vector_location
from floe.tables.pyiceberg_compat import ROW_LINEAGE_VERSION
from floe.tables.writer import POS_DELETE_FILE_PATH_ID, write_deletion_vector_file, write_position_deletes

SUMMARY_MAINTENANCE = "floe.maintenance"
MICROS_PER_SECOND = 1_000_000
SECONDS_PER_DAY = 86_400
EPOCH_DAY = date(1970, 1, 1)


class RetentionAbandoned(RuntimeError):
    """Main kept moving under the retention commit; nothing was committed."""


@dataclass(frozen=True)
class RetentionReport(MaintenanceReport):
    """A retention run: whole files dropped, and rows deleted by position inside the others."""

    rows_deleted: int = 0
    """Rows deleted by position deletes (rows of dropped files are not counted)."""
    files_with_row_deletes: int = 0
    """Data files that straddle the cutoff and got position deletes."""
    cutoff: str = ""
    """The cutoff, as the column's type prints it (ISO-8601)."""


def expire_rows(
    table: Table,
    *,
    column: str,
    older_than_s: float,
    now_s: float,
    dry_run: bool = False,
    max_attempts: int = 4,
) -> RetentionReport:
    """Delete the rows whose `column` is before ``now_s - older_than_s``; nulls are kept.

    `column` is a top-level timestamp, timestamptz or date column (ValueError otherwise).
    A date expires when its whole day lies before the cutoff (UTC). With `dry_run`
    nothing is written: the report says what would go. Raises RetentionAbandoned when
    `max_attempts` commits in a row lose to concurrent commits.
    """
    field = _retention_field(table, column)
    cutoff = _cutoff(field, now_s - older_than_s)
    plan: _Plan | None = None
    written: list[DataFile] = []

    def attempt(draft: SnapshotDraft) -> RetentionReport:
        nonlocal plan, written
        # A concurrent commit that left every file of the plan live (an append, say) does not
        # invalidate it: the same drop and position deletes are committed on the new head, so
        # a busy writer cannot starve retention. Anything else is planned again.
        if plan is None or not plan.rebase(draft):
            _delete_all(table, written)
            written = []
            plan = _plan(table, field, cutoff, draft)
            if dry_run or plan.is_empty:
                return plan.report(snapshot_id=None, dry_run=dry_run)
        if not written:
            written = _write_deletes(table, plan)
        # Should the commit fail for another reason than a conflict, it may still have
        # happened: the position delete files are then left for orphan cleanup.
        return plan.report(snapshot_id=_commit(draft, plan, written), dry_run=False)

    try:
        return on_fresh_head(table, attempt, max_attempts)
    except CommitFailedException:
        _delete_all(table, written)
        raise RetentionAbandoned(
            f"retention on {column}: main moved during each of {max_attempts} attempts"
        ) from None
    except SnapshotRefused:
        # Refused before the catalog was asked (a second vector, a manifest without row counts).
        _delete_all(table, written)
        raise


def _write_deletes(table: Table, plan: _Plan) -> list[DataFile]:
    """The delete files of the plan's expired positions: a position-delete file per partition, or
    on a v3 table a deletion vector per data file, holding its earlier vector's positions too."""
    if plan.format_version < ROW_LINEAGE_VERSION:
        return [
            write_position_deletes(table, positions, spec_id, partition)
            for (spec_id, partition), positions in plan.positions_by_partition()
        ]
    return [
        write_deletion_vector_file(
            table,
            plan.straddling[path],
            pa.array(sorted({*positions, *plan.already_deleted.get(path, ())}), pa.int64()),
        )
        for path, positions in plan.positions.items()
    ]


def _delete_all(table: Table, files: list[DataFile]) -> None:
    for f in files:
        delete_quietly(table.io, f.file_path)


def _retention_field(table: Table, column: str) -> NestedField:
    schema = table.schema()
    field = next((f for f in schema.fields if f.name == column), None)
    if field is None:
        raise ValueError(
            f"data retention column {column!r} is not a top-level column of the table; "
            f"columns: {[f.name for f in schema.fields]}"
        )
    if not isinstance(field.field_type, TimestampType | TimestamptzType | DateType):
        raise ValueError(
            f"data retention column {column!r} is {field.field_type}; "
            "it must be a timestamp, timestamptz or date"
        )
    return field


def _cutoff(field: NestedField, cutoff_s: float) -> int:
    """The cutoff in the column's unit: values strictly below it expire."""
    if isinstance(field.field_type, DateType):
        # Day d covers [d, d + 1) days: it has wholly passed when d + 1 <= cutoff.
        return math.floor(cutoff_s / SECONDS_PER_DAY)
    return math.floor(cutoff_s * MICROS_PER_SECOND)


@dataclass
class _Plan:
    column: str
    cutoff_text: str
    format_version: int
    """The table's when planned: it decides whether position deletes or deletion vectors are written."""
    head: list[tuple[ManifestFile, list[ManifestEntry]]]
    """The manifests of the snapshot planned on, each with its live entries."""
    dropped: list[DataFile]
    removed_deletes: list[DataFile]
    positions: dict[str, list[int]]
    """Expired row positions of each straddling data file."""
    straddling: dict[str, DataFile]
    already_deleted: dict[str, set[int]]
    """Positions of the straddling files that live deletes remove already."""
    replaced_vectors: list[DataFile]
    """On a v3 table, the deletion vectors of straddling files: the new vectors replace them."""

    @property
    def is_empty(self) -> bool:
        return not self.dropped and not self.positions

    def rebase(self, draft: SnapshotDraft) -> bool:
        """Move the plan onto `draft`'s head if every file it drops or deletes rows of is still live,
        the format version is the same and, on v3, no straddling file got a new deletion vector.

        Files added meanwhile are left for the next run; delete files the plan removes cannot
        apply to them (equality deletes only reach older sequence numbers, position deletes
        name their files).
        """
        # A plan made on v2 writes Parquet position deletes, which v3 forbids.
        if draft.metadata.format_version != self.format_version:
            return False
        # Only the manifests the concurrent commits wrote are read, which keeps a retry short
        # enough to land between the commits of a busy writer.
        entries = draft.head_entries(known={m.manifest_path: listed for m, listed in self.head})
        live = {content_key(e.data_file) for _, listed in entries for e in listed}
        removed = (*self.dropped, *self.removed_deletes, *self.replaced_vectors)
        needed = {content_key(f) for f in removed} | set(self.straddling)
        if not needed <= live:
            return False
        # A straddling file's new vector replaces the one it had when planned: a vector added
        # meanwhile would stay beside it (two for one data file, as Iceberg Java's
        # MergingSnapshotProducer.validateAddedDVs refuses), so its positions are planned in.
        if self.format_version >= ROW_LINEAGE_VERSION and _vectors_of(entries, self.straddling) != {
            content_key(f) for f in self.replaced_vectors
        }:
            return False
        self.head = entries
        return True

    def positions_by_partition(self) -> Iterator[tuple[tuple[int, Any], list[tuple[str, int]]]]:
        """The positions to delete, one group per partition: a position delete file has one partition."""
        groups: dict[tuple[int, tuple[Any, ...]], list[tuple[str, int]]] = {}
        records: dict[tuple[int, tuple[Any, ...]], Any] = {}
        for path, positions in self.positions.items():
            data_file = self.straddling[path]
            partition = data_file.partition
            # As Iceberg Java tells partitions apart: NaNs one partition, 0.0 and -0.0 two.
            key = (data_file.spec_id, partition_identity(tuple(partition[i] for i in range(len(partition)))))
            records[key] = partition
            groups.setdefault(key, []).extend((path, p) for p in positions)
        for key, group in groups.items():
            yield (key[0], records[key]), group

    def report(self, snapshot_id: int | None, dry_run: bool) -> RetentionReport:
        rows = sum(len(p) for p in self.positions.values())
        removed = [*self.dropped, *self.removed_deletes]
        verb = "would drop" if dry_run else "dropped"
        summary = (
            f"{self.column} < {self.cutoff_text}: {verb} {len(self.dropped)} data files "
            f"({len(self.removed_deletes)} delete files with them), "
            f"{'would delete' if dry_run else 'deleted'} {rows} rows in {len(self.positions)} files"
        )
        return RetentionReport(
            job=MaintenanceJob.RETENTION,
            summary=summary,
            files_removed=len(removed),
            bytes_removed=sum(f.file_size_in_bytes for f in removed),
            snapshot_id=snapshot_id,
            dry_run=dry_run,
            paths=tuple(sorted(f.file_path for f in removed)),
            rows_deleted=rows,
            files_with_row_deletes=len(self.positions),
            cutoff=self.cutoff_text,
        )


def _plan(table: Table, field: NestedField, cutoff: int, draft: SnapshotDraft) -> _Plan:
    plan = _Plan(
        column=field.name,
        cutoff_text=_cutoff_text(field, cutoff),
        format_version=draft.metadata.format_version,
        head=draft.head_entries(),
        dropped=[],
        removed_deletes=[],
        positions={},
        straddling={},
        already_deleted={},
        replaced_vectors=[],
    )
    live = [entry for _, entries in plan.head for entry in entries]
    to_read: list[DataFile] = []
    for entry in live:
        data_file = entry.data_file
        if data_file.content != DataFileContent.DATA:
            continue
        verdict = _by_bounds(data_file, field, cutoff)
        if verdict == "drop":
            plan.dropped.append(data_file)
        elif verdict == "read":
            to_read.append(data_file)
    deleted = _deleted_positions(table, live, {f.file_path for f in to_read})
    for data_file in to_read:
        positions = _expired_positions(table, data_file, field, cutoff)
        if len(positions) == data_file.record_count:
            plan.dropped.append(data_file)
            continue
        # Positions deleted before (by an earlier run, say) are not deleted again.
        already = deleted.get(data_file.file_path, set())
        fresh = [p for p in positions if p not in already]
        if fresh:
            plan.positions[data_file.file_path] = fresh
            plan.straddling[data_file.file_path] = data_file
            plan.already_deleted[data_file.file_path] = already
    plan.replaced_vectors = [
        e.data_file
        for e in live
        if (vector := deletion_vector_location(e.data_file)) is not None and vector[0] in plan.straddling
    ]
    if plan.dropped:
        removable = removable_delete_paths(
            draft.metadata,
            live,
            frozenset(f.file_path for f in plan.dropped),
            frozenset(content_key(e.data_file) for e in live if e.data_file.content != DataFileContent.DATA),
        )
        plan.removed_deletes = [e.data_file for e in live if content_key(e.data_file) in removable]
    return plan


def _vectors_of(entries: list[tuple[ManifestFile, list[ManifestEntry]]], paths: Collection[str]) -> set[str]:
    """The live deletion vectors (by `content_key`) of the data files at `paths`."""
    return {
        content_key(e.data_file)
        for _, listed in entries
        for e in listed
        if (vector := deletion_vector_location(e.data_file)) is not None and vector[0] in paths
    }


def _by_bounds(data_file: DataFile, field: NestedField, cutoff: int) -> str:
    """ "drop" (every row expired), "keep" (none expired) or "read" (the rows must be read)."""
    field_id = field.field_id
    nulls = (data_file.null_value_counts or {}).get(field_id)
    values = (data_file.value_counts or {}).get(field_id)
    if values is not None and nulls is not None and nulls >= values:
        return "keep"
    lower = (data_file.lower_bounds or {}).get(field_id)
    upper = (data_file.upper_bounds or {}).get(field_id)
    kind = cast(PrimitiveType, field.field_type)
    if lower is not None and cast(int, from_bytes(kind, lower)) >= cutoff:
        return "keep"
    if upper is not None and nulls == 0 and cast(int, from_bytes(kind, upper)) < cutoff:
        return "drop"
    return "read"


def _deleted_positions(table: Table, live: list[ManifestEntry], paths: set[str]) -> dict[str, set[int]]:
    """Positions of the data files at `paths` that live position delete files (and deletion
    vectors) already delete."""
    deleted: dict[str, set[int]] = {}
    if not paths:
        return deleted
    wanted = pa.array(sorted(paths), pa.string())
    for entry in live:
        delete_file = entry.data_file
        if delete_file.content != DataFileContent.POSITION_DELETES:
            continue
        vector = deletion_vector_location(delete_file)
        if vector is not None:
            if vector[0] in paths:
                positions = read_deletion_vector(table.io, delete_file.file_path, vector[1], vector[2])
                deleted.setdefault(vector[0], set()).update(positions.to_pylist())
            continue
        lower = (delete_file.lower_bounds or {}).get(POS_DELETE_FILE_PATH_ID)
        upper = (delete_file.upper_bounds or {}).get(POS_DELETE_FILE_PATH_ID)
        # Bounds may be truncated prefixes, so only a path below the lower bound is surely absent.
        if lower is not None and upper is not None and not any(lower.decode() <= p for p in paths):
            continue
        with table.io.new_input(delete_file.file_path).open() as stream:
            rows = pq.read_table(cast(Any, stream), columns=["file_path", "pos"])
        targets = rows.column("file_path")
        rows = rows.filter(pc.is_in(targets, value_set=wanted.cast(targets.type)))
        pairs = zip(rows.column("file_path").to_pylist(), rows.column("pos").to_pylist(), strict=True)
        for path, position in pairs:
            deleted.setdefault(path, set()).add(position)
    return deleted


def _expired_positions(table: Table, data_file: DataFile, field: NestedField, cutoff: int) -> list[int]:
    """Positions of the file's rows whose value is below the cutoff, read one row group at a time."""
    positions: list[int] = []
    with table.io.new_input(data_file.file_path).open() as stream:
        parquet = pq.ParquetFile(cast(Any, stream))
        file_schema = pyarrow_to_schema(
            parquet.schema_arrow, table.metadata.name_mapping(), downcast_ns_timestamp_to_us=True
        )
        name = file_schema.find_column_name(field.field_id)
        if name is None:
            # Written before the column existed: the column reads as null there, and nulls never expire.
            return positions
        offset = 0
        for row_group in range(parquet.num_row_groups):
            values = parquet.read_row_group(row_group, columns=[name]).column(0)
            expired = pc.less(_as_units(values, field), pa.scalar(cutoff, pa.int64()))
            positions.extend(offset + i for i in pc.indices_nonzero(pc.fill_null(expired, False)).to_pylist())
            offset += len(values)
    return positions


def _as_units(values: pa.ChunkedArray, field: NestedField) -> pa.ChunkedArray:
    """Column values as int64 days (dates) or microseconds (timestamps), whatever the file's unit."""
    if isinstance(field.field_type, DateType):
        return values.cast(pa.int32()).cast(pa.int64())
    unit = values.type.unit
    micros = values.cast(pa.timestamp("us", tz=values.type.tz), safe=False) if unit != "us" else values
    return micros.cast(pa.int64())


def _cutoff_text(field: NestedField, cutoff: int) -> str:
    if isinstance(field.field_type, DateType):
        return (EPOCH_DAY + timedelta(days=cutoff)).isoformat()
    zone = UTC if isinstance(field.field_type, TimestamptzType) else None
    return (datetime(1970, 1, 1, tzinfo=zone) + timedelta(microseconds=cutoff)).isoformat()


def _commit(draft: SnapshotDraft, plan: _Plan, written: list[DataFile]) -> int:
    """One ``delete`` snapshot: dropped files out, position deletes in (new sequence number); on
    v3 the straddling files' earlier deletion vectors out, replaced by the new ones."""
    removed = {content_key(f) for f in (*plan.dropped, *plan.removed_deletes, *plan.replaced_vectors)}
    kept = (e.data_file for _, listed in plan.head for e in listed if content_key(e.data_file) not in removed)
    check_one_vector_per_data_file(".".join(draft.table.name()), [*kept, *written])
    carried, removed_files = draft.carry_over(plan.head, removed)
    added = [
        ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=draft.snapshot_id, data_file=f)
        for f in written
    ]
    manifests = draft.write_entries(added, added_sequence_number=None) + carried
    summary = draft.summary(
        Operation.DELETE,
        added=written,
        removed=removed_files,
        extra={SUMMARY_MAINTENANCE: MaintenanceJob.RETENTION.value},
    )
    return draft.commit(manifests, summary).snapshot_id
