"""Tables floe cannot handle are refused before anything runs, with one sentence naming the
table and the features, in ``--dry-run``, in ``floe optimize``, in maintenance and in the
engine that ``floe run`` and the operator drive (status condition and Event).

A table property floe applies (the target file size, ``write.parquet.*``) with a value floe
cannot use is refused the same way, until the property or the manifest is fixed.

The v3 table is written the way users get one: Spark 3.5 with Iceberg 1.10, merge-on-read
DELETE and UPDATE, so its deletes are deletion vectors in a Puffin file.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, new_table_metadata
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform, UnknownTransform
from pyiceberg.types import (
    GeometryType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampNanoType,
    UnknownType,
)
from refused_tables import UNKNOWN_SORT, commit_metadata, unknown_sort_order
from test_engine import _group, _table

from floe.cli import main
from floe.controller.status import table_status
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.registry import EngineEvent
from floe.optimizing.table_state import TableState
from floe.planning.files import FileKind
from floe.service.task_service import TaskService
from floe.tables.catalog import load_table
from floe.tables.scan import scan_table
from floe.tables.support import UnsupportedTableError, unsupported_features
from floe.tables.writer import conform


def _config(tmp_path: Path, catalog: SqlCatalog) -> Path:
    config = tmp_path / "catalog.yaml"
    config.write_text(yaml.safe_dump({"name": catalog.name, "type": "sql", **catalog.properties}))
    return config


def _files_under(catalog: SqlCatalog, table: str) -> set[Path]:
    location = Path(catalog.load_table(table).location().removeprefix("file://"))
    return {p for p in location.rglob("*") if p.is_file()}


def test_the_dry_run_plans_a_v3_table_and_refuses_what_floe_cannot_handle(
    v3_table: SqlCatalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, v3_table)
    # As Spark wrote it, deletion vectors and row lineage included: planned.
    assert main(["optimize", "--catalog-config", str(config), "db.t", "--dry-run"]) == 0
    assert "not optimized" not in capsys.readouterr().err

    commit_metadata(v3_table, "t", unknown_sort_order)
    before = _files_under(v3_table, "db.t")
    snapshot = v3_table.load_table("db.t").current_snapshot()
    assert main(["optimize", "--catalog-config", str(config), "db.t", "--dry-run"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"table db.t is not optimized: it uses {UNKNOWN_SORT}, which floe does not support" in err
    assert "Traceback" not in err

    # Without --dry-run too: refused before any task, so nothing is written and no retry is spent.
    assert main(["optimize", "--catalog-config", str(config), "db.t", "--type", "full"]) == 2
    assert "table db.t is not optimized" in " ".join(capsys.readouterr().err.split())
    assert _files_under(v3_table, "db.t") == before
    assert v3_table.load_table("db.t").current_snapshot() == snapshot


def _encrypted(document: dict[str, Any]) -> None:
    """A metadata edit: an encryption key, and the current snapshot's manifest list encrypted with it."""
    document["encryption-keys"] = [
        {"key-id": "k1", "encrypted-key-metadata": "AAECAw==", "encrypted-by-id": "kms"}
    ]
    current = document["current-snapshot-id"]
    next(s for s in document["snapshots"] if s["snapshot-id"] == current)["key-id"] = "k1"


