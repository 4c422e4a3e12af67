"""Orphan-file cleanup on real tables: local files (Iceberg Java's reader checks contents)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from maintenance_tables import appending_writer, build_history, missing_files, read
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from floe.local.reference_reader import ReferenceReader
from floe.maintenance.job import MaintenanceJob
from floe.maintenance.orphans import remove_orphan_files

HOUR = 3600.0
DAY = 86400.0


def _table_dir(table: Table) -> Path:
    return Path(urlparse(table.metadata.location).path)


def _age_everything(directory: Path, seconds: float) -> None:
    """Make every file under `directory` look `seconds` old, as if the table were that old."""
    then = time.time() - seconds
    for path in directory.rglob("*"):
        if path.is_file():
            os.utime(path, (then, then))


def _plant(path: Path, age_s: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not referenced by any metadata")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_only_old_unreferenced_unprotected_files_are_removed(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, ids = build_history(sql_catalog, reference)
    before = {sid: read(reference, sql_catalog, sid) for sid in ids}
    root = _table_dir(table)
    # Referenced files old too, so only the reference check (file:/ from Java, file:/// from
    # pyiceberg) keeps them.
    _age_everything(root, 2 * DAY)
    orphans = {
        _plant(root / "data" / "region=eu" / "00000-crashed-writer.parquet", 2 * DAY),
        _plant(root / "metadata" / "abandoned-m0.avro", 2 * DAY),
        # Iceberg Java's checksum of a file deleted through pyiceberg's FileIO.
        _plant(root / "data" / "region=eu" / ".deleted-by-expiry.parquet.crc", 2 * DAY),
    }
    young = _plant(root / "data" / "region=us" / "being-written.parquet", 60)
    protected = _plant(root / "data" / "region=eu" / "proc-7-t0001-abcd1234-00000.parquet", 2 * DAY)

    # Checksums Iceberg Java wrote beside the table's own files stay with them.
    checksums = set(root.rglob(".*.crc")) - orphans
    dry = remove_orphan_files(
        table, older_than_s=DAY, now_s=time.time(), protected_prefixes=["proc-7-"], dry_run=True
    )
    assert dry.job == MaintenanceJob.ORPHANS and dry.dry_run
    assert {Path(p) for p in dry.paths} == orphans
    assert all(p.exists() for p in orphans)

    done = remove_orphan_files(table, older_than_s=DAY, now_s=time.time(), protected_prefixes=["proc-7-"])
    assert {Path(p) for p in done.paths} == orphans
    assert done.files_removed == 3 and done.bytes_removed == 3 * len(b"not referenced by any metadata")
    assert not any(p.exists() for p in orphans)
    assert young.exists() and protected.exists()
    assert checksums and all(p.exists() for p in checksums)
    assert missing_files(table) == []
    for sid in ids:
        assert read(reference, sql_catalog, sid) == before[sid]


def test_a_safety_age_below_one_hour_is_refused(sql_catalog: SqlCatalog, reference: ReferenceReader) -> None:
    table, _ = build_history(sql_catalog, reference)
    with pytest.raises(ValueError, match="below the minimum"):
        remove_orphan_files(table, older_than_s=HOUR - 1, now_s=time.time())


def test_cleanup_racing_a_writer_loses_no_committed_row(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table, _ = build_history(sql_catalog, reference)
    _age_everything(_table_dir(table), 2 * DAY)
    with appending_writer(sql_catalog) as committed:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            remove_orphan_files(table, older_than_s=HOUR, now_s=time.time())

    assert len(committed) > 15
    assert missing_files(table) == []
    ids = {row[0] for row in read(reference, sql_catalog)}
    assert ids.issuperset(committed)
