"""Manifests load into the pydantic models; bad ones fail with the file and field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from floe.api.manifests import ManifestError, load_manifests
from floe.api.models import OptimizedTable, OptimizerGroup, SchedulingPolicy
from floe.api.units import format_duration, format_quantity, parse_duration, parse_quantity
from floe.planning.config import MiB

GOOD = """\
apiVersion: floe.dev/v1alpha1
kind: OptimizerGroup
metadata: {name: etl}
spec: {policy: balanced, executors: 3, executorCores: 2, executorMemory: 4Gi, heartbeatTimeout: 2m}
---
apiVersion: floe.dev/v1alpha1
kind: OptimizedTable
metadata: {name: orders, namespace: sales}
spec:
  table: db.orders
  catalog: {name: prod, properties: {type: sql, uri: "sqlite:///x.db"}}
  group: etl
  quota: 2
  targetSize: 256Mi
  minor: {triggerFileCount: 20, triggerInterval: 30m}
  full: {triggerInterval: 1d}
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [("128Mi", 128 * MiB), ("1Gi", 1024 * MiB), ("1G", 10**9), ("0.5Ki", 512), (4096, 4096), ("7", 7)],
)
def test_quantities(text: str | int, expected: int) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("bad", ["12 MB", "Mi", "-1", "1.5.3Gi", True, None, -5])
def test_bad_quantities(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)


@pytest.mark.parametrize(
    ("text", "seconds"), [("1h", 3600), ("90s", 90), ("1h30m", 5400), ("250ms", 0.25), ("-1", -1), (60, 60)]
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["1x", "h", "1h 30m", "", "soon"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(bad)


def test_round_trip_formats() -> None:
    assert format_quantity(128 * MiB) == "128Mi"
    assert format_quantity(1000) == "1000"
    assert format_duration(5400) == "1h30m"
    assert format_duration(-1) == "-1"


def test_manifests_load_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(GOOD)
    group, table = load_manifests(path)
    assert isinstance(group, OptimizerGroup) and isinstance(table, OptimizedTable)
    assert group.spec.policy == SchedulingPolicy.BALANCED and group.spec.threads == 6
    assert group.spec.executor_memory == 4096 * MiB and group.spec.heartbeat_timeout == 120
    config = table.spec.optimizing_config()
    assert config.target_size == 256 * MiB and config.fragment_size == 32 * MiB
    assert config.minor_trigger_file_count == 20 and config.minor_trigger_interval_s == 1800
    assert config.full_trigger_interval_s == 86400
    assert config.major_duplicate_ratio == 0.1  # default
    assert table.metadata.namespace == "sales"
    dumped = table.spec.model_dump(by_alias=True)
    assert dumped["targetSize"] == "256Mi" and dumped["minor"]["triggerInterval"] == "30m"


def test_directory_of_manifests(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "notes.txt").write_text("ignored")
    assert len(load_manifests(tmp_path)) == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("quota: 2", "spec.quota: Input should be greater than 0"),
        ("targetSize: 256Mi", "spec.targetSize: Value error, invalid quantity '256 MB'"),
        ("group: etl", "spec.grop: Extra inputs are not permitted"),
        ("table: db.orders", "spec.table: String should match pattern"),
    ],
)
def test_bad_table_manifest_names_the_field(tmp_path: Path, change: str, message: str) -> None:
    replacement = {
        "quota: 2": "quota: -1",
        "targetSize: 256Mi": "targetSize: 256 MB",
        "group: etl": "grop: etl",
        "table: db.orders": "table: orders",
    }[change]
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace(change, replacement))
    with pytest.raises(ManifestError) as info:
        load_manifests(path)
    text = str(info.value)
    assert "bad.yaml (document 2)" in text and "OptimizedTable 'orders'" in text
    assert message in text


def test_bad_group_policy(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(GOOD.replace("policy: balanced", "policy: fastest"))
    with pytest.raises(ManifestError, match=r"spec.policy: Input should be 'quota' or 'balanced'"):
        load_manifests(path)


@pytest.mark.parametrize("request_", ["250m", "1", "0.5"])
def test_group_executor_cpu_request(tmp_path: Path, request_: str) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(GOOD.replace("policy: balanced", f"policy: balanced, executorCpuRequest: '{request_}'"))
    group = next(m for m in load_manifests(path) if m.kind == "OptimizerGroup")
    assert group.spec.executor_cpu_request == request_


def test_bad_group_executor_cpu_request_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(GOOD.replace("policy: balanced", "policy: balanced, executorCpuRequest: lots"))
    with pytest.raises(ManifestError, match=r"spec.executorCpuRequest: String should match pattern"):
        load_manifests(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Table\napiVersion: floe.dev/v1alpha1\n", "unknown kind 'Table'"),
        ("a: [1, 2\n", "not valid YAML"),
        ("- just\n- a list\n", "expected a mapping"),
        (
            GOOD.replace("floe.dev/v1alpha1", "floe.dev/v2", 1),
            "apiVersion: Input should be 'floe.dev/v1alpha1'",
        ),
        (GOOD.replace("spec:\n  table: db.orders\n", "spec:\n"), "spec.table: Field required"),
    ],
)
def test_malformed_manifests(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError, match=message):
        load_manifests(path)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such file"):
        load_manifests(tmp_path / "nope.yaml")
    with pytest.raises(ManifestError, match=r"no \.yaml or \.yml files"):
        load_manifests(tmp_path)


def _table_with(**spec: object) -> dict[str, object]:
    return {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTable",
        "metadata": {"name": "t"},
        "spec": {"table": "db.t", "catalog": {"name": "c"}, **spec},
    }


def test_maintenance_defaults_are_safe() -> None:
    spec = OptimizedTable.model_validate(_table_with()).spec
    maintenance = spec.maintenance
    assert maintenance.snapshot_retention.enabled and maintenance.snapshot_retention.max_age == 5 * 86400
    assert maintenance.orphan_files.older_than == 3 * 86400
    assert maintenance.data_retention is None and spec.clustering is None


@pytest.mark.parametrize(
    ("maintenance", "message"),
    [
        ({"orphanFiles": {"olderThan": "30m"}}, "olderThan must be at least 1h"),
        ({"snapshotRetention": {"maxAge": "-1"}}, "maxAge and snapshotRetention.interval must be positive"),
        ({"dataRetention": {"column": "ts", "olderThan": "0s"}}, "dataRetention.olderThan"),
        ({"snapshotRetention": {"minSnapshots": 0}}, "greater than or equal to 1"),
    ],
)
def test_bad_maintenance_is_rejected(maintenance: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OptimizedTable.model_validate(_table_with(maintenance=maintenance))


def test_clustering_names_its_columns() -> None:
    spec = OptimizedTable.model_validate(
        _table_with(clustering={"strategy": "zorder", "columns": ["x", "y"]})
    ).spec
    assert spec.clustering is not None and spec.clustering.columns == ["x", "y"]
    with pytest.raises(ValueError, match="at least 1 item"):
        OptimizedTable.model_validate(_table_with(clustering={"strategy": "zorder", "columns": []}))
