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
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import ManifestContent
from pyiceberg.table.metadata import TableMetadataUtil
from pyspark.sql import SparkSession
from test_engine import _table
from test_unsupported import _tick_until, engine  # noqa: F401  (engine: the fixture)

from floe.api.models import MaintenanceSpec
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.maintenance.jobs import run_maintenance_job
from floe.service.engine import EngineEvent, OptimizingEngine
from floe.tables.maintenance_job import MaintenanceJob
from floe.tables.manifest_io import manifest_first_row_id, snapshot_manifests
from floe.tables.support import UnsupportedTableError
from floe.tables.v3_metadata import allow_v3_metadata_writes

LINEAGE = "SELECT id, cat, v, _row_id, _last_updated_sequence_number FROM {} ORDER BY id"


def _lineage(spark: SparkSession, catalog: SqlCatalog) -> list[tuple[Any, ...]]:
    """Every row with its row id and last-updated sequence number, as Iceberg Java reads them."""
    spark.sql(f"REFRESH TABLE {qualified_name(catalog.name, 'db.t')}")
    return [tuple(r) for r in spark.sql(LINEAGE.format(qualified_name(catalog.name, "db.t"))).collect()]


def _spec(**jobs: dict[str, Any]) -> MaintenanceSpec:
    return MaintenanceSpec.model_validate(jobs)


def test_manifest_rewrite_keeps_row_lineage_and_spark_writes_on(
    v3_table: SqlCatalog, spark: SparkSession, reference: ReferenceReader
) -> None:
    before = _lineage(spark, v3_table)
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
    assert _lineage(spark, v3_table) == before

    # Spark goes on: a MERGE updating some rows and inserting others, read back right.
    name = qualified_name(v3_table.name, "db.t")
    spark.sql(
        f"MERGE INTO {name} t USING (SELECT id, CAST(id % 2 AS string) AS cat, id * 2.0 AS v "
        f"FROM range(390, 410)) s ON t.id = s.id "
        f"WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    )
    merged = {row[0]: row for row in _lineage(spark, v3_table)}
    old = {row[0]: row for row in before}
    inserted = sorted(set(range(390, 410)) - set(old))
    assert set(merged) == set(old) | set(inserted) and len(inserted) >= 10
    assert all(merged[i][2] == i * 2.0 for i in range(390, 410))
    untouched = [i for i in old if i < 390]
    assert [merged[i] for i in untouched] == [old[i] for i in untouched], "untouched rows keep their lineage"
    assert all(merged[i][3] == old[i][3] for i in old), "updated rows keep their row id"
    new_ids = [merged[i][3] for i in inserted]
    assert len(set(new_ids) | {old[i][3] for i in old}) == len(old) + len(inserted), "new rows get new ids"
    assert min(new_ids) >= table.metadata.next_row_id, "ids above every id floe's snapshot assigned"


def test_expiry_and_orphan_cleanup_keep_live_deletion_vectors(
    v3_table: SqlCatalog, spark: SparkSession, tmp_path: Path
) -> None:
    name = qualified_name(v3_table.name, "db.t")
    # A second UPDATE merges each touched file's deletion vector into a new Puffin file; the
    # old Puffin files are then referenced by older snapshots only.
    spark.sql(f"UPDATE {name} SET v = -2 WHERE id % 13 = 0")
    before = _lineage(spark, v3_table)
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
    assert _lineage(spark, v3_table) == before

    # An orphan Puffin file (a writer that died before committing), old enough to remove.
    orphan = next(iter(left)).with_name("orphan-dv.puffin")
    orphan.write_bytes(next(iter(left)).read_bytes())
    old = now - 7200
    os.utime(orphan, (old, old))
    table = v3_table.load_table("db.t")
    cleaned = run_maintenance_job(table, MaintenanceJob.ORPHANS, spec, now_s=now)
    assert str(orphan) in {p.removeprefix("file://") for p in cleaned.paths}, cleaned.summary
    assert {p for p in location.rglob("*.puffin")} == left, "every live deletion vector stays"
    assert _lineage(spark, v3_table) == before


@pytest.mark.parametrize("job", [MaintenanceJob.DANGLING_DELETES, MaintenanceJob.RETENTION])
def test_jobs_that_touch_delete_files_are_refused_on_v3(v3_table: SqlCatalog, job: MaintenanceJob) -> None:
    table = v3_table.load_table("db.t")
    spec = (
        _spec(dataRetention={"column": "v", "olderThan": "1d"})
        if job == MaintenanceJob.RETENTION
        else _spec()
    )
    with pytest.raises(UnsupportedTableError, match=rf"format version 3 \(the {job} job removes or writes"):
        run_maintenance_job(table, job, spec, now_s=time.time())
    assert v3_table.load_table("db.t").metadata_location == table.metadata_location


def test_the_engine_refuses_optimizing_a_v3_table_but_maintains_it(
    v3_table: SqlCatalog,
    engine: tuple[OptimizingEngine, list[EngineEvent]],  # noqa: F811
) -> None:
    built, events = engine
    maintenance = {
        "manifests": {"triggerSmallManifests": 2, "interval": "1h"},
        "danglingDeletes": {"interval": "1h"},
        "snapshotRetention": {"enabled": False},
        "orphanFiles": {"enabled": False},
    }
    runtime = built.apply_table(_table(v3_table, "g", maintenance=maintenance))
    _tick_until(built, lambda: MaintenanceJob.MANIFESTS in runtime.maintenance_runs)

    assert runtime.refusal.startswith("table db.t is not optimized: it uses format version 3")
    assert runtime.process_id is None
    run = runtime.maintenance_runs[MaintenanceJob.MANIFESTS]
    assert not run.failed and "manifest" in run.result, run
    assert MaintenanceJob.DANGLING_DELETES not in runtime.maintenance_runs, "refused on v3: never started"
    assert runtime.due_maintenance(time.time() + 7200) == MaintenanceJob.MANIFESTS
    assert [e.reason for e in events if e.kind == "Warning"] == ["Unsupported"]


def test_v3_metadata_written_by_floe_keeps_every_field_iceberg_java_wrote(v3_table: SqlCatalog) -> None:
    """pyiceberg refuses to serialize v3 metadata; floe lets it (`floe.tables.v3_metadata`)
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
