"""The generated CRDs on a real kube-apiserver: they install, the examples apply, bad manifests are
rejected with the field named, printer columns, categories, short names and the scale subresource work.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from floe.api.crd import KIND_SPECS
from floe.api.group import OptimizerGroup, OptimizerGroupStatus
from floe.api.meta import SPARK_MIN_EXECUTOR_MEMORY
from floe.api.models import OptimizedTable
from floe.api.status import HealthStatus, OptimizedTableStatus, WaitingStatus
from floe.api.table import OptimizedTableTemplate
from floe.api.table_set import OptimizedTableSet
from floe.api.units import parse_duration, parse_quantity

from .conftest import REPO_ROOT, K8sCluster

pytestmark = pytest.mark.k8s

EXAMPLES_DIR = REPO_ROOT / "examples"
API_VERSION = "floe.dev/v1alpha1"


def _namespace(k8s: K8sCluster) -> Iterator[str]:
    name = f"crds-{uuid.uuid4().hex[:8]}"
    k8s.kubectl("create", "namespace", name)
    yield name
    k8s.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def namespace(crds: K8sCluster) -> Iterator[str]:
    """A fresh namespace, for a test that creates objects."""
    yield from _namespace(crds)


@pytest.fixture(scope="module")
def shared_namespace(crds: K8sCluster) -> Iterator[str]:
    """One namespace for the tests whose manifests are rejected or only dry-run: they create nothing."""
    yield from _namespace(crds)


def table(name: str = "orders", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "OptimizedTable",
        "metadata": {"name": name},
        "spec": {"table": "db.orders", "catalog": {"name": "prod", "secretRef": "prod-catalog"}, **spec},
    }


def table_set(name: str = "lake", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "OptimizedTableSet",
        "metadata": {"name": name},
        "spec": {"catalog": {"name": "prod", "secretRef": "prod-catalog"}, "include": ["sales.*"], **spec},
    }


def group(name: str = "etl", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "OptimizerGroup", "metadata": {"name": name}, "spec": spec}


def apply(k8s: K8sCluster, document: dict[str, Any], namespace: str, *extra: str) -> Any:
    return k8s.kubectl("apply", "-n", namespace, *extra, "-f", "-", input=json.dumps(document), check=False)


def get(k8s: K8sCluster, kind: str, name: str, namespace: str) -> dict[str, Any]:
    document: dict[str, Any] = k8s.kubectl_json("get", kind, name, "-n", namespace)
    return document


def patch_status(k8s: K8sCluster, kind: str, name: str, namespace: str, status: dict[str, Any]) -> None:
    k8s.kubectl(
        "patch", kind, name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


def columns(output: str) -> list[list[str]]:
    """``kubectl get`` table output, split into cells (cells are separated by 2+ spaces)."""
    return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]


# --------------------------------------------------------------------------------------------------
# Installing


def test_crds_are_established_and_structural(crds: K8sCluster) -> None:
    for spec in KIND_SPECS:
        document = crds.kubectl_json("get", "crd", spec.crd_name)
        conditions = {c["type"]: c["status"] for c in document["status"]["conditions"]}
        assert conditions["Established"] == "True" and conditions["NamesAccepted"] == "True"
        assert "NonStructuralSchema" not in conditions
        assert document["status"]["acceptedNames"]["shortNames"] == [spec.short_name]
    # Applying again is a no-op: the files are what the server holds.
    again = crds.kubectl("apply", "-f", str(REPO_ROOT / "crds")).stdout
    assert again.count("unchanged") == len(KIND_SPECS), again


def _apply_example(crds: K8sCluster, name: str, namespace: str) -> list[dict[str, Any]]:
    """Apply an example's documents (created, all of them), in the test's namespace instead of
    the one the example names."""
    documents = list(yaml.safe_load_all((EXAMPLES_DIR / name).read_text()))
    for document in documents:
        document["metadata"]["namespace"] = namespace
    out = crds.kubectl("apply", "-f", "-", input="---\n".join(yaml.safe_dump(d) for d in documents)).stdout
    assert out.count("created") == len(documents), out
    return documents


def test_example_optimized_table_applies(crds: K8sCluster, namespace: str) -> None:
    documents = _apply_example(crds, "optimized-table.yaml", namespace)
    stored = OptimizedTable.model_validate(get(crds, "optimizedtable", "orders", namespace))
    assert stored.spec == OptimizedTable.model_validate(documents[0]).spec
    assert stored.spec.table == "demo.orders" and stored.spec.catalog.properties["type"] == "sql"
    default_group = OptimizerGroup.model_validate(get(crds, "optimizergroup", "default", namespace))
    assert default_group.spec.max_threads == 2


def test_example_table_set_applies(crds: K8sCluster, namespace: str) -> None:
    documents = _apply_example(crds, "table-set.yaml", namespace)
    stored = OptimizedTableSet.model_validate(get(crds, "optimizedtableset", "lake", namespace))
    assert stored.spec == OptimizedTableSet.model_validate(documents[0]).spec
    assert stored.spec.table_spec("sales.orders").minor.trigger_file_count == 12
    out = crds.kubectl("get", "ots", "-n", namespace).stdout
    assert out.split()[:8] == ["NAME", "GROUP", "CATALOG", "MATCHED", "MANAGED", "CLAIMED", "LAST", "LISTED"]


def test_hpa_example_targets_the_groups_scale_subresource(crds: K8sCluster, namespace: str) -> None:
    """The HPA example applies next to its group, and the scale subresource it drives answers."""
    _apply_example(crds, "hpa.yaml", namespace)
    hpa = crds.kubectl_json("get", "hpa", "floe-etl", "-n", namespace)
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizerGroup",
        "name": "etl",
    }
    scale = json.loads(
        crds.kubectl(
            "get", "--raw", f"/apis/floe.dev/v1alpha1/namespaces/{namespace}/optimizergroups/etl/scale"
        ).stdout
    )
    assert scale["spec"] == {"replicas": 1}


def test_run_examples_apply(crds: K8sCluster, namespace: str) -> None:
    out = crds.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES_DIR / "run")).stdout
    assert out.count("created") == 6, out
    groups = crds.kubectl_json("get", "og", "-n", namespace)["items"]
    tables = crds.kubectl_json("get", "ot", "-n", namespace)["items"]
    assert sorted(g["metadata"]["name"] for g in groups) == ["batch", "streaming"]
    assert sorted(t["spec"]["table"] for t in tables) == [
        "demo.accounts", "demo.clicks", "demo.orders", "demo.pageviews",
    ]  # fmt: skip
    for document in groups + tables:
        model = OptimizerGroup if document["kind"] == "OptimizerGroup" else OptimizedTable
        model.model_validate(document)  # what the server stores, pydantic reads


def test_a_startup_cpu_limit_above_the_cores_of_a_burstable_pod_is_accepted(
    crds: K8sCluster, namespace: str
) -> None:
    for name, limit in (("boost-whole", "2"), ("boost-milli", "1500m")):
        manifest = group(name, executorCpuRequest="250m", executorStartupCpuLimit=limit)
        applied = apply(crds, manifest, namespace)
        assert applied.returncode == 0, applied.stderr
        spec = OptimizerGroup.model_validate(get(crds, "og", name, namespace)).spec
        assert spec.executor_startup_cpu_limit == limit


def test_server_defaults_equal_the_model_defaults(crds: K8sCluster, namespace: str) -> None:
    bare_group = {"apiVersion": API_VERSION, "kind": "OptimizerGroup", "metadata": {"name": "bare"}}
    assert apply(crds, bare_group, namespace).returncode == 0
    stored = get(crds, "og", "bare", namespace)
    # No default executor count: a group either sets one (1 when neither is set) or autoscales.
    assert stored["spec"] == {
        "policy": "quota",
        "executorCores": 1,
        "executorMemory": "2Gi",
        "heartbeatTimeout": "1m",
        "ackTimeout": "30s",
        "executeTimeout": "1h",
        "executorTemplate": {},
    }
    assert OptimizerGroup.model_validate(stored).spec == OptimizerGroup.model_validate(bare_group).spec
    assert OptimizerGroup.model_validate(stored).spec.initial_executors == 1
    autoscaled = group("auto", autoscaling={"maxExecutors": 4})
    assert apply(crds, autoscaled, namespace).returncode == 0
    assert get(crds, "og", "auto", namespace)["spec"]["autoscaling"] == {
        "minExecutors": 0,
        "maxExecutors": 4,
        "scaleDownDelay": "5m",
    }

    minimal = table("minimal")
    assert apply(crds, minimal, namespace).returncode == 0
    stored = get(crds, "ot", "minimal", namespace)
    # A table's settings stay unset: they are inherited, from its set, its group, then floe.
    assert stored["spec"] == {**minimal["spec"], "group": "default"}
    assert OptimizedTable.model_validate(stored).spec == OptimizedTable.model_validate(minimal).spec
    partial = table("partial", minor={"triggerInterval": "2h"})
    assert apply(crds, partial, namespace).returncode == 0
    assert get(crds, "ot", "partial", namespace)["spec"]["minor"] == {"triggerInterval": "2h"}
    # So do those of the levels it inherits from, at any depth.
    defaults = group("with-defaults", tableDefaults={"minor": {"triggerInterval": "2h"}})
    assert apply(crds, defaults, namespace).returncode == 0
    assert get(crds, "og", "with-defaults", namespace)["spec"]["tableDefaults"] == {
        "minor": {"triggerInterval": "2h"}
    }


# --------------------------------------------------------------------------------------------------
# Rejections: (id, manifest, what the API server's message must contain)

BAD_MANIFESTS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("quota-zero", table(quota=0), ["spec.quota", "should be greater than 0"]),
    ("quota-negative", table(quota=-1), ["spec.quota", "should be greater than 0"]),
    ("executors-negative", group(executors=-1), ["spec.executors", "greater than or equal to 0"]),
    ("executor-cores-zero", group(executorCores=0), ["spec.executorCores", "greater than or equal to 1"]),
    ("fragment-ratio-zero", table(fragmentRatio=0), ["spec.fragmentRatio", "greater than or equal to 1"]),
    (
        "min-target-size-ratio",
        table(minTargetSizeRatio=1.5),
        ["spec.minTargetSizeRatio", "less than or equal"],
    ),
    (
        "duplicate-ratio-zero",
        table(major={"duplicateRatio": 0}),
        ["spec.major.duplicateRatio", "greater than 0"],
    ),
    (
        "unknown-policy",
        group(policy="fastest"),
        ["spec.policy", 'Unsupported value: "fastest"', '"quota", "balanced"'],
    ),
    ("bad-quantity", table(targetSize="12 MB"), ["spec.targetSize", '"12 MB"', "should match"]),
    ("negative-quantity", table(maxTaskSize=-1), ["spec.maxTaskSize", "greater than or equal to 0"]),
    (
        "executors-at-files-negative",
        table(maintenance={"executorsAtFiles": -1}),
        ["spec.maintenance.executorsAtFiles", "greater than or equal to 0"],
    ),
    (
        "bad-duration",
        table(minPlanInterval="5 minutes"),
        ["spec.minPlanInterval", '"5 minutes"', "should match"],
    ),
    ("duration-as-number", table(minor={"triggerInterval": 60}), ["spec.minor.triggerInterval", "string"]),
    ("missing-table", {**table(), "spec": {"catalog": {"name": "prod"}}}, ["spec.table", "Required value"]),
    ("missing-catalog-name", table(catalog={"properties": {}}), ["spec.catalog.name", "Required value"]),
    ("table-without-namespace", table(table="orders"), ["spec.table", '"orders"', "should match"]),
    ("group-not-a-name", table(group="ETL_Group"), ["spec.group", "should match"]),
    ("secret-not-a-name", table(catalog={"name": "c", "secretRef": "my secret"}), ["spec.catalog.secretRef"]),
    ("unknown-field", table(grop="etl"), ['unknown field "spec.grop"']),
    # Bounds: every string, list and map has one, and the message names the field.
    ("image-with-newline", group(image="floe-optimizer:0.1.0\nx"), ["spec.image", "should match"]),
    ("image-with-space", group(image="floe optimizer:1"), ["spec.image", "should match"]),
    (
        "catalog-name-10000",
        table(catalog={"name": "c" * 10_000}),
        ["spec.catalog.name", "Too long", "more than 255"],
    ),
    ("table-10000", table(table="db." + "t" * 10_000), ["spec.table", "Too long", "more than 511"]),
    (
        "property-value-10000",
        table(catalog={"name": "c", "properties": {"uri": "u" * 10_000}}),
        ["spec.catalog.properties.uri", "Too long", "more than 8192"],
    ),
    (
        "property-key",
        table(catalog={"name": "c", "properties": {"s3 endpoint": "x"}}),
        ["spec.catalog.properties", "keys must be at most 253 characters long and match"],
    ),
    (
        "too-many-properties",
        table(catalog={"name": "c", "properties": {f"k{i}": "v" for i in range(129)}}),
        ["spec.catalog.properties", "Too many", "at most 128"],
    ),
    (
        "too-many-columns",
        table(clustering={"strategy": "zorder", "columns": [f"c{i}" for i in range(9)]}),
        ["spec.clustering.columns", "Too many", "at most 8 items"],
    ),
    (
        "column-10000",
        table(clustering={"strategy": "zorder", "columns": ["c" * 10_000]}),
        ["spec.clustering.columns[0]", "Too long"],
    ),
    (
        "too-many-tolerations",
        group(executorTemplate={"tolerations": [{"operator": "Exists"}] * 65}),
        ["spec.executorTemplate.tolerations", "Too many", "at most 64 items"],
    ),
    (
        "node-selector-key",
        group(executorTemplate={"nodeSelector": {"a/b/c": "x"}}),
        ["spec.executorTemplate.nodeSelector", "keys must"],
    ),
    ("group-name-too-long", group("g" * 52), ["metadata.name", "Too long", "more than 51"]),
    ("group-name-with-dot", group("etl.batch"), ["metadata.name", "should match"]),
    ("group-ref-with-dot", table(group="etl.batch"), ["spec.group", "should match"]),
    ("executors-too-many", group(executors=1001), ["spec.executors", "less than or equal to 1000"]),
    (
        "retries-too-many",
        table(execute={"numRetries": 101}),
        ["spec.execute.numRetries", "less than or equal"],
    ),
    ("int-as-string", group(executors="3"), ["spec.executors", "must be of type integer"]),
    ("bool-as-string", table(enabled="false"), ["spec.enabled", "must be of type boolean"]),
    ("quantity-too-long", table(targetSize="1" * 65), ["spec.targetSize", "Too long"]),
    # One per CEL rule.
    (
        "cel-executors-and-autoscaling",
        group(executors=2, autoscaling={"maxExecutors": 4}),
        ["spec.autoscaling", "set spec.executors (a fixed count) or spec.autoscaling, not both"],
    ),
    (
        "cel-autoscaling-min-above-max",
        group(autoscaling={"minExecutors": 5, "maxExecutors": 4}),
        [
            "spec.autoscaling.minExecutors",
            "autoscaling.minExecutors must not exceed autoscaling.maxExecutors",
        ],
    ),
    (
        "cel-startup-cpu-not-above-cores",
        group(executorCores=2, executorCpuRequest="500m", executorStartupCpuLimit="2000m"),
        ["spec.executorStartupCpuLimit", "executorStartupCpuLimit must be above executorCores"],
    ),
    (
        "cel-startup-cpu-guaranteed-pod",
        group(executorStartupCpuLimit="2"),
        ["spec.executorCpuRequest", "executorStartupCpuLimit needs executorCpuRequest below executorCores"],
    ),
    (
        "cel-startup-cpu-request-at-cores",
        group(executorCpuRequest="1", executorStartupCpuLimit="1.5"),
        ["spec.executorCpuRequest", "which Kubernetes refuses"],
    ),
    (
        "cel-autoscaling-negative-delay",
        group(autoscaling={"maxExecutors": 4, "scaleDownDelay": "-1"}),
        ["spec.autoscaling.scaleDownDelay", "autoscaling.scaleDownDelay must not be negative, got -1"],
    ),
    (
        "autoscaling-negative-min",
        group(autoscaling={"minExecutors": -1, "maxExecutors": 4}),
        ["spec.autoscaling.minExecutors", "greater than or equal to 0"],
    ),
    (
        "autoscaling-without-max",
        group(autoscaling={"minExecutors": 1}),
        ["spec.autoscaling.maxExecutors", "Required"],
    ),
    (
        "cel-heartbeat-timeout",
        group(heartbeatTimeout="0s"),
        ["spec.heartbeatTimeout", "heartbeatTimeout must be greater than 0", "got 0s"],
    ),
    (
        "cel-ack-timeout",
        group(ackTimeout="-1"),
        ["spec.ackTimeout", "ackTimeout must be greater than 0 (-1 does not turn it off)"],
    ),
    (
        "cel-execute-timeout",
        group(executeTimeout="0ms", ackTimeout="0.5s"),
        ["spec.executeTimeout", "executeTimeout must be greater than 0"],
    ),
    (
        "cel-ack-shorter-than-execute",
        group(ackTimeout="2h"),
        ["spec.ackTimeout", "ackTimeout (2h) must be shorter than executeTimeout (1h)"],
    ),
    (
        "cel-executor-memory",
        group(executorMemory="256Mi"),
        ["spec.executorMemory", "executorMemory must be at least 450Mi", "got 256Mi"],
    ),
    ("cel-target-size", table(targetSize="0Mi"), ["spec.targetSize", "targetSize must be greater than 0"]),
    (
        "cel-orphan-age",
        table(maintenance={"orphanFiles": {"olderThan": "59m"}}),
        ["spec.maintenance.orphanFiles.olderThan", "must be at least 1h", "got 59m"],
    ),
    (
        "cel-manifest-size",
        table(maintenance={"manifests": {"targetManifestSize": "0"}}),
        ["spec.maintenance.manifests.targetManifestSize", "must be greater than 0"],
    ),
    *(
        (
            f"cel-{job}-{name}",
            table(
                maintenance={job: {"column": "ts", "olderThan": "1d", name: "-1"}}
                if job == "dataRetention"
                else {job: {name: "-1"}}
            ),
            [f"spec.maintenance.{job}.{name}", f"{job}.{name} must be greater than 0"],
        )
        for job, name in (
            ("snapshotRetention", "maxAge"),
            ("snapshotRetention", "interval"),
            ("orphanFiles", "interval"),
            ("manifests", "interval"),
            ("danglingDeletes", "interval"),
            ("dataRetention", "olderThan"),
            ("dataRetention", "interval"),
        )
    ),
    *(
        (
            f"cel-refresh-{name}",
            table(refresh={name: "0s"}),
            [f"spec.refresh.{name}", f"refresh.{name} must be greater than 0", "got 0s"],
        )
        for name in ("minInterval", "maxInterval")
    ),
    (
        "retention-without-column",
        table(maintenance={"dataRetention": {"olderThan": "30d"}}),
        ["spec.maintenance.dataRetention.column", "Required value"],
    ),
    (
        "unknown-clustering",
        table(clustering={"strategy": "hilbert", "columns": ["a"]}),
        ["spec.clustering.strategy", 'Unsupported value: "hilbert"'],
    ),
    (
        "clustering-without-columns",
        table(clustering={"strategy": "zorder", "columns": []}),
        ["spec.clustering.columns", "at least 1 items"],
    ),
    (
        "unknown-optimizing-policy",
        table(optimizing={"policy": "lsm"}),
        ["spec.optimizing.policy", 'Unsupported value: "lsm"', '"amoro", "floe"'],
    ),
    (
        "unknown-favor",
        table(optimizing={"policy": "floe", "favor": "speed"}),
        ["spec.optimizing.favor", 'Unsupported value: "speed"', '"reads", "balanced", "writes"'],
    ),
    # OptimizedTableSet: its patterns, and its template held to the OptimizedTable's rules.
    ("set-empty-part", table_set(include=["sales..orders"]), ["spec.include[0]", "should match"]),
    ("set-open-class", table_set(exclude=["sales.[tmp"]), ["spec.exclude[0]", "should match"]),
    ("set-no-include", table_set(include=[]), ["spec.include", "at least 1 items"]),
    ("set-template-table", table_set(template={"table": "a.b"}), ['unknown field "spec.template.table"']),
    ("set-template-quota", table_set(template={"quota": 0}), ["spec.template.quota", "greater than 0"]),
    (
        "set-template-cel",
        table_set(template={"targetSize": "0Mi"}),
        ["spec.template.targetSize", "targetSize must be greater than 0"],
    ),
    ("set-list-interval", table_set(listInterval="0s"), ["spec.listInterval", "must be greater than 0"]),
    # An OptimizerGroup's tableDefaults, held to the OptimizedTable's rules too.
    (
        "group-defaults-quota",
        group(tableDefaults={"quota": 0}),
        ["spec.tableDefaults.quota", "greater than 0"],
    ),
    (
        "group-defaults-table",
        group(tableDefaults={"table": "a.b"}),
        ['unknown field "spec.tableDefaults.table"'],
    ),
    (
        "group-defaults-cel",
        group(tableDefaults={"maintenance": {"orphanFiles": {"olderThan": "10m"}}}),
        ["spec.tableDefaults.maintenance.orphanFiles.olderThan", "orphanFiles.olderThan must be at least 1h"],
    ),
]


@pytest.mark.parametrize(
    ("manifest", "expected"), [c[1:] for c in BAD_MANIFESTS], ids=[c[0] for c in BAD_MANIFESTS]
)
def test_bad_manifest_is_rejected_naming_the_field(
    crds: K8sCluster, shared_namespace: str, manifest: dict[str, Any], expected: list[str]
) -> None:
    result = apply(crds, manifest, shared_namespace)
    assert result.returncode != 0, result.stdout
    for fragment in expected:
        assert fragment in result.stderr, result.stderr
    missing = crds.kubectl(
        "get", manifest["kind"], manifest["metadata"]["name"], "-n", shared_namespace, check=False
    )
    assert "NotFound" in missing.stderr


def test_integral_floats_are_integers(crds: K8sCluster, namespace: str) -> None:
    """kubectl sends 8.0 as 8 (quantities and spec.executors too), and pydantic reads it so."""
    manifest = table(fragmentRatio=8.0, minor={"triggerFileCount": 1e1}, maxTaskSize=1048576.0)
    assert apply(crds, manifest, namespace).returncode == 0
    stored = get(crds, "ot", "orders", namespace)
    assert stored["spec"]["fragmentRatio"] == 8 and stored["spec"]["minor"]["triggerFileCount"] == 10
    assert stored["spec"]["maxTaskSize"] == 1048576
    assert OptimizedTable.model_validate(stored).spec == OptimizedTable.model_validate(manifest).spec
    assert apply(crds, group(executors=2.0), namespace).returncode == 0
    assert get(crds, "og", "etl", namespace)["spec"]["executors"] == 2


# The CEL duration and quantity parsers agree with units.parse_duration / parse_quantity.

DURATION_PAIRS = [
    ("30s", "1h"), ("1h", "1h"), ("61m", "1h"), ("1d", "25h"), ("1d", "23h59m59s"), ("250ms", "0.5s"),
    ("500ms", "0.5s"), ("1.5h", "5401s"), ("1.5h", "5400s"), ("1h30m", "90m1ms"), ("2d", "1d24h"),
    ("59.5s", "1m"),
]  # fmt: skip


@pytest.mark.parametrize(("ack", "execute"), DURATION_PAIRS)
def test_cel_duration_comparison_matches_parse_duration(
    crds: K8sCluster, shared_namespace: str, ack: str, execute: str
) -> None:
    result = apply(crds, group(ackTimeout=ack, executeTimeout=execute), shared_namespace, "--dry-run=server")
    accepted = parse_duration(ack) < parse_duration(execute)
    assert (result.returncode == 0) == accepted, result.stderr


MEMORY_VALUES = [
    "450Mi", "449Mi", "0.5Gi", "0.43Gi", "0.44Gi", "472M", "471M", "471859200", "471859199", "460800Ki",
    "460799Ki", 471859200, 471859199, "1Ti", "1T", "1G", "0.0004T",
]  # fmt: skip


@pytest.mark.parametrize("memory", MEMORY_VALUES, ids=str)
def test_cel_quantity_parsing_matches_parse_quantity(
    crds: K8sCluster, shared_namespace: str, memory: str | int
) -> None:
    result = apply(crds, group(executorMemory=memory), shared_namespace, "--dry-run=server")
    accepted = parse_quantity(memory) >= SPARK_MIN_EXECUTOR_MEMORY
    assert (result.returncode == 0) == accepted, result.stderr


@pytest.mark.parametrize(
    ("size", "accepted"), [("1", True), (1, True), ("0", False), (0, False), ("0.5", False)]
)
def test_cel_target_size_truncates_like_parse_quantity(
    crds: K8sCluster, shared_namespace: str, size: str | int, accepted: bool
) -> None:
    result = apply(crds, table(targetSize=size), shared_namespace, "--dry-run=server")
    assert (result.returncode == 0) == accepted == (parse_quantity(size) > 0), result.stderr


# --------------------------------------------------------------------------------------------------
# Status, printer columns, categories, short names, scale


def test_status_is_a_subresource(crds: K8sCluster, namespace: str) -> None:
    assert apply(crds, table("t1"), namespace).returncode == 0
    crds.kubectl(
        "patch", "ot", "t1", "-n", namespace, "--type=merge", "-p", '{"status": {"state": "PENDING"}}'
    )
    assert "status" not in get(crds, "ot", "t1", namespace)  # the main endpoint ignores status
    patch_status(crds, "ot", "t1", namespace, {"state": "PENDING"})
    assert get(crds, "ot", "t1", namespace)["status"]["state"] == "PENDING"
    bad = crds.kubectl(
        "patch", "ot", "t1", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", '{"status": {"lastOptimized": "yesterday"}}', check=False,
    )  # fmt: skip
    assert bad.returncode != 0 and "status.lastOptimized" in bad.stderr


def test_table_printer_columns(crds: K8sCluster, namespace: str) -> None:
    assert apply(crds, table("orders", group="etl", quota=2), namespace).returncode == 0
    two_days_ago = (datetime.now(UTC) - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = OptimizedTableStatus(
        state="MINOR_OPTIMIZING",
        snapshot_id=4242,
        quota_occupation=0.75,
        data_files=120,
        delete_files=7,
        last_minor_optimizing=two_days_ago,
        last_full_optimizing="2020-01-01T00:00:00Z",
        effective_spec=OptimizedTableTemplate.model_validate({"quota": 2.0}),
        health=HealthStatus(score=71, small_files=0.5, equality_deletes=0.2, position_deletes=0.05),
        waiting=WaitingStatus(reason="Optimizing", message="minor optimizing (process p1)"),
    )
    patch_status(
        crds, "ot", "orders", namespace, status.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    header, row = columns(crds.kubectl("get", "ot", "orders", "-n", namespace).stdout)
    assert header == [
        "NAME", "GROUP", "TABLE", "STATE", "QUOTA", "OCCUPATION", "HEALTH", "DATA FILES", "DELETE FILES",
        "LAST OPTIMIZED", "AGE",
    ]  # fmt: skip
    assert row[:9] == ["orders", "etl", "db.orders", "MINOR_OPTIMIZING", "2", "0.75", "71", "120", "7"]
    assert re.fullmatch(r"2d|47h|48h", row[9]), row  # relative to now, as kubectl prints dates
    header, row = columns(crds.kubectl("get", "ot", "orders", "-n", namespace, "-o", "wide").stdout)
    assert "WAITING" in header and row[header.index("WAITING")] == "Optimizing"
    stored = OptimizedTable.model_validate(get(crds, "ot", "orders", namespace))
    assert stored.status is not None and stored.status.last_optimized == two_days_ago


def test_group_printer_columns(crds: K8sCluster, namespace: str) -> None:
    assert apply(crds, group("etl", policy="balanced", executors=3), namespace).returncode == 0
    status = OptimizerGroupStatus(
        desired_executors=3,
        ready_executors=2,
        threads=2,
        tables=5,
        running_tasks=4,
        pending_tasks=9,
        selector="a=b",
    )
    patch_status(crds, "og", "etl", namespace, status.model_dump(mode="json", by_alias=True))
    header, row = columns(crds.kubectl("get", "og", "etl", "-n", namespace).stdout)
    assert header == ["NAME", "POLICY", "DESIRED", "READY", "THREADS", "TABLES", "RUNNING TASKS", "AGE"]
    assert row[:7] == ["etl", "balanced", "3", "2", "2", "5", "4"]


def test_category_and_short_names(crds: K8sCluster, namespace: str) -> None:
    assert apply(crds, table("orders"), namespace).returncode == 0
    assert apply(crds, group("etl"), namespace).returncode == 0
    listed = crds.kubectl("get", "floe", "-n", namespace, "-o", "name").stdout.split()
    assert sorted(listed) == ["optimizedtable.floe.dev/orders", "optimizergroup.floe.dev/etl"]
    for short, full, name in (("ot", "optimizedtables.floe.dev", "orders"), ("og", "optimizergroups", "etl")):
        by_short = crds.kubectl("get", short, "-n", namespace, "-o", "name").stdout.split()
        by_full = crds.kubectl("get", full, "-n", namespace, "-o", "name").stdout.split()
        assert by_short == by_full and len(by_short) == 1 and by_short[0].endswith(f"/{name}")
    resources = crds.kubectl("api-resources", "--api-group=floe.dev", "-o", "wide").stdout
    assert re.search(r"optimizergroups\s+og\s+floe.dev/v1alpha1\s+true\s+OptimizerGroup", resources), (
        resources
    )
    assert re.search(r"optimizedtables\s+ot\s+floe.dev/v1alpha1\s+true\s+OptimizedTable", resources), (
        resources
    )


def test_kubectl_scale_sets_executors(crds: K8sCluster, namespace: str) -> None:
    assert apply(crds, group("etl", executors=1), namespace).returncode == 0
    patch_status(crds, "og", "etl", namespace, {"readyExecutors": 1, "selector": "floe.dev/group=etl"})

    crds.kubectl("scale", "og", "etl", "-n", namespace, "--replicas", "3")

    assert get(crds, "og", "etl", namespace)["spec"]["executors"] == 3
    scale = json.loads(
        crds.kubectl(
            "get", "--raw", f"/apis/floe.dev/v1alpha1/namespaces/{namespace}/optimizergroups/etl/scale"
        ).stdout
    )
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": 1, "selector": "floe.dev/group=etl"}
    crds.kubectl("scale", "og", "etl", "-n", namespace, "--replicas", "0")  # scale to zero
    assert get(crds, "og", "etl", namespace)["spec"]["executors"] == 0


def test_kubectl_scale_is_refused_on_an_autoscaled_group(crds: K8sCluster, namespace: str) -> None:
    """An autoscaled group sizes itself: a fixed count from kubectl scale (or an HPA) is refused,
    naming both fields, and the group is left as it was."""
    assert apply(crds, group("auto", autoscaling={"maxExecutors": 4}), namespace).returncode == 0
    refused = crds.kubectl("scale", "og", "auto", "-n", namespace, "--replicas", "3", check=False)
    assert refused.returncode != 0
    assert "set spec.executors (a fixed count) or spec.autoscaling, not both" in refused.stderr
    assert "executors" not in get(crds, "og", "auto", namespace)["spec"]
