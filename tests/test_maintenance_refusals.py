"""A refused maintenance job, as the engine and the CLI report it: a Warning Event once per
refusal, the job's status entry, the ``MaintenanceAllowed`` condition, no retry before the job's
interval; ``floe optimize`` exits 2 with one line."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from test_cli import _small_table
from test_engine import Stack, _group, _table, stack

from floe.cli import main
from floe.controller.status import restore_maintenance, table_status
from floe.maintenance.job import MaintenanceJob
from floe.optimizing.table_state import TableRuntime
from floe.tables.writer import conform

__all__ = ["stack"]  # the real-stack fixture of test_engine, used here as is


def _refusals(stack: Stack) -> list[str]:
    return [e.message for e in stack.events if (e.kind, e.reason) == ("Warning", "MaintenanceRefused")]


def _condition(runtime: TableRuntime) -> dict[str, str]:
    conditions = table_status(runtime, 0.0, redact=lambda text: text)["conditions"]
    found: dict[str, str] = next(c for c in conditions if c["type"] == "MaintenanceAllowed")
    return found


def test_the_engine_shows_a_refused_job_and_does_not_retry_it_at_once(
    stack: Stack, sql_catalog: SqlCatalog
) -> None:
    table = sql_catalog.create_table("db.t", pa.schema([pa.field("id", pa.int64(), nullable=False)]))
    for start in (0, 10):
        table.append(conform(table, pa.table({"id": pa.array(range(start, start + 10), pa.int64())})))
    table.transaction().set_properties({"gc.enabled": "false"}).commit_transaction()
    snapshots = len(sql_catalog.load_table("db.t").metadata.snapshots)
    stack.engine.apply_group(_group("g1"))
    runtime = stack.engine.apply_table(
        _table(sql_catalog, "g1", maintenance={"snapshotRetention": {"maxAge": "1ms"}})
    )

    for _ in range(2):  # the second refusal says the same: no second Event
        stack.engine.run_maintenance_now("default/t", MaintenanceJob.EXPIRE).result(timeout=120)
    assert len(_refusals(stack)) == 1
    assert "expire of table db.t refused: Cannot expire snapshots: GC is disabled" in _refusals(stack)[0]
    assert len(sql_catalog.load_table("db.t").metadata.snapshots) == snapshots

    run = runtime.maintenance_runs[MaintenanceJob.EXPIRE]
    assert run.refused == "GcDisabled" and run.result.startswith("refused: Cannot expire snapshots")
    # Asked again one interval later, not at the next round.
    assert runtime.next_maintenance_s(MaintenanceJob.EXPIRE, time.time()) == run.finished_s + 3600
    status = table_status(runtime, 0.0, redact=lambda text: text)
    assert status["maintenance"]["expire"]["refused"] == "GcDisabled"
    condition = _condition(runtime)
    assert (condition["status"], condition["reason"]) == ("False", "GcDisabled")
    assert "Cannot expire snapshots: GC is disabled" in condition["message"]

    # A restarted operator reads the refusal back from status.
    restarted = TableRuntime("default/t", runtime.spec)
    restore_maintenance(restarted, status)
    assert _condition(restarted)["reason"] == "GcDisabled"

    # GC on again, a table nested in this one: expiry runs, orphan cleanup is refused for that.
    table.transaction().set_properties({"gc.enabled": "true"}).commit_transaction()
    sql_catalog.create_table(
        "db.inner", pa.schema([pa.field("id", pa.int64())]), location=f"{table.location()}/inner"
    )
    stack.engine.run_maintenance_now("default/t", MaintenanceJob.EXPIRE).result(timeout=120)
    stack.engine.run_maintenance_now("default/t", MaintenanceJob.ORPHANS).result(timeout=120)
    assert not runtime.maintenance_runs[MaintenanceJob.EXPIRE].refused
    assert len(sql_catalog.load_table("db.t").metadata.snapshots) == 1
    assert len(_refusals(stack)) == 2 and "table db.inner" in _refusals(stack)[1]
    condition = _condition(runtime)
    assert (condition["status"], condition["reason"]) == ("False", "LocationShared")
    assert condition["message"].startswith("orphans refused: orphan cleanup would list")


def test_floe_optimize_exits_2_with_one_line_for_a_refused_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog, config = _small_table(tmp_path)
    table = catalog.load_table("db.t")
    table.transaction().set_properties({"gc.enabled": "false"}).commit_transaction()
    args = ["optimize", "--catalog-config", str(config), "db.t"]
    snapshots = len(catalog.load_table("db.t").metadata.snapshots)

    for job in (["--type", "expire", "--max-age", "1ms"], ["--type", "orphans", "--dry-run"]):
        assert main([*args, *job]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: {job[1]} of table db.t refused: ") and "GC is disabled" in line
    assert len(catalog.load_table("db.t").metadata.snapshots) == snapshots

    table.transaction().set_properties({"gc.enabled": "true"}).commit_transaction()
    elsewhere = (tmp_path / "elsewhere").as_uri()
    assert main([*args, "--type", "orphans", "--location", elsewhere]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "db.t refused" in line and f"{elsewhere} is not a location the table writes to" in line
    assert main([*args, "--type", "expire", "--location", elsewhere]) == 2
    assert "--location applies to --type orphans only" in capsys.readouterr().err
