"""Maintenance on format v3 tables written by Spark 3.5 with Iceberg 1.10 (merge-on-read, so
deletes are deletion vectors in Puffin files), checked by Iceberg Java.

Expiry, orphan cleanup and manifest rewrites run on v3: after each, Spark reads the same rows
with the same row lineage (``_row_id``, ``_last_updated_sequence_number``), the table's
``next-row-id`` still covers every id, and Spark can go on writing (a MERGE reads right).
Dangling-delete removal and data retention would remove or write delete files, which floe
does not do on v3 yet: they are refused by name, as optimizing is.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from conftest import JAN_1, V3_MOR, timestamped_spark_table
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import ManifestContent
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.table.snapshots import Operation
from pyspark.sql import SparkSession
from v3_lineage import lineage, merge_keeps_lineage

from floe.api.table import MaintenanceSpec
from floe.commit.snapshot import SnapshotDraft
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.maintenance.job import MaintenanceJob
from floe.maintenance.jobs import run_maintenance_job
from floe.tables.manifest_io import deletion_vector_location, manifest_first_row_id, snapshot_manifests
from floe.tables.pyiceberg_compat import allow_v3_metadata_writes
from floe.tables.scan import scan_table


def _spec(**jobs: dict[str, Any]) -> MaintenanceSpec:
    return MaintenanceSpec.model_validate(jobs)


def test_manifest_rewrite_keeps_row_lineage_and_spark_writes_on(
    v3_table: SqlCatalog, spark: SparkSession, reference: ReferenceReader
) -> None:
    before = lineage(spark, v3_table)
    table = v3_table.load_table("db.t")
    next_row_id = table.metadata.next_row_id
    assert next_row_id is not None
    manifests = snapshot_manifests(table.current_snapshot(), table.io, 3)  # type: ignore[arg-type]
    data_manifests = [m for m in manifests if m.content == ManifestContent.DATA]
    assert len(data_manifests) >= 4 and all(manifest_first_row_id(m) is not None for m in data_manifests)

    spec = _spec(manifests={"triggerSmallManifests": 2, "targetManifestSize": "8Mi"})
    report = run_maintenance_job(table, MaintenanceJob.MANIFESTS, spec, now_s=time.time())

    assert report.snapshot_id is not None, report.summary
    table = v3_table.load_table("db.t")
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.snapshot_id == report.snapshot_id
    after_manifests = snapshot_manifests(snapshot, table.io, 3)
    assert len(after_manifests) < len(manifests)
    # The merged data manifest took a new range of ids for its (existing) rows, as Iceberg
    # Java's writer does; the files in it kept the ids they had.
    assert snapshot.first_row_id == next_row_id and snapshot.added_rows
    assert table.metadata.next_row_id == next_row_id + snapshot.added_rows
    assert lineage(spark, v3_table) == before

    # Spark goes on: a MERGE updating some rows and inserting others, read back right.
    new_ids = merge_keeps_lineage(spark, v3_table, before)
    assert min(new_ids) >= table.metadata.next_row_id, "ids above every id floe's snapshot assigned"


def test_expiry_and_orphan_cleanup_keep_live_deletion_vectors(
    v3_table: SqlCatalog, spark: SparkSession, tmp_path: Path
) -> None:
    name = qualified_name(v3_table.name, "db.t")
    # A second UPDATE merges each touched file's deletion vector into a new Puffin file; the
    # old Puffin files are then referenced by older snapshots only.
    spark.sql(f"UPDATE {name} SET v = -2 WHERE id % 13 = 0")
    before = lineage(spark, v3_table)
    table = v3_table.load_table("db.t")
    location = Path(table.location().removeprefix("file://"))
    puffins = {p for p in location.rglob("*.puffin")}
    assert len(puffins) >= 3

    now = time.time()
    spec = _spec(snapshotRetention={"minSnapshots": 1, "maxAge": "1s"}, orphanFiles={"olderThan": "1h"})
    expired = run_maintenance_job(table, MaintenanceJob.EXPIRE, spec, now_s=now + 10)
    assert expired.files_removed > 0, expired.summary
    left = {p for p in location.rglob("*.puffin")}
    assert left and left < puffins, "the Puffin files only expired snapshots used are gone"
    assert lineage(spark, v3_table) == before

    # An orphan Puffin file (a writer that died before committing), old enough to remove.
    orphan = next(iter(left)).with_name("orphan-dv.puffin")
    orphan.write_bytes(next(iter(left)).read_bytes())
    old = now - 7200
    os.utime(orphan, (old, old))
    table = v3_table.load_table("db.t")
    cleaned = run_maintenance_job(table, MaintenanceJob.ORPHANS, spec, now_s=now)
    assert str(orphan) in {p.removeprefix("file://") for p in cleaned.paths}, cleaned.summary
    assert {p for p in location.rglob("*.puffin")} == left, "every live deletion vector stays"
    assert lineage(spark, v3_table) == before
    merge_keeps_lineage(spark, v3_table, before)


def test_retention_replaces_deletion_vectors_and_keeps_lineage(
    sql_catalog: SqlCatalog, spark: SparkSession
) -> None:
    """Rows older than the retention go: files wholly before the cutoff with their vectors, and
    in files that straddle it, a new vector holding the expired rows and the vector's own."""
    name = timestamped_spark_table(spark, sql_catalog, V3_MOR)
    spark.sql(f"DELETE FROM {name} WHERE id % 7 = 0")
    spark.sql(f"REFRESH TABLE {name}")
    query = f"SELECT id, _row_id, _last_updated_sequence_number FROM {name} ORDER BY id"
    before = [tuple(r) for r in spark.sql(query).collect()]
    cutoff = JAN_1 + 150 * 3600
    spec = _spec(dataRetention={"column": "ts", "olderThan": "1d"})

    report = run_maintenance_job(
        sql_catalog.load_table("db.t"), MaintenanceJob.RETENTION, spec, now_s=cutoff + 86400
    )

    assert report.snapshot_id is not None and report.rows_deleted > 0 and report.files_removed > 0, report
    spark.sql(f"REFRESH TABLE {name}")
    after = [tuple(r) for r in spark.sql(query).collect()]
    assert after == [row for row in before if row[0] >= 150], "the rest keep their lineage"
    files = scan_table(sql_catalog.load_table("db.t")).files
    targets = [f.referenced_data_file for f in files.delete_files]
    assert all(f.content_offset is not None for f in files.delete_files), "deletion vectors only"
    assert len(targets) == len(set(targets)), "never two vectors for one data file"
    # Spark writes on over retention's vectors: a MERGE deleting one row, updating others.
    spark.sql(
        f"MERGE INTO {name} t USING (SELECT id, timestamp_seconds({JAN_1} + 999 * 3600) AS ts "
        f"FROM range(150, 160)) s ON t.id = s.id "
        f"WHEN MATCHED AND t.id = 151 THEN DELETE WHEN MATCHED THEN UPDATE SET ts = s.ts"
    )
    merged = [tuple(r) for r in spark.sql(query).collect()]
    assert [r[0] for r in merged] == [r[0] for r in after if r[0] != 151]
    assert [r for r in merged if r[0] >= 160] == [r for r in after if r[0] >= 160]


