"""Manifests load into the pydantic models; bad ones fail with the file and field named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from floe.api.group import OptimizerGroup, SchedulingPolicy
from floe.api.manifests import ManifestError, load_manifests
from floe.api.models import OptimizedTable
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
    assert group.spec.policy == SchedulingPolicy.BALANCED and group.spec.max_threads == 6
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
        ({"executorsAtFiles": -1}, "executorsAtFiles\n  Input should be greater than or equal to 0"),
    ],
)
def test_bad_maintenance_is_rejected(maintenance: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OptimizedTable.model_validate(_table_with(maintenance=maintenance))


def test_the_optimizing_policy_reaches_the_planner_and_defaults_to_amoros() -> None:
    default = OptimizedTable.model_validate(_table_with()).spec.optimizing_config()
    assert (default.policy, default.favor) == ("amoro", "balanced")
    chosen = OptimizedTable.model_validate(_table_with(optimizing={"policy": "floe", "favor": "writes"}))
    assert (chosen.spec.optimizing_config().policy, chosen.spec.optimizing_config().favor) == (
        "floe",
        "writes",
    )


def test_clustering_names_its_columns() -> None:
    spec = OptimizedTable.model_validate(
        _table_with(clustering={"strategy": "zorder", "columns": ["x", "y"]})
    ).spec
    assert spec.clustering is not None and spec.clustering.columns == ["x", "y"]
    with pytest.raises(ValueError, match="at least 1 item"):
        OptimizedTable.model_validate(_table_with(clustering={"strategy": "zorder", "columns": []}))


# --------------------------------------------------------------------------------------------------
# Bounds: what `kubectl apply` refuses (tests/k8s/test_crds.py), `floe run` refuses too, field named


def _group_with(name: str = "etl", **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizerGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


BOUNDS: list[tuple[str, dict[str, object], str]] = [
    (
        "image-with-newline",
        _group_with(image="floe-optimizer:0.1.0\nrm -rf /"),
        "spec.image: String should match pattern",
    ),
    ("image-with-space", _group_with(image="floe optimizer:1"), "spec.image: String should match pattern"),
    ("image-too-long", _group_with(image="r/" + "a" * 10_000), "spec.image: String should have at most 520"),
    (
        "catalog-name-10000",
        _table_with(catalog={"name": "c" * 10_000}),
        "spec.catalog.name: String should have at most 255 characters",
    ),
    (
        "table-10000",
        _table_with(table="db." + "t" * 10_000),
        "spec.table: String should have at most 511 characters",
    ),
    (
        "property-value-10000",
        _table_with(catalog={"name": "c", "properties": {"uri": "u" * 10_000}}),
        "spec.catalog.properties.uri: String should have at most 8192 characters",
    ),
    (
        "property-key",
        _table_with(catalog={"name": "c", "properties": {"s3 endpoint": "x"}}),
        "spec.catalog.properties.s3 endpoint.[key]: String should match pattern",
    ),
    (
        "too-many-properties",
        _table_with(catalog={"name": "c", "properties": {f"k{i}": "v" for i in range(129)}}),
        "spec.catalog.properties: Dictionary should have at most 128 items",
    ),
    (
        "too-many-columns",
        _table_with(clustering={"strategy": "zorder", "columns": [f"c{i}" for i in range(9)]}),
        "spec.clustering.columns: List should have at most 8 items",
    ),
    (
        "column-10000",
        _table_with(clustering={"strategy": "zorder", "columns": ["c" * 10_000]}),
        "spec.clustering.columns.0: String should have at most 255 characters",
    ),
    (
        "optimizing-favor",
        _table_with(optimizing={"policy": "floe", "favor": "speed"}),
        "spec.optimizing.favor: Input should be 'reads', 'balanced' or 'writes'",
    ),
    (
        "retention-column-control",
        _table_with(maintenance={"dataRetention": {"column": "ts\n", "olderThan": "1d"}}),
        "spec.maintenance.dataRetention.column: String should match pattern",
    ),
    (
        "too-many-tolerations",
        _group_with(executorTemplate={"tolerations": [{"operator": "Exists"}] * 65}),
        "spec.executorTemplate.tolerations: List should have at most 64 items",
    ),
    (
        "node-selector-value",
        _group_with(executorTemplate={"nodeSelector": {"zone": "z" * 64}}),
        "spec.executorTemplate.nodeSelector.zone: String should have at most 63 characters",
    ),
    (
        "secret-ref",
        _table_with(catalog={"name": "c", "secretRef": "my secret"}),
        "spec.catalog.secretRef: String should match pattern",
    ),
    ("group-ref-with-dot", _table_with(group="etl.batch"), "spec.group: String should match pattern"),
    ("group-name-52", _group_with("g" * 52), "metadata.name: String should have at most 51 characters"),
    ("group-name-dot", _group_with("etl.batch"), "metadata.name: String should match pattern"),
    ("table-name", {**_table_with(), "metadata": {"name": "a..b"}}, "metadata.name: String should match"),
    ("executors", _group_with(executors=1001), "spec.executors: Input should be less than or equal to 1000"),
    ("retries", _table_with(execute={"numRetries": 101}), "spec.execute.numRetries: Input should be less"),
    ("int-as-string", _group_with(executors="3"), "spec.executors: Input should be a valid integer"),
    (
        "int-as-fraction",
        _table_with(fragmentRatio=8.5),
        "spec.fragmentRatio: Input should be a valid integer",
    ),
    (
        "quantity-as-fraction",
        _table_with(maxTaskSize=2.5),
        "spec.maxTaskSize: Value error, expected a quantity",
    ),
    ("bool-as-string", _table_with(enabled="false"), "spec.enabled: Input should be a valid boolean"),
    ("float-as-string", _table_with(quota="0.5"), "spec.quota: Input should be a valid number"),
    ("float-infinite", _table_with(quota=float("inf")), "spec.quota: Input should be a finite number"),
    (
        "quantity-huge",
        _table_with(targetSize=2**63),
        "spec.targetSize: Value error, quantity must be at most",
    ),
    (
        "quantity-newline",
        _table_with(targetSize="128Mi\n"),
        "spec.targetSize: Value error, invalid quantity",
    ),
    (
        "quantity-too-long",
        _table_with(targetSize="1" * 65),
        "spec.targetSize: Value error, expected at most 64 characters",
    ),
    (
        "duration-as-number",
        _table_with(minor={"triggerInterval": 60}),
        "spec.minor.triggerInterval: Value error, expected a duration string",
    ),
    ("duration-space", _table_with(minPlanInterval=" 1m"), "spec.minPlanInterval: Value error, invalid"),
    (
        "cpu-request-too-long",
        _group_with(executorCpuRequest="1" * 65),
        "spec.executorCpuRequest: String should have at most 64 characters",
    ),
    # The CRD's CEL rules, which pydantic checks too.
    (
        "ack-after-execute",
        _group_with(ackTimeout="2h"),
        "ackTimeout (2h) must be shorter than executeTimeout (1h)",
    ),
    (
        "heartbeat-zero",
        _group_with(heartbeatTimeout="0s"),
        "spec.heartbeatTimeout: Value error, heartbeatTimeout",
    ),
    (
        "executor-memory",
        _group_with(executorMemory="256Mi"),
        "spec.executorMemory: Value error, executorMemory",
    ),
]


@pytest.mark.parametrize(("document", "message"), [c[1:] for c in BOUNDS], ids=[c[0] for c in BOUNDS])
def test_out_of_bounds_manifest_is_refused_naming_the_field(
    tmp_path: Path, document: dict[str, object], message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ManifestError) as info:
        load_manifests(path)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "image",
    [
        "floe-optimizer",
        "floe-optimizer:0.1.0",
        "ghcr.io/floe-dev/floe-optimizer:0.1.0",
        "localhost:5000/floe/optimizer_image__x:v1.2-rc.1",
        "[::1]:5000/floe:1",
        "registry.example.com/team/floe@sha256:" + "0123456789abcdef" * 4,
        "registry.example.com:443/floe:0.1.0@sha512:" + "ab" * 64,
    ],
)
def test_image_references(image: str) -> None:
    assert OptimizerGroup.model_validate(_group_with(image=image)).spec.image == image


@pytest.mark.parametrize(
    "image",
    [
        "Floe:1",
        "floe:",
        "floe:-x",
        "/floe",
        "floe//x",
        "floe@sha256:abc",
        "floe:1 ",
        "floe\t",
        "r/" + "a" * 520,
    ],
)
def test_bad_image_references(image: str) -> None:
    with pytest.raises(ValueError, match=r"spec\.image"):
        OptimizerGroup.model_validate(_group_with(image=image))


def test_nulls_count_as_absent_as_the_api_server_prunes_them() -> None:
    """The API server drops a null value of a field that cannot be null (then defaults it), and null
    values of maps; pydantic does the same, so both accept the same manifests."""
    group = OptimizerGroup.model_validate(_group_with(policy=None, executorTemplate={"nodeSelector": None}))
    assert group.spec.policy == SchedulingPolicy.QUOTA and group.spec.executor_template.node_selector == {}
    table = OptimizedTable.model_validate(
        _table_with(minor=None, catalog={"name": "c", "properties": {"uri": "x", "gone": None}})
    )
    assert table.spec.minor.trigger_file_count == 12 and table.spec.catalog.properties == {"uri": "x"}
    assert OptimizerGroup.model_validate({**_group_with(), "spec": None}).spec.initial_executors == 1
    with pytest.raises(ValueError, match=r"spec\.table\n  Field required"):
        OptimizedTable.model_validate(_table_with(table=None))
    with pytest.raises(ValueError, match=r"spec\.grop\n  Extra inputs are not permitted"):
        OptimizedTable.model_validate(_table_with(grop=None))  # an unknown field stays an error
    with pytest.raises(ValueError, match=r"spec\.clustering\.columns\.0"):
        OptimizedTable.model_validate(_table_with(clustering={"strategy": "zorder", "columns": [None]}))


def test_integral_floats_are_integers_as_kubectl_sends_them() -> None:
    """kubectl sends ``8.0`` (or ``1e1``) as the integer it is, and the API server stores that."""
    spec = OptimizedTable.model_validate(
        _table_with(fragmentRatio=8.0, minor={"triggerFileCount": 1e1}, maxTaskSize=1048576.0)
    ).spec
    assert (spec.fragment_ratio, spec.minor.trigger_file_count, spec.max_task_size) == (8, 10, 1048576)
    assert isinstance(spec.fragment_ratio, int)
    assert OptimizerGroup.model_validate(_group_with(executors=3.0)).spec.executors == 3
    with pytest.raises(ValueError, match=r"spec\.executors"):
        OptimizerGroup.model_validate(_group_with(executors=1e21))  # kubectl sends a float: not an integer


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            "executorCpuRequest: 250m, executorStartupCpuLimit: '2'",
            "executorStartupCpuLimit must be above executorCores (2)",
        ),
        (
            "executorStartupCpuLimit: '4'",
            "executorStartupCpuLimit needs executorCpuRequest below executorCores",
        ),
        ("executorCpuRequest: '2', executorStartupCpuLimit: '4'", "a pod whose CPU request equals its limit"),
        (
            "executorCpuRequest: 250m, executorStartupCpuLimit: lots",
            "spec.executorStartupCpuLimit: String should match",
        ),
    ],
)
def test_bad_startup_cpu_limit_says_why(tmp_path: Path, settings: str, message: str) -> None:
    # GOOD's group has executorCores: 2.
    path = tmp_path / "g.yaml"
    path.write_text(GOOD.replace("policy: balanced", f"policy: balanced, {settings}"))
    with pytest.raises(ManifestError, match=re.escape(message)):
        load_manifests(path)


def test_startup_cpu_limit_above_the_cores_of_a_burstable_pod(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(
        GOOD.replace(
            "policy: balanced", "policy: balanced, executorCpuRequest: 500m, executorStartupCpuLimit: 2500m"
        )
    )
    group = next(m for m in load_manifests(path) if m.kind == "OptimizerGroup")
    assert group.spec.executor_startup_cpu_limit == "2500m"
