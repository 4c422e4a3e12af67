"""Every maintenance job on a format v3 table that Spark 3.5 + Iceberg 1.10 wrote, each in a fresh
floe process, through each catalog type that can run here, judged by Iceberg Java.

pyiceberg refuses to write v3 metadata unless floe lets it (`floe.tables.pyiceberg_compat`); a job
that commits through pyiceberg's own path (expiry) in a process where nothing else committed
first must find it allowed. So every job runs as a process of its own: ``floe optimize --type
JOB`` through the installed ``floe`` entry point for the SQL catalog (a SQLite file), the REST
catalog (Iceberg's REST server on moto's S3) and the Hive catalog (Hive 2.3.9's metastore,
`hive_server`), and `in_memory_maintenance` for pyiceberg's in-memory catalog, which no second
process can reach. After each job Iceberg Java reads the table: the same rows with the same row
lineage (``_row_id``, ``_last_updated_sequence_number``), less exactly the rows retention
removes. docs/how-to/catalogs.md says why Glue, DynamoDB and BigQuery are not among them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import V3_MOR
from hive_server import hive_metastore
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from rest_s3 import RestS3Stack, rest_s3_stack, s3_filesystem

import floe
import floe_optimizer
from floe.commit.snapshot import SnapshotDraft
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.tables.manifest_io import deletion_vector_location
from floe.tables.scan import scan_table

FLOE = Path(sys.executable).with_name("floe")
IN_MEMORY_JOB = Path(__file__).with_name("in_memory_maintenance.py")
REST_CATALOG = "rest_v3_jobs"
HIVE_CATALOG = "hive_v3_jobs"
JAN_1 = 1_704_067_200
"""2024-01-01T00:00:00Z: row ``id`` has ``ts`` ``id`` hours later."""
KEPT_FROM_ID = 151
"""Retention's cutoff lies half an hour after row 150's ``ts``: rows from 151 on stay."""
Row = tuple[Any, ...]


def _environment() -> dict[str, str]:
    """The floe this test imports, on a fresh interpreter: nothing this test process did carries over."""
    roots = (str(Path(floe.__file__).parents[1]), str(Path(floe_optimizer.__file__).parents[1]))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(roots)}


@dataclass
class V3Catalog:
    """One catalog holding the v3 table ``db.t``, and how a fresh process runs a job on it."""

    name: str
    client: Callable[[], Catalog]
    run_job: Callable[[str, dict[str, Any]], str]
    plant_orphan: Callable[[Table], str]
    orphans_age: bool
    """Whether a planted file can be made older than the minimum orphan age (not on S3)."""

    def table(self) -> Table:
        """``db.t`` as the catalog has it now."""
        return self.client().load_table("db.t")


def _cli_flags(spec: dict[str, Any]) -> list[str]:
    """`floe optimize` flags for a one-job ``spec.maintenance``."""
    flag_of = {
        "maxAge": "--max-age",
        "minSnapshots": "--min-snapshots",
        "triggerSmallManifests": "--manifest-trigger",
        "column": "--column",
        "olderThan": "--older-than",
    }
    return [
        part for job in spec.values() for key, value in job.items() for part in (flag_of[key], str(value))
    ]


def _floe_optimize(config: Path) -> Callable[[str, dict[str, Any]], str]:
    def run(job: str, spec: dict[str, Any]) -> str:
        command = [str(FLOE), "optimize", "--catalog-config", str(config), "db.t", "--type", job]
        environment = _environment()
        done = subprocess.run(
            [*command, *_cli_flags(spec)], env=environment, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"floe optimize --type {job} exited {done.returncode}:\n{done.stderr}"
        return done.stdout

    return run


def _write_config(path: Path, name: str, properties: dict[str, str]) -> Path:
    path.write_text(yaml.safe_dump({"name": name, **properties}))
    return path


def _plant_local(table: Table) -> str:
    """A crashed writer's file, two hours old, in the table's data directory."""
    # file:///tmp/... from pyiceberg, file:/tmp/... from Iceberg Java's Hive catalog.
    path = Path(table.location().removeprefix("file:")) / "data" / "crashed-writer.parquet"
    path.write_bytes(b"orphan")
    old = time.time() - 7200
    os.utime(path, (old, old))
    return f"file://{path}"


def _write_v3_table(reference: ReferenceReader, catalog: str) -> None:
    """Spark writes ``db.t``: four appends, then a DELETE and an UPDATE as deletion vectors."""
    name = qualified_name(catalog, "db.t")
    reference.sql(
        f"CREATE TABLE {name} (id bigint, cat string, ts timestamp) USING iceberg "
        f"PARTITIONED BY (cat) TBLPROPERTIES ({V3_MOR})"
    )
    for start in range(0, 400, 100):
        reference.sql(
            f"INSERT INTO {name} SELECT id, CAST(id % 2 AS string), timestamp_seconds({JAN_1} + id * 3600) "
            f"FROM range({start}, {start + 100})"
        )
    reference.sql(f"DELETE FROM {name} WHERE id % 7 = 0")
    reference.sql(f"UPDATE {name} SET cat = cat WHERE id % 11 = 0")


def _lineage(reference: ReferenceReader, catalog: str) -> list[Row]:
    name = qualified_name(catalog, "db.t")
    reference.sql(f"REFRESH TABLE {name}")
    return reference.sql(f"SELECT *, _row_id, _last_updated_sequence_number FROM {name} ORDER BY id")


def _leave_a_dangling_vector(table: Table) -> str:
    """Another engine's overwrite removes a data file that has a deletion vector and leaves the
    vector; returns the data file's path."""
    draft = SnapshotDraft(table=table, metadata=table.metadata)
    head = draft.head_entries()
    target = next(
        location[0]
        for _, entries in head
        for entry in entries
        if (location := deletion_vector_location(entry.data_file)) is not None
    )
    manifests, _ = draft.carry_over(head, {target})
    draft.commit(manifests, draft.summary(Operation.OVERWRITE, added=[], removed=[], extra={}))
    return target


