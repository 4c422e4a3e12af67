"""Every contact floe has with pyiceberg's private API, for the pyiceberg it was tested with.

pyiceberg 0.12 lacks some of what floe needs (writing format v3 metadata, manifests and manifest
lists; delete manifests; a table load that sends and reads an ETag), and keeps some of what floe
reuses private (its Arrow writers and schema projection, manifest inheritance, its REST session).
Each function or class here stands in for one such internal, named in its comment, and no other
floe module touches pyiceberg's private names (`tests/test_code_shape.py` checks this, and that
the installed pyiceberg is `PYICEBERG_TESTED`): a pyiceberg upgrade reviews this module only.

Importing `floe.tables` applies `allow_v3_metadata_writes`, so every floe process can write v3
table metadata before its first commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Literal

import pyarrow as pa
import requests
from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.avro.file import AvroOutputFile
from pyiceberg.catalog.rest import SNAPSHOT_LOADING_MODE, Endpoints, RestCatalog, TableResponse
from pyiceberg.catalog.rest.response import _handle_non_200_response
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.io.pyarrow import _dataframe_to_data_files, _determine_partitions, _TablePartition
from pyiceberg.io.pyarrow import _to_requested_schema as _pyiceberg_to_requested_schema
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
    ManifestListWriterV2,
    ManifestWriter,
    ManifestWriterV2,
    _inherit_from_manifest,
    write_manifest,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataV3
from pyiceberg.transforms import UnknownTransform
from pyiceberg.typedef import IcebergBaseModel, TableVersion
from pyiceberg.types import IntegerType, ListType, NestedField, StructType
from requests import HTTPError

PYICEBERG_TESTED: Final = "0.12.0"
"""The pyiceberg release this module was written against and floe's tests run with."""

ROW_LINEAGE_VERSION: Final[Literal[3]] = 3
"""The first format version with row lineage and deletion vectors."""

# Positions of the v3 fields in pyiceberg's records read with the v3 schemas: pyiceberg 0.12's
# ManifestFile and DataFile have no attributes for them.
V3_MANIFEST_FIRST_ROW_ID: Final = 15
V3_FILE_FIRST_ROW_ID: Final = 16
V3_FILE_REFERENCED_DATA_FILE: Final = 17
V3_FILE_CONTENT_OFFSET: Final = 18
V3_FILE_CONTENT_SIZE: Final = 19

V3_DATA_FILE_FIELDS: Final = len(DATA_FILE_TYPE[ROW_LINEAGE_VERSION].fields)
V3_MANIFEST_FIELDS: Final = len(MANIFEST_LIST_FILE_SCHEMAS[ROW_LINEAGE_VERSION].fields)


class RowIdsUnassignable(ValueError):
    """A data manifest has neither a ``first_row_id`` nor the row counts to assign one from."""


# -- Reading and writing data (pyiceberg.io.pyarrow) --------------------------------------------


