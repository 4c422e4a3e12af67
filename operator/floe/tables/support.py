"""What floe can optimize, decided before anything runs.

A table that uses a feature floe cannot handle is refused at planning time, in ``--dry-run``
too, with one sentence naming the table and the features, so no task is started and no
retry is spent on an error floe could have foreseen. What is refused: format versions other
than 1, 2 and 3, data and delete files that are neither Parquet nor (for position deletes)
v3 deletion vectors (ORC, Avro), column types the rewrite cannot carry (v3's ``variant``,
``geometry``, ``geography``, ``unknown``, nanosecond timestamps), partition or sort
transforms floe does not know, and v3 tables with encryption keys (floe writes unencrypted
manifests, and pyiceberg drops the keys when it rewrites the metadata).
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence

from pyiceberg.io import FileIO
from pyiceberg.manifest import FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import Compressor
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import UnknownTransform
from pyiceberg.types import (
    GeographyType,
    GeometryType,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    StructType,
    TimestampNanoType,
    TimestamptzNanoType,
    UnknownType,
)

from floe.planning.files import FileKind, TableFiles
from floe.tables.pyiceberg_compat import unknown_transform_name
from floe.tables.scan import ScannedTable, scan_table

SUPPORTED_FORMAT_VERSIONS = (1, 2, 3)
"""The format versions floe optimizes and maintains (v3: deletion vectors and row lineage)."""
_UNSUPPORTED_TYPES = (TimestampNanoType, TimestamptzNanoType, UnknownType, GeometryType, GeographyType)
_FILE_KIND_NAMES = {
    FileKind.DATA: "data files",
    FileKind.POSITION_DELETES: "position-delete files",
    FileKind.EQUALITY_DELETES: "equality-delete files",
}
# How pyiceberg says it could not read a schema type it does not know (``variant``, or a
# ``geometry(...)`` with parameters): the type is quoted in the message.
_UNREADABLE_TYPE = re.compile(r"Unsupported field type: '([^']+)'|Could not parse (\S+) into a")
_ENCRYPTION_VERSION = 3
"""The first format version whose metadata holds encryption keys."""
_ENCRYPTION_CACHE_SIZE = 4096


class UnsupportedTableError(RuntimeError):
    """The table uses features floe cannot handle; nothing was planned, run or committed."""

    def __init__(
        self,
        table: str,
        features: Sequence[str],
        files: TableFiles | None = None,
        metadata_location: str | None = None,
    ) -> None:
        self.table = table
        self.features = tuple(features)
        self.files = files
        """The live files, when the table was scanned before it was refused."""
        self.metadata_location = metadata_location
        """The metadata file the refusal was made from, when it was read."""
        super().__init__(
            f"table {table} is not optimized: it uses {_join(self.features)}, which floe does not support"
        )


def unsupported_features(
    metadata: TableMetadata,
    file_formats: Iterable[tuple[FileKind, FileFormat]] = (),
    spec_ids: Iterable[int] = (),
) -> list[str]:
    """The features of a table floe cannot handle, each named for a user; empty when it can.

    `file_formats` are the (kind, format) pairs of the live files, `spec_ids` the partition
    specs they were written with; the table's default spec and sort order are always checked,
    since rewritten files may be laid out by them.
    """
    features = []
    version = metadata.format_version
    if version not in SUPPORTED_FORMAT_VERSIONS:
        features.append(f"format version {version}")
    for kind, file_format in sorted(set(file_formats), key=lambda pair: (pair[0].value, pair[1].value)):
        if file_format == FileFormat.PUFFIN and kind == FileKind.POSITION_DELETES:
            continue  # deletion vectors: read and applied like position deletes
        if file_format != FileFormat.PARQUET:
            features.append(f"{file_format.value} {_FILE_KIND_NAMES[kind]}")
    features.extend(_unsupported_columns(metadata.schema()))
    specs = metadata.specs()
    for spec_id in sorted({*spec_ids, metadata.default_spec_id}):
        features.extend(_unknown_partition_transforms(specs[spec_id]))
    sort_order = metadata.sort_order()
    features.extend(
        f"sort order {sort_order.order_id} with the unknown transform {unknown_transform_name(f.transform)}"
        for f in sort_order.fields
        if isinstance(f.transform, UnknownTransform)
    )
    return features


class _EncryptionFeatures:
    """What the metadata file at each location says about encryption, read once per location
    (metadata files never change) and for the most recent locations only."""

    def __init__(self) -> None:
        self._known: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, table: Table) -> tuple[str, ...]:
        """The encryption features of `table`'s current metadata file (none before format v3,
        whose metadata has no such fields, nor without a known metadata file)."""
        location = table.metadata_location
        if table.metadata.format_version < _ENCRYPTION_VERSION or not location:
            return ()
        with self._lock:
            known = self._known.get(location)
            if known is not None:
                self._known.move_to_end(location)
                return known
        found = _encryption_features(table.io, location)
        with self._lock:
            self._known[location] = found
            while len(self._known) > _ENCRYPTION_CACHE_SIZE:
                self._known.popitem(last=False)
        return found


_encryption = _EncryptionFeatures()


def _encryption_features(io: FileIO, location: str) -> tuple[str, ...]:
    """The encryption fields of a metadata file: top-level ``encryption-keys`` and snapshots'
    ``key-id`` (as Iceberg Java's TableMetadataParser and SnapshotParser name them). pyiceberg's
    model does not keep them, so the file's JSON is read as it is."""
    with (
        io.new_input(location).open() as stream,
        Compressor.get_compressor(location).stream_decompressor(stream) as content,
    ):
        document = json.loads(content.read())
    features = []
    if document.get("encryption-keys"):
        features.append("encryption keys (encryption-keys)")
    if any(s.get("key-id") is not None for s in document.get("snapshots") or ()):
        features.append("snapshots encrypted with a key (key-id)")
    return tuple(features)


def check_supported(table_name: str, table: Table, scanned: ScannedTable | None = None) -> None:
    """Raise `UnsupportedTableError` naming the table and what it uses that floe cannot handle;
    without `scanned`, only what the metadata says is checked (not the live files' formats)."""
    if scanned is None:
        features = unsupported_features(table.metadata)
    else:
        features = unsupported_features(table.metadata, scanned.file_formats, scanned.spec_ids)
    features.extend(_encryption.of(table))
    if features:
        files = scanned.files if scanned else None
        raise UnsupportedTableError(table_name, features, files, table.metadata_location)


def scan_supported(table_name: str, table: Table) -> ScannedTable:
    """Scan the current snapshot of a table floe can handle; otherwise `UnsupportedTableError`
    naming everything it cannot, from the metadata and from the live files alike."""
    try:
        scanned = scan_table(table)
    except Exception:
        refused = [*unsupported_features(table.metadata), *_encryption.of(table)]
        if refused:
            # The manifests of an unsupported format may not even be readable: the metadata
            # already says why the table is refused.
            raise UnsupportedTableError(table_name, refused, None, table.metadata_location) from None
        raise
    check_supported(table_name, table, scanned)
    return scanned


def unreadable_schema_type(error: BaseException) -> str | None:
    """The schema type pyiceberg failed on, when `error` is pyiceberg refusing a table's metadata
    for a type it cannot parse (v3's ``variant``); None for any other error."""
    match = _UNREADABLE_TYPE.search(str(error))
    if match is None:
        return None
    return match.group(1) or match.group(2)


def _unsupported_columns(schema: Schema) -> Iterator[str]:
    for path, field_type in _leaf_types(schema.as_struct(), ()):
        if isinstance(field_type, _UNSUPPORTED_TYPES):
            yield f"column {'.'.join(path)!r} of type {field_type}"


def _leaf_types(
    field_type: IcebergType, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], IcebergType]]:
    """Every type in a schema with the path of names that reaches it (``element``, ``key`` and
    ``value`` for list and map members, as Iceberg names them)."""
    if isinstance(field_type, StructType):
        for nested in field_type.fields:
            yield from _leaf_types(nested.field_type, (*path, nested.name))
    elif isinstance(field_type, ListType):
        yield from _leaf_types(field_type.element_type, (*path, "element"))
    elif isinstance(field_type, MapType):
        yield from _leaf_types(field_type.key_type, (*path, "key"))
        yield from _leaf_types(field_type.value_type, (*path, "value"))
    elif not isinstance(field_type, NestedField):
        yield path, field_type


def _unknown_partition_transforms(spec: PartitionSpec) -> Iterator[str]:
    for partition_field in spec.fields:
        if isinstance(partition_field.transform, UnknownTransform):
            yield (
                f"partition field {partition_field.name!r} (spec {spec.spec_id}) with the unknown "
                f"transform {unknown_transform_name(partition_field.transform)}"
            )


def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