def _every_job_keeps_the_rows(catalog: V3Catalog, reference: ReferenceReader) -> None:
    """Run manifest rewrite, dangling-delete removal, retention, expiry and orphan cleanup, each
    in a fresh process, and check after each what Iceberg Java reads."""
    lineage = _lineage(reference, catalog.name)
    assert len(lineage) > 300 and catalog.table().metadata.format_version == 3

    start = catalog.table()
    catalog.run_job("manifests", {"manifests": {"triggerSmallManifests": 2}})
    after = catalog.table()
    assert after.current_snapshot().snapshot_id != start.current_snapshot().snapshot_id  # type: ignore[union-attr]
    assert _lineage(reference, catalog.name) == lineage

    target = _leave_a_dangling_vector(after)
    lineage = _lineage(reference, catalog.name)
    catalog.run_job("dangling-deletes", {})
    vectors = scan_table(catalog.table()).files.delete_files
    assert vectors and target not in {f.referenced_data_file for f in vectors}
    assert _lineage(reference, catalog.name) == lineage

    older_than = int(time.time() - (JAN_1 + (KEPT_FROM_ID - 0.5) * 3600))
    catalog.run_job("retention", {"dataRetention": {"column": "ts", "olderThan": f"{older_than}s"}})
    kept = [row for row in lineage if row[0] >= KEPT_FROM_ID]
    assert kept and len(kept) < len(lineage)
    assert _lineage(reference, catalog.name) == kept, "the rest keep their lineage"

    head = catalog.table().current_snapshot()
    assert head is not None
    time.sleep(max(0.0, head.timestamp_ms / 1000 + 1.5 - time.time()))  # every snapshot older than 1s
    catalog.run_job("expire", {"snapshotRetention": {"maxAge": "1s", "minSnapshots": 1}})
    assert [s.snapshot_id for s in catalog.table().snapshots()] == [head.snapshot_id]
    assert _lineage(reference, catalog.name) == kept

    orphan = catalog.plant_orphan(catalog.table())
    output = catalog.run_job("orphans", {"orphanFiles": {"olderThan": "1h"}})
    assert catalog.table().io.new_input(orphan).exists() is not catalog.orphans_age, output
    assert _lineage(reference, catalog.name) == kept


