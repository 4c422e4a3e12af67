"""`floe explain` of a table of `floe run`'s manifests: each partition's triggers against their
thresholds on a real SQLite catalog, the settings and their sources, and bad input."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from test_cli import _catalog

from floe.cli import main
from floe.tables.writer import conform

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True), NestedField(2, "cat", StringType(), required=True)
)


def _manifests(tmp_path: Path, trigger_file_count: int) -> Path:
    path = tmp_path / "manifests.yaml"
    group = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizerGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"tableDefaults": {"minor": {"triggerFileCount": trigger_file_count}}},
    }
    table = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTable",
        "metadata": {"name": "orders", "namespace": "default"},
        "spec": {
            "table": "db.t",
            "group": "g",
            "catalog": {"name": "cli"},
            "minor": {"triggerInterval": "2h"},
        },
    }
    path.write_text(yaml.safe_dump_all([group, table]))
    return path


def test_explain_shows_each_partitions_triggers_and_where_settings_come_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog, config = _catalog(tmp_path)
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "cat"))
    table = catalog.create_table("db.t", SCHEMA, partition_spec=spec)
    # Partition a: 5 small files; partition b: 1.
    for start in range(5):
        table.append(conform(table, pa.table({"id": [start], "cat": ["a"]})))
    table.append(conform(table, pa.table({"id": [99], "cat": ["b"]})))
    manifests = _manifests(tmp_path, trigger_file_count=4)

    assert main(["explain", "orders", "-f", str(manifests), "--catalog-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "default/orders" in out and "table db.t, group g, policy amoro" in out
    assert "health of its files 60/100 (most points lost to small files)" in out
    # a: 5 fragments against the group's 4: fires, and the decision says minor; b: 1 of 4.
    assert "cat=a" in out and "cat=b" in out
    assert out.index("cat=a") < out.index("cat=b")  # the partition closest to firing first
    assert "5 / 4" in out and "1 / 4" in out
    assert "minor: 5 fragments + 0 eq-deletes >= 4" in out
    assert "fires" in out
    # Never optimized: the minor interval counts from never; the full interval is off.
    assert "never / 2.0h" in out and "off" in out
    # Settings in force, and where each came from.
    assert "minor.triggerFileCount" in out and "OptimizerGroup/g" in out
    assert "minor.triggerInterval" in out and "OptimizedTable" in out
    assert "floe's default" in out
    assert "not known without a running floe" in out

    # --partitions 1 shows a alone, and says one more is left out.
    assert (
        main(
            ["explain", "orders", "-f", str(manifests), "--catalog-config", str(config), "--partitions", "1"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "cat=a" in out and "cat=b" not in out and "and 1 more partitions, none closer to firing" in out


def test_explain_of_an_unknown_table_or_bad_options_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = _catalog(tmp_path)
    manifests = _manifests(tmp_path, trigger_file_count=4)
    assert main(["explain", "nope", "-f", str(manifests), "--catalog-config", str(config)]) == 2
    assert f"no OptimizedTable 'nope' in {manifests}" in capsys.readouterr().err
    assert main(["explain", "orders", "-f", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: no such file or directory" in capsys.readouterr().err
    assert main(["explain", "orders", "-f", str(manifests), "--partitions", "0"]) == 2
    assert "--partitions must be positive, not 0" in capsys.readouterr().err
    # The manifest names a table its catalog does not hold.
    assert main(["explain", "orders", "-f", str(manifests), "--catalog-config", str(config)]) == 2
    assert "db.t" in capsys.readouterr().err
