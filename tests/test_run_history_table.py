"""The run history as an Iceberg table: created with its schema and day partitions, appended to
(by the engine's sink, which keeps runs while the table cannot be written), read back record
for record, and queried by another engine (Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField
from run_records import RUNS

from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.optimizing.history_sink import RunHistorySink
from floe.tables.run_history_table import append_runs, open_history_table, read_runs


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    return SqlCatalog("history", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri())


def test_runs_read_back_as_they_were_appended_per_table(catalog: SqlCatalog) -> None:
    table = open_history_table(catalog, "floe.runs")
    assert [f.name for f in table.spec().fields] == ["finished_day"]
    append_runs(table, RUNS[:2])
    append_runs(open_history_table(catalog, "floe.runs"), RUNS[2:])  # opening again finds it
    table.refresh()
    assert read_runs(table, "analytics/orders") == [RUNS[0], RUNS[1], RUNS[3]]
    assert read_runs(table, "analytics/orders", limit=1) == [RUNS[3]]
    assert read_runs(table, "analytics/events") == [RUNS[2]]
    assert read_runs(table, "analytics/none") == []


def test_a_table_of_that_name_that_is_not_a_history_table_is_refused(catalog: SqlCatalog) -> None:
    catalog.create_namespace("floe")
    catalog.create_table("floe.runs", Schema(NestedField(1, "id", LongType(), required=False)))
    with pytest.raises(ValueError, match=r"floe\.runs is not a floe run history table: it lacks"):
        open_history_table(catalog, "floe.runs")


def test_spark_reads_the_history_as_any_engine_would(
    sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    table = open_history_table(sql_catalog, "db.floe_runs")
    append_runs(table, RUNS)
    name = qualified_name(sql_catalog.name, "db.floe_runs")
    rows = reference.sql(
        f"SELECT kind, outcome, executor_seconds, queued_s FROM {name} "
        "WHERE `table` = 'analytics/orders' ORDER BY finished"
    )
    assert [tuple(r) for r in rows] == [
        ("minor", "committed", 40.5, 4.5),
        ("expire", "done", 0.0, 0.0),
        ("full", "committed", 0.0, 0.0),
    ]
    [(days,)] = reference.sql(f"SELECT count(DISTINCT date(finished)) FROM {name}")
    assert days == 3


def test_the_sink_appends_in_batches_and_keeps_runs_while_the_table_cannot_be_written(
    catalog: SqlCatalog,
) -> None:
    problems: list[str | None] = []
    reachable = False

    def open_table() -> Table:
        if not reachable:
            raise ConnectionError("catalog history is unreachable")
        return open_history_table(catalog, "floe.runs")

    sink = RunHistorySink(open_table, problems.append, flush_interval_s=3600, max_pending=3)
    try:
        for run in RUNS:
            sink.put(run)  # never blocks, whatever the table
        assert sink.dropped == 1  # the oldest went: 3 wait at most
        assert not sink.flush()
        assert sink.problem is not None and "catalog history is unreachable" in sink.problem
        assert "(3 runs wait)" in sink.problem and problems == [sink.problem]

        reachable = True
        assert sink.flush() and sink.problem is None and problems[-1] is None
        table = catalog.load_table("floe.runs")
        assert read_runs(table, "analytics/orders") == [RUNS[1], RUNS[3]]
        assert read_runs(table, "analytics/events") == [RUNS[2]]
        assert sink.flush()  # nothing waits: nothing is appended twice
        table.refresh()
        assert len(table.scan().to_arrow()) == 3 and sink.appended == 3
    finally:
        sink.close()


def test_closing_the_sink_appends_what_waits(catalog: SqlCatalog) -> None:
    sink = RunHistorySink(
        lambda: open_history_table(catalog, "floe.runs"), lambda _: None, flush_interval_s=3600
    )
    sink.put(RUNS[0])
    sink.close()
    assert read_runs(catalog.load_table("floe.runs"), "analytics/orders") == [RUNS[0]]