def test_every_job_through_a_sql_catalog(
    sql_catalog: SqlCatalog, reference: ReferenceReader, tmp_path: Path
) -> None:
    _write_v3_table(reference, sql_catalog.name)
    config = _write_config(tmp_path / "catalog.yaml", sql_catalog.name, dict(sql_catalog.properties))
    catalog = V3Catalog(
        sql_catalog.name, lambda: sql_catalog, _floe_optimize(config), _plant_local, orphans_age=True
    )
    _every_job_keeps_the_rows(catalog, reference)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestS3Stack]:
    """moto and the REST catalog on loopback, for this module's tests."""
    with rest_s3_stack("127.0.0.1", tmp_path_factory.mktemp("rest-s3")) as running:
        yield running


def test_every_job_through_a_rest_catalog_on_s3(
    stack: RestS3Stack, reference: ReferenceReader, tmp_path: Path
) -> None:
    reference.register_catalog(REST_CATALOG, stack.properties)
    stack.client(REST_CATALOG).create_namespace("db")
    _write_v3_table(reference, REST_CATALOG)
    config = _write_config(tmp_path / "catalog.yaml", REST_CATALOG, stack.properties)

    def plant(table: Table) -> str:
        # S3 objects cannot be made older: this one is younger than the minimum age and stays.
        location = f"{table.location()}/data/crashed-writer.parquet"
        with s3_filesystem(stack.moto.endpoint).open_output_stream(location.removeprefix("s3://")) as out:
            out.write(b"orphan")
        return location

    catalog = V3Catalog(
        REST_CATALOG, lambda: stack.client(REST_CATALOG), _floe_optimize(config), plant, orphans_age=False
    )
    _every_job_keeps_the_rows(catalog, reference)


def test_every_job_through_an_in_memory_catalog(sql_catalog: SqlCatalog, reference: ReferenceReader) -> None:
    """The in-memory catalog exists in one process only: each job's process registers the table
    at its current metadata file, and the SQL catalog Iceberg Java reads through is pointed at
    the metadata file the job's commit wrote."""
    _write_v3_table(reference, sql_catalog.name)
    warehouse = sql_catalog.properties["warehouse"]

    def run(job: str, spec: dict[str, Any]) -> str:
        metadata = sql_catalog.load_table("db.t").metadata_location
        done = subprocess.run(
            [sys.executable, str(IN_MEMORY_JOB), warehouse, metadata, job, json.dumps(spec)],
            env=_environment(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"{job} in a fresh process exited {done.returncode}:\n{done.stderr}"
        sql_catalog.drop_table("db.t")
        sql_catalog.register_table("db.t", done.stdout.strip())
        return done.stderr

    catalog = V3Catalog(sql_catalog.name, lambda: sql_catalog, run, _plant_local, orphans_age=True)
    _every_job_keeps_the_rows(catalog, reference)


def test_every_job_through_a_hive_catalog(reference: ReferenceReader, tmp_path: Path) -> None:
    """Hive 2.3.9's metastore (pyspark's jars), pyiceberg's Hive catalog for floe and Iceberg's
    Hive catalog for Spark: pyiceberg writes the metadata file, as for the SQL catalog."""
    with hive_metastore(tmp_path / "hive") as metastore:
        reference.register_catalog(HIVE_CATALOG, metastore.properties())
        client = load_catalog(HIVE_CATALOG, **metastore.properties())
        client.create_namespace("db")
        _write_v3_table(reference, HIVE_CATALOG)
        config = _write_config(tmp_path / "catalog.yaml", HIVE_CATALOG, metastore.properties())
        catalog = V3Catalog(
            HIVE_CATALOG,
            lambda: load_catalog(HIVE_CATALOG, **metastore.properties()),
            _floe_optimize(config),
            _plant_local,
            orphans_age=True,
        )
        _every_job_keeps_the_rows(catalog, reference)