def test_a_dangling_deletion_vector_goes_and_its_puffin_neighbours_stay(
    v3_table: SqlCatalog, spark: SparkSession
) -> None:
    """One Puffin file holds the vectors of several data files: removing one data file's vector
    must leave the others, which are the same file to a reader going by path."""
    table = v3_table.load_table("db.t")
    draft = SnapshotDraft(table=table, metadata=table.metadata)
    head = draft.head_entries()
    live = [e for _, entries in head for e in entries]
    vectors = {
        location: e.data_file for e in live if (location := deletion_vector_location(e.data_file)) is not None
    }
    puffins = Counter(vector.file_path for vector in vectors.values())
    shared = next(location for location, vector in vectors.items() if puffins[vector.file_path] >= 2)
    # Another engine's overwrite removes the data file and leaves its vector behind.
    manifests, _ = draft.carry_over(head, {shared[0]})
    draft.commit(manifests, draft.summary(Operation.OVERWRITE, added=[], removed=[], extra={}))
    before = lineage(spark, v3_table)

    report = run_maintenance_job(
        v3_table.load_table("db.t"), MaintenanceJob.DANGLING_DELETES, _spec(), now_s=time.time()
    )

    assert report.files_removed == 1 and report.snapshot_id is not None, report.summary
    left = scan_table(v3_table.load_table("db.t")).files.delete_files
    assert {f.referenced_data_file for f in left} == {location[0] for location in vectors} - {shared[0]}
    assert lineage(spark, v3_table) == before, "the other vectors in that Puffin file still delete their rows"
    merge_keeps_lineage(spark, v3_table, before)


def test_v3_metadata_written_by_floe_keeps_every_field_iceberg_java_wrote(v3_table: SqlCatalog) -> None:
    """pyiceberg refuses to serialize v3 metadata; floe lets it (`floe.tables.pyiceberg_compat`)
    because nothing is lost: Spark's metadata file comes back field for field."""
    allow_v3_metadata_writes()
    location = v3_table.load_table("db.t").metadata_location
    written = json.loads(Path(location.removeprefix("file:")).read_text())
    again = json.loads(TableMetadataUtil.parse_raw(json.dumps(written)).model_dump_json())
    for schema in again["schemas"]:
        # pyiceberg writes the empty default Java leaves out.
        if schema.get("identifier-field-ids") == [] and "identifier-field-ids" not in written["schemas"][0]:
            del schema["identifier-field-ids"]
    assert again == written
    assert written["format-version"] == 3 and written["next-row-id"] > 0
    assert all("first-row-id" in snapshot for snapshot in written["snapshots"])
