"""Commits floe refuses because the table changed under the process, or because the snapshot
would break a reader: the format version or a file's row ids changed since planning, a data
manifest without row counts on v3, a second deletion vector for one data file. Nothing is
committed, and Iceberg Java reads the table as before."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestFile
from pyiceberg.table.snapshots import Operation
from pyspark.sql import SparkSession
from test_cdc_positions import cdc_table
from test_conversion_commits import spark_table
from test_correctness import LAYOUTS, MOR, SCHEMA, Writer, data_files_on_disk

from floe.commit.request import CommitConflict, RewriteRequest
from floe.commit.rewrite import commit_rewrite
from floe.commit.snapshot import SnapshotDraft, SnapshotRefused
from floe.local.optimize import optimize_once
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.planning.config import OptimizingConfig
from floe.planning.plan import POSITIONS, OptimizingPlan, OptimizingType
from floe.tables.history import SUMMARY_PROCESS_ID
from floe.tables.manifest_io import deletion_vector_location, file_first_row_id
from floe.tables.scan import live_entries
from floe.tables.writer import write_deletion_vector_file

CONFIG = OptimizingConfig(target_size=16 * 1024, fragment_ratio=8, max_task_size_bytes=16 * 1024)


def _upgrade_to_v3(spark: SparkSession, catalog: SqlCatalog) -> None:
    spark.sql(
        f"ALTER TABLE {qualified_name(catalog.name, 'db.t')} SET TBLPROPERTIES ('format-version' = '3')"
    )


def test_a_table_upgraded_to_v3_during_a_conversion_gets_no_parquet_position_deletes(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table, _ = cdc_table(sql_catalog)
    files_before = data_files_on_disk(table)
    before = reference.rows(sql_catalog.name, "db.t")

    def upgrade(plan: OptimizingPlan) -> None:
        assert any(task.kind == POSITIONS for task in plan.tasks)
        _upgrade_to_v3(spark, sql_catalog)

    with pytest.raises(CommitConflict, match="format version changed from 2 to 3 since planning"):
        optimize_once(table, "db.t", CONFIG, spark=lambda: spark, on_plan=upgrade)

    table = sql_catalog.load_table("db.t")
    assert table.metadata.format_version == 3
    assert not [s for s in table.metadata.snapshots if s.summary and s.summary.get(SUMMARY_PROCESS_ID)]
    assert data_files_on_disk(table) <= files_before, "the process's files were left behind"
    assert reference.rows(sql_catalog.name, "db.t") == before


def test_rows_read_without_row_ids_are_not_committed_once_another_commit_gave_them_ids(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table = sql_catalog.create_table("db.t", SCHEMA, partition_spec=LAYOUTS["identity"], properties=MOR)
    writer = Writer(table)
    for _ in range(6):
        writer.append(20)
    _upgrade_to_v3(spark, sql_catalog)  # the files have no first_row_id: no v3 snapshot yet
    table = sql_catalog.load_table("db.t")
    name = qualified_name(sql_catalog.name, "db.t")

    def insert(plan: OptimizingPlan) -> None:
        # Spark's first v3 snapshot gives every existing row an id (its manifest list assigns them).
        spark.sql(f"INSERT INTO {name} VALUES (100000, 'a', TIMESTAMP_NTZ '2024-05-01 00:00:00', 1.0, 'x')")

    with pytest.raises(CommitConflict, match=r"has first_row_id \d+ where it had None at planning"):
        optimize_once(table, "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.FULL, on_plan=insert)

    ids = spark.sql(f"SELECT id, _row_id FROM {name}").collect()
    table = sql_catalog.load_table("db.t")
    assert table.current_snapshot() is not None
    assert not [s for s in table.metadata.snapshots if s.summary and s.summary.get(SUMMARY_PROCESS_ID)]
    assert len({row[1] for row in ids}) == len(ids) == 121


def test_a_v3_data_manifest_without_row_counts_or_first_row_id_is_refused(
    sql_catalog: SqlCatalog, spark: SparkSession
) -> None:
    table = spark_table(sql_catalog, spark, version=3)
    head = table.current_snapshot()
    assert head is not None
    draft = SnapshotDraft(table=table, metadata=table.metadata)
    manifests = draft.manifests(head)
    data = next(i for i, m in enumerate(manifests) if m.content == ManifestContent.DATA)
    # As a manifest list written before format v2 left it: optional counts, no first_row_id.
    fields = [manifests[data][i] for i in range(len(manifests[data]))]
    fields[10] = fields[11] = fields[15] = None  # added_rows_count, existing_rows_count, first_row_id
    manifests[data] = ManifestFile(*fields)
    summary = draft.summary(Operation.REPLACE, added=[], removed=[], extra={})

    with pytest.raises(SnapshotRefused, match="has no first_row_id and no row counts"):
        draft.commit(manifests, summary)
    draft.discard()

    assert sql_catalog.load_table("db.t").current_snapshot() == head


def test_a_second_deletion_vector_for_a_data_file_is_never_committed(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table = spark_table(sql_catalog, spark, version=3)
    spark.sql(f"DELETE FROM {qualified_name(sql_catalog.name, 'db.t')} WHERE id = 4")
    table = sql_catalog.load_table("db.t")
    head = table.current_snapshot()
    assert head is not None
    before = reference.rows(sql_catalog.name, "db.t")
    entries = live_entries(table, head.snapshot_id)
    vector = next(e.data_file for e in entries if e.data_file.content == DataFileContent.POSITION_DELETES)
    location = deletion_vector_location(vector)
    assert location is not None
    target = next(e.data_file for e in entries if e.data_file.file_path == location[0])
    # A conversion that did not take the file's vector in: its new one would be a second.
    request = RewriteRequest(
        process_id="db.t-one-vector",
        optimizing_type="minor",
        starting_snapshot_id=head.snapshot_id,
        starting_sequence_number=head.sequence_number or 0,
        rewritten_data_paths=frozenset(),
        candidate_delete_paths=frozenset(),
        added_files=(write_deletion_vector_file(table, target, pa.array([0], pa.int64())),),
        format_version=3,
        converted_data_paths=frozenset({target.file_path}),
        planned_first_row_ids={target.file_path: file_first_row_id(target)},
    )

    with pytest.raises(CommitConflict, match=f"two deletion vectors for data file {target.file_path}"):
        commit_rewrite(table, request)

    assert sql_catalog.load_table("db.t").current_snapshot() == head
    assert reference.rows(sql_catalog.name, "db.t") == before
