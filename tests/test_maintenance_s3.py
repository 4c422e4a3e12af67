"""Orphan cleanup and expiry on an S3-protocol object store: moto's real HTTP server.

The table lives at ``s3://bucket/...`` behind a pyiceberg SqlCatalog with ``s3.endpoint``
properties, so every read, listing and delete goes over HTTP through pyarrow's S3
filesystem, as against a real object store. moto runs from its own environment
(scripts/moto/build.sh says why), started here as a subprocess on a free loopback port.
Iceberg Java's reader has no S3 client here, so contents are checked with pyiceberg scans.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from maintenance_tables import InProcessExecutors, create_table, missing_files, rows
from pyarrow.fs import S3FileSystem
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from floe.local.reference_reader import arrow_rows
from floe.maintenance.expire import expire_snapshots
from floe.maintenance.orphans import remove_orphan_files
from floe.maintenance.orphans_on_executors import remove_orphan_files_on_executors
from floe.tables.writer import conform

MOTO_BUILD = Path(__file__).resolve().parent.parent / "scripts" / "moto" / "build.sh"
HOUR = 3600.0
CREDENTIALS = {"s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """The URL of a moto S3 server on loopback, for this module's tests."""
    python = subprocess.run([str(MOTO_BUILD)], stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    port = _free_port()
    server = subprocess.Popen(
        [python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"moto server did not come up on {endpoint}") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def s3_catalog(s3_endpoint: str, tmp_path: Path) -> Iterator[SqlCatalog]:
    """A pyiceberg SQLite catalog whose warehouse is a fresh bucket on the moto server."""
    bucket = f"wh-{tmp_path.name.lower().replace('_', '-')[:40]}"
    _filesystem(s3_endpoint).create_dir(bucket)
    catalog = SqlCatalog(
        "s3cat",
        uri=f"sqlite:///{tmp_path / 'catalog.db'}",
        warehouse=f"s3://{bucket}/warehouse",
        **{"s3.endpoint": s3_endpoint, **CREDENTIALS},
    )
    catalog.create_namespace("db")
    yield catalog
    catalog.engine.dispose()


def _filesystem(endpoint: str) -> S3FileSystem:
    return S3FileSystem(
        access_key=CREDENTIALS["s3.access-key-id"],
        secret_key=CREDENTIALS["s3.secret-access-key"],
        region=CREDENTIALS["s3.region"],
        endpoint_override=endpoint,
        allow_bucket_creation=True,
    )


def _rows(table: Table, snapshot_id: int | None = None) -> Counter[Any]:
    return arrow_rows(table.scan(snapshot_id=snapshot_id).to_arrow())


def _history(catalog: SqlCatalog) -> Table:
    table = create_table(catalog)
    table.append(conform(table, rows(range(0, 10), "eu")))
    table.append(conform(table, rows(range(10, 20), "eu")))
    table.append(conform(table, rows(range(100, 110), "us")))
    table.delete(EqualTo("id", 101))  # copy-on-write: the first us file is only in older snapshots
    table.append(conform(table, rows(range(20, 25), "eu")))
    return table


def _plant(table: Table, fs: S3FileSystem) -> list[str]:
    """Two orphans (a crashed writer's file, an abandoned manifest) and a file of an in-flight
    process (prefix ``proc-9-``), as ``bucket/key`` paths."""
    key = table.metadata.location.removeprefix("s3://")
    planted = [
        f"{key}/data/region=eu/00000-crashed-writer.parquet",
        f"{key}/metadata/abandoned-m0.avro",
        f"{key}/data/region=eu/proc-9-t0001-0a1b2c3d-00000.parquet",
    ]
    for path in planted:
        with fs.open_output_stream(path) as out:
            out.write(b"orphan")
    return planted


def test_orphans_and_expired_files_are_removed_from_an_object_store(
    s3_catalog: SqlCatalog, s3_endpoint: str
) -> None:
    table = _history(s3_catalog)
    assert table.metadata.location.startswith("s3://")
    snapshots = [s.snapshot_id for s in table.metadata.snapshots]
    before = {sid: _rows(table, sid) for sid in snapshots}
    planted = _plant(table, _filesystem(s3_endpoint))
    # Objects cannot be back-dated, so look from two hours on: every file is then old enough.
    later = time.time() + 2 * HOUR
    orphans = {f"s3://{p}" for p in planted[:2]}

    dry = remove_orphan_files(
        table, older_than_s=HOUR, now_s=later, protected_prefixes=["proc-9-"], dry_run=True
    )
    assert set(dry.paths) == orphans
    assert all(table.io.new_input(p).exists() for p in orphans)

    done = remove_orphan_files(table, older_than_s=HOUR, now_s=later, protected_prefixes=["proc-9-"])
    assert set(done.paths) == orphans and done.bytes_removed == 2 * len(b"orphan")
    assert not any(table.io.new_input(p).exists() for p in orphans)
    assert table.io.new_input(f"s3://{planted[2]}").exists()
    assert missing_files(table) == []
    for sid in snapshots:
        assert _rows(table, sid) == before[sid]

    expired = expire_snapshots(table, min_snapshots=1, max_age_s=HOUR, now_s=later)
    head = snapshots[-1]
    assert [s.snapshot_id for s in table.metadata.snapshots] == [head]
    assert expired.files_removed > 0
    assert any(p.endswith(".parquet") for p in expired.paths)
    assert not any(table.io.new_input(p).exists() for p in expired.paths)
    assert missing_files(table) == []
    assert _rows(table) == before[head]
    # Expiry left nothing behind for orphan cleanup.
    again = remove_orphan_files(table, older_than_s=HOUR, now_s=later, protected_prefixes=["proc-9-"])
    assert again.files_removed == 0


def test_the_executors_remove_the_same_files_from_an_object_store(
    s3_catalog: SqlCatalog, s3_endpoint: str
) -> None:
    """What a big table's jobs hand the executors (the scan, the deletes) works on S3 paths:
    listing ``bucket/key``, locations ``s3://bucket/key``, and the operator's checks between."""
    table = _history(s3_catalog)
    head = table.metadata.current_snapshot_id
    before = _rows(table)
    planted = _plant(table, _filesystem(s3_endpoint))
    later = time.time() + 2 * HOUR
    executors = InProcessExecutors()

    done = remove_orphan_files_on_executors(
        table, executors.executors(table), older_than_s=HOUR, now_s=later, protected_prefixes=["proc-9-"]
    )

    assert set(done.paths) == {f"s3://{p}" for p in planted[:2]}
    assert [type(spec).__name__ for spec in executors.specs] == ["OrphanScanSpec", "DeleteFilesSpec"]
    assert not any(table.io.new_input(f"s3://{p}").exists() for p in planted[:2])
    assert table.io.new_input(f"s3://{planted[2]}").exists()
    assert missing_files(table) == []

    expired = expire_snapshots(
        table, min_snapshots=1, max_age_s=HOUR, now_s=later, delete=executors.executors(table).delete
    )
    assert [s.snapshot_id for s in table.metadata.snapshots] == [head]
    assert expired.files_removed > 0
    assert not any(table.io.new_input(p).exists() for p in expired.paths)
    assert missing_files(table) == [] and _rows(table) == before