def to_requested_schema(requested: Schema, file_schema: Schema, batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch`, read with `file_schema`, projected onto `requested` as pyiceberg's scans project it
    (nanosecond timestamps cut to microseconds, a timestamp's zone allowed to differ)."""
    # pyiceberg.io.pyarrow._to_requested_schema: the projection its own reads use.
    return _pyiceberg_to_requested_schema(
        requested,
        file_schema,
        batch,
        downcast_ns_timestamp_to_us=True,
        allow_timestamp_tz_mismatch=True,
    )


def dataframe_to_data_files(metadata: TableMetadata, rows: pa.Table, io: FileIO) -> Iterable[DataFile]:
    """Data files holding `rows`, split and sized as pyiceberg's appends write them (not committed)."""
    # pyiceberg.io.pyarrow._dataframe_to_data_files: the writer behind Table.append.
    return _dataframe_to_data_files(metadata, rows, io)


def determine_partitions(spec: PartitionSpec, schema: Schema, rows: pa.Table) -> Iterable[_TablePartition]:
    """`rows` split by `spec`, each part with its ``partition_key`` and ``arrow_table_partition``."""
    # pyiceberg.io.pyarrow._determine_partitions: the partition split behind Table.append.
    return _determine_partitions(spec, schema, rows)


# -- Manifests (pyiceberg.manifest) ---------------------------------------------------------------


def inherit_from_manifest(entry: ManifestEntry, manifest: ManifestFile) -> ManifestEntry:
    """`entry` with what it inherits from `manifest`: sequence numbers and spec id."""
    # pyiceberg.manifest._inherit_from_manifest: what ManifestFile.fetch_manifest_entry applies.
    return _inherit_from_manifest(entry, manifest)


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

    # Overrides pyiceberg's private ManifestWriter._meta (the Avro file's key-value metadata).
    @property
    def _meta(self) -> dict[str, str]:
        return {
            **super()._meta,
            "content": "deletes" if self.manifest_content == ManifestContent.DELETES else "data",
        }

    # Overrides pyiceberg's private ManifestWriter._with_partition (the entry schema it writes).
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
        # Reads pyiceberg's private ManifestWriter._output_file, as its own new_writer does.
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


def manifest_writer(
    format_version: TableVersion,
    content: ManifestContent,
    spec: PartitionSpec,
    schema: Schema,
    output: OutputFile,
    snapshot_id: int,
    compression: AvroCompressionCodec,
) -> ManifestWriter:
    """A writer for a new manifest of `content` in a table of `format_version`: pyiceberg's own
    for v1 and v2 data manifests, floe's for delete manifests and for every v3 manifest (both
    with the spec's ``equality_ids`` type)."""
    if format_version >= ROW_LINEAGE_VERSION:
        writer = _DeleteManifestWriterV3 if content == ManifestContent.DELETES else _DataManifestWriterV3
        return writer(spec, schema, output, snapshot_id, compression)
    if content == ManifestContent.DELETES:
        return _DeleteManifestWriterV2(spec, schema, output, snapshot_id, compression)
    return write_manifest(format_version, spec, schema, output, snapshot_id, compression)


class ManifestListWriterV3(ManifestListWriterV2):
    """A v3 manifest list: v2's, plus a ``first_row_id`` for each data manifest without one.

    As the spec's "First Row ID Assignment" says: ids start at the table's ``next-row-id`` and
    each assigned manifest takes as many as it holds added and existing rows; `added_rows` is
    the number taken, the snapshot's ``added-rows``. A data manifest without those counts
    raises `RowIdsUnassignable`.
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
        # Sets pyiceberg's private ManifestListWriter._format_version and ._meta, which its
        # v2 writer fixes to 2 (pyiceberg 0.12 has no v3 manifest list writer).
        self._format_version = ROW_LINEAGE_VERSION
        self._meta = {**self._meta, "format-version": "3", "first-row-id": str(first_row_id)}
        self.first_row_id = first_row_id
        self.next_row_id = first_row_id

    @property
    def added_rows(self) -> int:
        """Row ids assigned so far."""
        return self.next_row_id - self.first_row_id

    def __enter__(self) -> ManifestListWriterV3:
        # Sets pyiceberg's private ManifestListWriter._writer, as its __enter__ does, with the v3 schema.
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
                raise RowIdsUnassignable(
                    f"data manifest {prepared.manifest_path} has no first_row_id and no row counts "
                    "(written before format v2): its rows cannot be given row ids"
                )
            fields[V3_MANIFEST_FIELDS - 1] = self.next_row_id
            self.next_row_id += (prepared.added_rows_count or 0) + (prepared.existing_rows_count or 0)
        return ManifestFile(*fields)


# -- Table metadata (pyiceberg.table.metadata) ----------------------------------------------------


def _metadata_json(
    self: TableMetadataV3,
    exclude_none: bool = True,
    exclude: Any | None = None,
    by_alias: bool = True,
    **kwargs: Any,
) -> str:
    return IcebergBaseModel.model_dump_json(
        self, exclude_none=exclude_none, exclude=exclude, by_alias=by_alias, **kwargs
    )


def allow_v3_metadata_writes() -> None:
    """Make pyiceberg serialize v3 table metadata (idempotent; for the whole process).

    pyiceberg 0.12 parses v3 metadata (``next-row-id``, snapshots' ``first-row-id`` and
    ``added-rows``) and applies a v3 snapshot update right, raising ``next-row-id``, but its
    ``TableMetadataV3.model_dump_json`` refuses to run, so a catalog that writes the metadata file
    itself (SQL, Glue, Hive; not REST, where the server writes it) cannot commit to a v3 table.
    The refusal is a blanket guard: serialized by pydantic as v1 and v2 metadata are, a metadata
    file written by Iceberg Java 1.10 comes back with every field it had
    (`tests/test_v3_maintenance.py` checks this on one Spark writes). Snapshots floe adds carry v3
    manifests and manifest lists it writes itself (`manifest_writer`, `ManifestListWriterV3`);
    expiry's commit changes the metadata only.
    """
    # Patches pyiceberg's TableMetadataV3.model_dump_json, process-wide, with the v2 serializer's.
    if TableMetadataV3.model_dump_json is not _metadata_json:
        TableMetadataV3.model_dump_json = _metadata_json  # type: ignore[method-assign]


# -- The REST catalog (pyiceberg.catalog.rest) ----------------------------------------------------


def rest_load_response(catalog: RestCatalog, identifier: str, etag: str | None) -> requests.Response:
    """The REST catalog's answer to loading `identifier`, asked with ``If-None-Match: etag`` when
    given: the request pyiceberg's `RestCatalog.load_table` sends, its snapshot mode included."""
    # Uses pyiceberg's private RestCatalog._split_identifier_for_path and ._session (its
    # authenticated HTTP session), since load_table sends no header and returns no response.
    mode = catalog.properties.get(SNAPSHOT_LOADING_MODE)
    params = {"snapshots": mode} if mode in {"all", "refs"} else {}
    url = catalog.url(Endpoints.load_table, prefixed=True, **catalog._split_identifier_for_path(identifier))
    return catalog._session.get(url, params=params, headers={"If-None-Match": etag} if etag else {})


def rest_session(catalog: RestCatalog) -> requests.Session:
    """The REST catalog's HTTP session, through which all its later calls go (pyiceberg's private
    `RestCatalog._session`): a request budget mounts its adapter there."""
    return catalog._session


def raise_rest_error(exc: HTTPError, errors: dict[int, type[Exception]]) -> None:
    """Raise the pyiceberg error a failed REST response stands for (`errors` by status code first),
    as pyiceberg's catalog calls do."""
    # pyiceberg.catalog.rest.response._handle_non_200_response.
    _handle_non_200_response(exc, errors)


def rest_table(catalog: RestCatalog, identifier: str, response: requests.Response) -> Table:
    """The table a successful REST load `response` holds, as `RestCatalog.load_table` builds it
    (its storage credentials and FileIO included)."""
    # pyiceberg's private RestCatalog._response_to_table.
    return catalog._response_to_table(
        catalog.identifier_to_tuple(identifier), TableResponse.model_validate_json(response.text)
    )


# -- Transforms (pyiceberg.transforms) ------------------------------------------------------------


def unknown_transform_name(transform: UnknownTransform[Any, Any]) -> str:
    """The transform name pyiceberg could not parse (it prints every one as "unknown")."""
    # Reads pyiceberg's private UnknownTransform._transform.
    return str(getattr(transform, "_transform", transform))