def test_a_v3_table_with_encryption_keys_is_refused_by_planning_and_maintenance(
    v3_table: SqlCatalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pyiceberg drops encryption keys from the metadata it rewrites, and floe would write
    unencrypted manifests: every job refuses such a table by name, writing nothing."""
    config = str(_config(tmp_path, v3_table))
    commit_metadata(v3_table, "t", _encrypted)
    before = _files_under(v3_table, "db.t")
    snapshot = v3_table.load_table("db.t").current_snapshot()

    for job in (
        ["--dry-run"],
        ["--type", "full"],
        ["--type", "manifests", "--manifest-trigger", "2"],
        ["--type", "dangling-deletes"],
        ["--type", "retention", "--column", "v", "--older-than", "1d"],
    ):
        assert main(["optimize", "--catalog-config", config, "db.t", *job]) == 2, job
        err = " ".join(capsys.readouterr().err.split())
        assert (
            "table db.t is not optimized: it uses encryption keys (encryption-keys) and snapshots "
            "encrypted with a key (key-id), which floe does not support"
        ) in err, (job, err)
        assert "Traceback" not in err
    assert _files_under(v3_table, "db.t") == before
    assert v3_table.load_table("db.t").current_snapshot() == snapshot


@pytest.fixture
def engine() -> Iterator[tuple[OptimizingEngine, list[EngineEvent]]]:
    """An engine (no optimizer) with group ``g``, and the Events it posts."""
    built = OptimizingEngine(
        TaskService(clock=time.time, registration_token="unsupported-test"), refresh_interval_s=0.1
    )
    events: list[EngineEvent] = []
    built.subscribe(events.append)
    built.apply_group(_group("g"))
    yield built, events
    built.close()


def _tick_until(engine: OptimizingEngine, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, engine.table_views()
        engine.tick()
        time.sleep(0.1)


def test_the_engine_shows_the_refusal_once_and_never_plans(
    refused_table: SqlCatalog, engine: tuple[OptimizingEngine, list[EngineEvent]]
) -> None:
    engine, events = engine
    runtime = engine.apply_table(_table(refused_table, "g"))
    _tick_until(engine, lambda: bool(runtime.refusal))
    for _ in range(10):  # more refreshes, on the same snapshot: no second Event, no plan
        engine.tick()
        time.sleep(0.1)

    reason = runtime.refusal
    assert reason == f"table db.t is not optimized: it uses {UNKNOWN_SORT}, which floe does not support"
    assert runtime.state == TableState.IDLE and runtime.process_id is None
    live = scan_table(refused_table.load_table("db.t")).files
    shown = (runtime.data_files, runtime.delete_files)
    assert shown == (len(live.data_files), len(live.delete_files)) and shown[1], (
        "the live files are still shown"
    )
    assert [(e.kind, e.reason, e.message) for e in events] == [("Warning", "Unsupported", reason)]
    assert engine.stuck_tables() == {runtime.table_id: reason}, "floe run --once reports it and exits 1"
    assert engine.converged()
    degraded = next(c for c in table_status(runtime, 0.0, str)["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"], degraded["message"]) == ("True", "Unsupported", reason)


@pytest.fixture
def variant_table(sql_catalog: SqlCatalog) -> SqlCatalog:
    """``db.v``: a table whose schema gained a ``variant`` column, which pyiceberg cannot parse."""
    sql_catalog.create_table("db.v", Schema(NestedField(1, "id", LongType(), required=True)))

    def add_variant(document: dict[str, Any]) -> None:
        document["format-version"] = 3
        document["next-row-id"] = 0
        document["schemas"][0]["fields"].append(
            {"id": 2, "name": "payload", "required": False, "type": "variant"}
        )
        document["last-column-id"] = 2

    commit_metadata(sql_catalog, "v", add_variant)
    return sql_catalog


def test_a_column_type_pyiceberg_cannot_read_is_named(
    variant_table: SqlCatalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UnsupportedTableError) as refused:
        load_table(variant_table, "db.v")
    assert (
        str(refused.value)
        == "table db.v is not optimized: it uses the column type 'variant', which floe does not support"
    )

    config = _config(tmp_path, variant_table)
    assert main(["optimize", "--catalog-config", str(config), "db.v", "--dry-run"]) == 2
    assert "the column type 'variant'" in " ".join(capsys.readouterr().err.split())


def test_a_refused_table_is_taken_again_once_its_metadata_no_longer_needs_refusing(
    sql_catalog: SqlCatalog, engine: tuple[OptimizingEngine, list[EngineEvent]]
) -> None:
    """A partition spec with a transform floe does not know is refused; setting the default spec
    back makes no snapshot, yet the table is evaluated again and planned."""
    table = sql_catalog.create_table("db.t", SUPPORTED)
    for start in range(0, 30, 10):
        table.append(conform(table, pa.table({"id": pa.array(range(start, start + 10), pa.int64())})))

    def unknown_default_spec(document: dict[str, Any]) -> None:
        field = {"source-id": 1, "field-id": 1000, "name": "id_z", "transform": "zorder[4]"}
        document["partition-specs"].append({"spec-id": 1, "fields": [field]})
        document["default-spec-id"] = 1
        document["last-partition-id"] = 1000

    commit_metadata(sql_catalog, "t", unknown_default_spec)
    engine, events = engine
    runtime = engine.apply_table(_table(sql_catalog, "g", minor={"triggerFileCount": 2}))
    _tick_until(engine, lambda: bool(runtime.refusal))
    assert "partition field 'id_z' (spec 1) with the unknown transform zorder[4]" in runtime.refusal
    assert runtime.data_files == 3 and runtime.state == TableState.IDLE

    commit_metadata(sql_catalog, "t", lambda document: document.update({"default-spec-id": 0}))
    _tick_until(engine, lambda: not runtime.refusal)
    # Pending for its minor optimizing again (this engine has no optimizer to run it).
    assert runtime.state == TableState.PENDING and runtime.last_error == ""
    assert [e.reason for e in events if e.kind == "Warning"] == ["Unsupported", "NoOptimizer"]


# -- table properties floe cannot apply ---------------------------------------------------


def _small_file_table(catalog: SqlCatalog, properties: dict[str, str]) -> None:
    table = catalog.create_table("db.t", SUPPORTED)
    for start in range(0, 30, 10):
        table.append(conform(table, pa.table({"id": pa.array(range(start, start + 10), pa.int64())})))
    with table.transaction() as transaction:
        transaction.set_properties(properties)


def test_a_bad_target_file_size_property_stops_floe_optimize(
    sql_catalog: SqlCatalog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _small_file_table(sql_catalog, {"write.target-file-size-bytes": "128MB"})
    config = _config(tmp_path, sql_catalog)
    before = _files_under(sql_catalog, "db.t")
    assert main(["optimize", "--catalog-config", str(config), "db.t", "--dry-run"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "table property write.target-file-size-bytes='128MB': expected an integer" in err
    assert "Traceback" not in err
    # The manifest's target size wins over the table's property: nothing is refused then.
    assert main(["optimize", "--catalog-config", str(config), "db.t", "--target-size", "1Mi"]) == 0
    assert _files_under(sql_catalog, "db.t") != before


def test_the_engine_refuses_a_bad_table_property_until_it_is_fixed(
    sql_catalog: SqlCatalog, engine: tuple[OptimizingEngine, list[EngineEvent]]
) -> None:
    """A target size of 0 from the table: one Event, Degraded with InvalidTableProperty, no plan;
    maintenance, which does not depend on it, is still due. Setting the manifest's targetSize
    clears it without any change to the table; a bad write.parquet.* property is refused the same
    way, and fixing the property clears it."""
    _small_file_table(sql_catalog, {"write.target-file-size-bytes": "0"})
    engine, events = engine
    manifest = _table(sql_catalog, "g", targetSize=None, minor={"triggerFileCount": 2})
    runtime = engine.apply_table(manifest)
    _tick_until(engine, lambda: bool(runtime.refusal))
    for _ in range(5):
        engine.tick()
        time.sleep(0.1)
    reason = runtime.refusal
    assert reason == (
        "table db.t is not optimized: table property write.target-file-size-bytes='0': expected at least 1"
    )
    assert runtime.state == TableState.IDLE and runtime.process_id is None
    assert [(e.kind, e.reason, e.message) for e in events] == [("Warning", "InvalidTableProperty", reason)]
    assert engine.stuck_tables() == {runtime.table_id: reason}
    assert runtime.due_maintenance(time.time()) is not None
    degraded = next(c for c in table_status(runtime, 0.0, str)["conditions"] if c["type"] == "Degraded")
    assert (degraded["reason"], degraded["message"]) == ("InvalidTableProperty", reason)

    engine.apply_table(_table(sql_catalog, "g", targetSize="16Ki", minor={"triggerFileCount": 2}))
    _tick_until(engine, lambda: not runtime.refusal)
    assert runtime.state == TableState.PENDING and runtime.last_error == ""

    with sql_catalog.load_table("db.t").transaction() as transaction:
        transaction.set_properties({"write.parquet.compression-codec": "lzo"})
    _tick_until(engine, lambda: bool(runtime.refusal))
    assert "write.parquet.compression-codec='lzo': expected one of" in runtime.refusal
    with sql_catalog.load_table("db.t").transaction() as transaction:
        transaction.set_properties({"write.parquet.compression-codec": "snappy"})
    _tick_until(engine, lambda: not runtime.refusal)
    assert [e.reason for e in events if e.kind == "Warning"] == [
        "InvalidTableProperty",
        "NoOptimizer",
        "InvalidTableProperty",
        "NoOptimizer",
    ]


# -- what is refused, on plain metadata ----------------------------------------------------


def _metadata(
    schema: Schema,
    spec: PartitionSpec | None = None,
    sort_order: SortOrder | None = None,
    format_version: int = 2,
) -> TableMetadata:
    return new_table_metadata(
        schema,
        spec or PartitionSpec(),
        sort_order or SortOrder(),
        "file:///warehouse/db/t",
        properties={"format-version": str(format_version)},
    )


SUPPORTED = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "tags", ListType(3, StringType()), required=False),
)


def test_a_supported_table_has_nothing_refused() -> None:
    spec = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "id"))
    metadata = _metadata(SUPPORTED, spec)
    formats = [(FileKind.DATA, FileFormat.PARQUET), (FileKind.POSITION_DELETES, FileFormat.PARQUET)]
    assert unsupported_features(metadata, formats, [0]) == []


def test_v3_column_types_are_named_with_their_path() -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "at", TimestampNanoType(), required=False),
        NestedField(
            3,
            "events",
            ListType(4, StructType(NestedField(5, "shape", GeometryType(), required=False))),
            required=False,
        ),
        NestedField(6, "nothing", UnknownType(), required=False),
    )
    assert unsupported_features(_metadata(schema, format_version=3)) == [
        "column 'at' of type timestamp_ns",
        "column 'events.element.shape' of type geometry",
        "column 'nothing' of type unknown",
    ]


def test_file_formats_other_than_parquet_and_deletion_vectors_are_named() -> None:
    formats = [
        (FileKind.DATA, FileFormat.ORC),
        (FileKind.DATA, FileFormat.PARQUET),
        (FileKind.POSITION_DELETES, FileFormat.PUFFIN),
        (FileKind.EQUALITY_DELETES, FileFormat.AVRO),
    ]
    # Puffin position deletes are deletion vectors, which floe reads and applies.
    assert unsupported_features(_metadata(SUPPORTED), formats) == [
        "ORC data files",
        "AVRO equality-delete files",
    ]


def test_transforms_floe_does_not_know_are_named() -> None:
    spec = PartitionSpec(PartitionField(1, 1000, UnknownTransform(transform="zorder[4]"), "id_z"))
    order = SortOrder(SortField(source_id=1, transform=UnknownTransform(transform="hilbert")))
    features = unsupported_features(_metadata(SUPPORTED, spec, order), [], [0])
    assert features == [
        "partition field 'id_z' (spec 0) with the unknown transform zorder[4]",
        "sort order 1 with the unknown transform hilbert",
    ]
    refused = UnsupportedTableError("db.t", features)
    assert str(refused) == (
        "table db.t is not optimized: it uses partition field 'id_z' (spec 0) with the unknown transform "
        "zorder[4] and sort order 1 with the unknown transform hilbert, which floe does not support"
    )
