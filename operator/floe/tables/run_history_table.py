"""floe's run history as an Iceberg table: one row per run (`floe.api.history.RunRecord`),
partitioned by the day it finished, so that any engine (Spark, Trino, DuckDB, pyiceberg) can
query what floe did, as a managed service's system table. It is an ordinary table: an
OptimizedTable of it compacts it and keeps its days (``dataRetention`` on ``finished``) like
any other's, whole days' files dropping at once.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.expressions import EqualTo, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform
from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType, TimestamptzType

from floe.api.history import RunPhases, RunRecord
from floe.api.meta import rfc3339

_STRINGS = ("table", "run_id", "kind", "trigger", "outcome", "error")
_COUNTS = (
    "files_in",
    "bytes_in",
    "rows_in",
    "files_out",
    "bytes_out",
    "rows_out",
    "delete_files_retired",
)
_PHASES = ("queued", "planning", "waiting", "running", "committing")
_ATTEMPTS = ("task_attempts", "commit_attempts")
APPEND_ATTEMPTS = 4
"""Appends tried before giving up, when another writer's commit lands in between."""


def _schema() -> Schema:
    fields: list[NestedField] = []

    def add(name: str, kind: object, required: bool = False) -> None:
        fields.append(NestedField(len(fields) + 1, name, kind, required=required))  # type: ignore[arg-type]

    for name in _STRINGS:
        add(name, StringType(), required=name in ("table", "run_id", "kind", "outcome"))
    add("started", TimestamptzType(), required=True)
    add("finished", TimestamptzType(), required=True)
    add("snapshot_id", LongType())
    for name in _COUNTS:
        add(name, LongType(), required=True)
    for name in _PHASES:
        add(f"{name}_s", DoubleType(), required=True)
    add("executor_seconds", DoubleType(), required=True)
    for name in _ATTEMPTS:
        add(name, IntegerType(), required=True)
    return Schema(*fields)


SCHEMA = _schema()
"""The history table's columns: a run record's fields, its phases as ``<phase>_s``."""
FINISHED_FIELD_ID = SCHEMA.find_field("finished").field_id


def open_history_table(catalog: Catalog, identifier: str) -> Table:
    """The history table ``namespace.table`` of ``catalog``, created (and its namespace) if
    missing; ValueError when a table of that name is not a floe history table."""
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
        spec = PartitionSpec(PartitionField(FINISHED_FIELD_ID, 1000, DayTransform(), "finished_day"))
        try:
            return catalog.create_table(identifier, SCHEMA, partition_spec=spec)
        except TableAlreadyExistsError:  # another operator replica made it meanwhile
            table = catalog.load_table(identifier)
    missing = {f.name for f in SCHEMA.fields} - {f.name for f in table.schema().fields}
    if missing:
        raise ValueError(
            f"{identifier} is not a floe run history table: it lacks {', '.join(sorted(missing))}"
        )
    return table


def append_runs(table: Table, runs: Sequence[RunRecord]) -> None:
    """Append ``runs`` in one snapshot, on the table's latest metadata (another writer's
    commit in between is retried); raises what the catalog or storage raised."""
    rows = _rows(runs)
    for attempt in range(1, APPEND_ATTEMPTS + 1):
        try:
            table.append(rows)
            return
        except CommitFailedException:
            if attempt == APPEND_ATTEMPTS:
                raise
            table.refresh()


def read_runs(table: Table, name: str, limit: int | None = None) -> list[RunRecord]:
    """The runs of table ``name`` (as a run record names it), oldest first; the last ``limit``."""
    rows = (
        table.scan(row_filter=EqualTo(term=Reference("table"), value=literal(name)))
        .to_arrow()
        .sort_by("finished")
        .to_pylist()
    )
    runs = [_record(row) for row in rows]
    return runs[-limit:] if limit else runs


def _rows(runs: Sequence[RunRecord]) -> pa.Table:
    columns: dict[str, list[object]] = {field.name: [] for field in SCHEMA.fields}
    for run in runs:
        for name in _STRINGS:
            columns[name].append(getattr(run, name))
        columns["started"].append(_instant(run.started))
        columns["finished"].append(_instant(run.finished))
        columns["snapshot_id"].append(run.snapshot_id)
        for name in (*_COUNTS, "executor_seconds", *_ATTEMPTS):
            columns[name].append(getattr(run, name))
        for name in _PHASES:
            columns[f"{name}_s"].append(getattr(run.phases, name))
    return pa.Table.from_pydict(columns, schema=SCHEMA.as_arrow())


def _record(row: dict[str, object]) -> RunRecord:
    phases = RunPhases.model_validate({name: row[f"{name}_s"] for name in _PHASES})
    fields = {
        name: row[name] for name in (*_STRINGS, "snapshot_id", *_COUNTS, "executor_seconds", *_ATTEMPTS)
    }
    for name in ("started", "finished"):
        moment = row[name]
        assert isinstance(moment, datetime.datetime)
        fields[name] = rfc3339(moment.timestamp())
    return RunRecord.model_validate({**fields, "phases": phases})


def _instant(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
