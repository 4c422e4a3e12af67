"""The Helm chart (charts/floe) against the real API server of tests/k8s.

* Static: the chart's CRDs are byte-identical to the generated ones and to kopf's peering CRDs; the
  values reference in the chart's README is what scripts/docs/values_reference.py generates.
* helm: ``helm lint --strict``; bad values fail ``helm template`` / ``helm install`` with the key
  named; ``helm template`` output passes ``kubectl apply --dry-run=server``; the default serves the
  release namespace only, with no ClusterRole but read-only discovery.
* A namespaced install: ``helm install --wait`` (kwok runs the operator pod), a ``kubectl auth
  can-i --as=system:serviceaccount:NS:floe`` matrix (what the operator needs: yes; Secrets
  elsewhere, nodes, RBAC, escalation: no); then the operator runs in-process with the chart's
  ServiceAccount token and the Deployment's own arguments and environment: it leads (labels the
  Deployment's pod, which the Service then selects), creates the default group's driver pod (running
  as the chart's driver ServiceAccount), Service and ConfigMaps, which kwok runs, and follows a
  ``helm upgrade`` that adds a namespace; finally ``helm uninstall`` leaves no object with the
  release's labels (the CRDs stay, by Helm's rule).
* A release that served the whole cluster (before watchNamespaces defaulted to the release
  namespace) cannot be upgraded without naming its namespaces.

The exact effective permissions of the operator and the drivers are checked in test_rbac.py, and
checkov's scan of the rendered chart in test_chart_checkov.py. helm is built once from the Go module
proxy by scripts/helm/build.sh and cached (``FLOE_HELM`` names another helm v3 binary to use
instead).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from floe.protocol.client import TaskServiceClient, Unauthorized
from floe.protocol.wire import RegisterRequest

from .conftest import FAKE_NODE_TAINT, REPO_ROOT, K8sCluster
from .helm import CHART, RELEASE, Helm

pytestmark = pytest.mark.k8s

VALUES_REFERENCE = REPO_ROOT / "scripts" / "docs" / "values_reference.py"
PEERING_CRDS = REPO_ROOT / "operator" / "floe" / "controller" / "peering-crds.yaml"
KWOK_TOLERATIONS = [{"key": FAKE_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}]
KWOK_PLACEMENT = {"nodeSelector": {"type": "kwok"}, "tolerations": KWOK_TOLERATIONS}
RELEASE_SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/part-of=floe"


# --------------------------------------------------------------------------------------------------
# Static checks (no helm, no cluster)


def test_chart_crds_are_the_generated_ones() -> None:
    generated = {p.name: p.read_bytes() for p in (REPO_ROOT / "crds").glob("*.yaml")}
    expected = {**generated, "peering-crds.yaml": PEERING_CRDS.read_bytes()}
    in_chart = {p.name: p.read_bytes() for p in (CHART / "crds").iterdir()}
    assert sorted(in_chart) == sorted(expected)
    for name, content in expected.items():
        source = "operator/floe/controller/" if name == "peering-crds.yaml" else "crds/"
        assert in_chart[name] == content, (
            f"charts/floe/crds/{name} differs from its source; copy it: cp {source}{name} charts/floe/crds/"
        )


def test_values_reference_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("values_reference", VALUES_REFERENCE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    readme = (CHART / "README.md").read_text()
    assert module.updated_readme(readme, module.render_table(CHART)) == readme, (
        "charts/floe/README.md's values reference is stale: run python scripts/docs/values_reference.py"
    )


# --------------------------------------------------------------------------------------------------
# helm


@pytest.fixture(scope="module")
def helm_offline(helm_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm for commands that need no cluster (lint, template)."""
    return Helm(helm_binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def helm(helm_binary: str, k8s: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm against the test cluster, as its admin."""
    return Helm(helm_binary, tmp_path_factory.mktemp("helm-home"), k8s.kubeconfig)


def test_helm_lint(helm_offline: Helm) -> None:
    helm_offline("lint", "--strict", str(CHART))
    namespaced = {"watchNamespaces": ["a", "b"], "defaultGroup": {"enabled": True, "namespace": "a"}}
    helm_offline("lint", "--strict", str(CHART), "-f", helm_offline.values_file(namespaced))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"replicaCount": 0}, ["/replicaCount", "minimum"]),
        ({"watchNamespaces": "team-a"}, ["/watchNamespaces", "array"]),
        ({"watchNamespaces": ["Team_A"]}, ["/watchNamespaces/0", "does not match pattern"]),
        ({"image": {"pullPolicy": "Sometimes"}}, ["/image/pullPolicy", "Always"]),
        ({"imagee": {"tag": "x"}}, ["additional properties 'imagee' not allowed"]),
        (
            {"securityContext": {"allowPrivilegeEscalation": True}},
            ["/securityContext/allowPrivilegeEscalation"],
        ),
        ({"resources": {"limits": {"memory": "lots"}}}, ["/resources/limits/memory"]),
        ({"defaultGroup": {"spec": {"executors": -1}}}, ["/defaultGroup/spec/executors", "minimum"]),
        ({"defaultGroup": {"name": "g" * 52}}, ["/defaultGroup/name"]),  # floe-NAME-driver: 63 at most
        (
            {"watchNamespaces": ["a"], "defaultGroup": {"enabled": True, "namespace": "b"}},
            ['defaultGroup.namespace "b" is not among the watched namespaces [a]'],
        ),
        # The default serves the release namespace only: a default group elsewhere would go unserved.
        (
            {"defaultGroup": {"enabled": True, "namespace": "b"}},
            ['defaultGroup.namespace "b" is not among the watched namespaces [default]'],
        ),
        ({"image": {"digest": "sha256:abc"}}, ["/image/digest", "does not match pattern"]),
        ({"registrationToken": {"existingSecret": "My_Secret"}}, ["/registrationToken/existingSecret"]),
        ({"livenessPort": 80}, ["/livenessPort", "minimum"]),
        ({"peeringLifetimeSeconds": 1}, ["/peeringLifetimeSeconds", "minimum"]),
        ({"tableRefreshIntervalSeconds": 0}, ["/tableRefreshIntervalSeconds", "exclusiveMinimum"]),
        ({"externalMetrics": {"port": 80}}, ["/externalMetrics/port", "minimum"]),
        ({"ui": {"port": 80}}, ["/ui/port", "minimum"]),
        ({"grafanaDashboard": {"labelValue": "not a label"}}, ["/grafanaDashboard/labelValue"]),
        ({"history": {"table": "runs"}}, ["/history/table", "does not match pattern"]),
        (
            {"history": {"table": "floe.runs"}},
            ["history.catalogSecret: the Secret holding the history table's catalog"],
        ),
    ],
    ids=[
        "replicas",
        "ns-type",
        "ns-name",
        "pull-policy",
        "unknown-key",
        "escalation",
        "quantity",
        "executors",
        "group-name",
        "group-ns",
        "group-ns-default",
        "digest",
        "token-secret",
        "liveness-port",
        "peering",
        "refresh-interval",
        "external-metrics-port",
        "ui-port",
        "dashboard-label-value",
        "history-table",
        "history-secret",
    ],
)
def test_bad_values_fail_with_the_key_named(
    helm_offline: Helm, values: dict[str, Any], expected: list[str]
) -> None:
    result = helm_offline(
        "template", RELEASE, str(CHART), "-f", helm_offline.values_file(values), check=False
    )
    assert result.returncode != 0
    for text in expected:
        assert text in result.stderr, result.stderr


def test_optional_objects_render_only_when_enabled(helm_offline: Helm) -> None:
    defaults = helm_offline.render("ops", {})
    kinds = [d["kind"] for d in defaults]
    assert "ServiceMonitor" not in kinds and "OptimizerGroup" not in kinds
    assert "ConfigMap" not in kinds  # the Grafana dashboard's: test_grafana_dashboard.py
    # By default the release namespace alone is served: its Roles, its peering object, its driver
    # ServiceAccount; cluster-wide only the read-only discovery role, and no ClusterKopfPeering.
    assert "ClusterKopfPeering" not in kinds
    assert _names(defaults, "Role") == [("ops", "floe"), ("ops", "floe-driver"), ("ops", "floe-leader")]
    assert _names(defaults, "ServiceAccount") == [("ops", "floe"), ("ops", "floe-driver")]
    assert _names(defaults, "KopfPeering") == [("ops", "floe")]
    assert _names(defaults, "ClusterRole") == [("", "floe-ops-discovery")]
    deployment = next(d for d in defaults if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=ops"]
    secrets = [d for d in defaults if d["kind"] == "Secret"]
    assert [s["metadata"]["name"] for s in secrets] == ["floe-registration-token"]
    assert len(base64.b64decode(secrets[0]["data"]["token"])) == 48
    # A Secret of the user's instead: the chart makes none and the operator mounts that one.
    own = {"registrationToken": {"existingSecret": "mine", "existingSecretKey": "secret"}}
    docs = helm_offline.render("ops", own)
    assert "Secret" not in [d["kind"] for d in docs]
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "registration-token")
    assert volume["secret"] == {"secretName": "mine", "items": [{"key": "secret", "path": "token"}]}
    assert "Job" not in kinds  # the pre-delete hook comes with the default group only
    assert "APIService" not in kinds

    docs = helm_offline.render(
        "ops",
        {
            "serviceMonitor": {"enabled": True},
            "defaultGroup": {"enabled": True},
            "watchNamespaces": ["ops", "x"],
        },
    )
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    assert len(by_kind["ServiceMonitor"]) == 1
    assert by_kind["OptimizerGroup"][0]["metadata"]["namespace"] == "ops"
    (job,) = by_kind["Job"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    script = (CHART / "files" / "delete-default-group.py").read_text()
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "-c", script]
    # The operator's Role and the drivers' ServiceAccount and Role in each watched namespace,
    # cluster-wide only the read-only discovery role.
    assert _names(docs, "Role") == [
        ("ops", "floe"),
        ("ops", "floe-cleanup"),
        ("ops", "floe-driver"),
        ("ops", "floe-leader"),
        ("x", "floe"),
        ("x", "floe-driver"),
    ]
    assert _names(docs, "ServiceAccount") == [
        ("ops", "floe"),
        ("ops", "floe-cleanup"),
        ("ops", "floe-driver"),
        ("x", "floe-driver"),
    ]
    assert _names(docs, "ClusterRole") == [("", "floe-ops-discovery")]
    assert all(set(rule["verbs"]) <= {"list", "watch"} for rule in by_kind["ClusterRole"][0]["rules"])
    assert _names(docs, "KopfPeering") == [("ops", "floe"), ("x", "floe")]
    assert "ClusterKopfPeering" not in by_kind
    # The admission policies, on Kubernetes 1.30 and later, unless turned off.
    assert _names(defaults, "ValidatingAdmissionPolicy") == [("", "floe-ops-pods"), ("", "floe-ops-secrets")]
    assert len(_names(defaults, "ValidatingAdmissionPolicyBinding")) == 2
    off = helm_offline.render("ops", {"admissionPolicy": {"enabled": False}})
    older = helm_offline(
        "template", RELEASE, str(CHART), "--namespace", "ops", "--kube-version", "1.29.0"
    ).stdout
    for rendered in (yaml.safe_dump_all(off), older):
        assert "ValidatingAdmissionPolicy" not in rendered
    # Without rbac.create the chart makes no RBAC object and no driver ServiceAccount.
    bare = helm_offline.render("ops", {"rbac": {"create": False}})
    assert not {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"} & {d["kind"] for d in bare}
    assert _names(bare, "ServiceAccount") == [("ops", "floe")]


def test_external_metrics_render_an_api_service_that_trusts_the_served_certificate(
    helm_offline: Helm, tmp_path: Path
) -> None:
    """With externalMetrics on: the APIService's CA signed the certificate the operator serves, for
    the name the API server calls; the operator gets the port, the files and only the auth reader."""
    docs = helm_offline.render("ops", {"externalMetrics": {"enabled": True, "port": 8443}})
    (api_service,) = [d for d in docs if d["kind"] == "APIService"]
    assert api_service["metadata"]["name"] == "v1beta1.external.metrics.k8s.io"
    assert api_service["spec"]["service"] == {"name": "floe-operator", "namespace": "ops", "port": 8443}
    (tls,) = [d for d in docs if d["kind"] == "Secret" and d["type"] == "kubernetes.io/tls"]
    assert tls["data"]["ca.crt"] == api_service["spec"]["caBundle"]
    for key in ("ca.crt", "tls.crt"):
        (tmp_path / key).write_bytes(base64.b64decode(tls["data"][key]))
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.crt", "-verify_hostname", "floe-operator.ops.svc", "tls.crt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stderr
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--external-metrics-port=8443" in container["args"]
    assert {"name": "ext-metrics", "containerPort": 8443, "protocol": "TCP"} in container["ports"]
    service = next(d for d in docs if d["kind"] == "Service")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"http": 7070, "ext-metrics": 8443}
    (binding,) = [
        d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == "kube-system"
    ]
    assert binding["roleRef"]["name"] == "extension-apiserver-authentication-reader"


def test_a_history_table_mounts_its_catalog_secret_and_reaches_the_operator(helm_offline: Helm) -> None:
    values = {"history": {"table": "floe_history.runs", "catalogSecret": "history-catalog"}}
    deployment = next(d for d in helm_offline.render("ops", values) if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--history-table=floe_history.runs" in container["args"]
    assert "--history-catalog-config=/etc/floe/history/catalog.yaml" in container["args"]
    assert {"name": "history-catalog", "mountPath": "/etc/floe/history", "readOnly": True} in container[
        "volumeMounts"
    ]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "history-catalog"]
    assert volume["secret"] == {
        "secretName": "history-catalog",
        "items": [{"key": "catalog.yaml", "path": "catalog.yaml"}],
    }
    defaults = next(d for d in helm_offline.render("ops", {}) if d["kind"] == "Deployment")
    assert not [a for a in defaults["spec"]["template"]["spec"]["containers"][0]["args"] if "history" in a]


def test_the_web_ui_is_reached_by_port_forward_and_only_the_peers_allowed(helm_offline: Helm) -> None:
    """By default the operator serves its UI on a named port the Service leaves out and the
    NetworkPolicy admits nobody to; `ui.allowFrom` admits its peers; off, nothing of it renders."""

    def rendered(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        docs = helm_offline.render("ops", values)
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        service = next(d for d in docs if d["kind"] == "Service")
        policy = next(
            d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "floe-operator"
        )
        return deployment["spec"]["template"]["spec"]["containers"][0], service, policy

    container, service, policy = rendered({})
    assert "--ui-port=8080" in container["args"]
    assert {"name": "ui", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert "ui" not in {p["name"] for p in service["spec"]["ports"]}
    assert all(p["port"] != "ui" for rule in policy["spec"]["ingress"] for p in rule["ports"])
    ingress = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}}
    container, _, policy = rendered({"ui": {"port": 9090, "allowFrom": [ingress]}})
    assert "--ui-port=9090" in container["args"]
    (ui_rule,) = [r for r in policy["spec"]["ingress"] if r["ports"] == [{"port": "ui", "protocol": "TCP"}]]
    assert ui_rule["from"] == [ingress]
    container, _, policy = rendered({"ui": {"enabled": False, "allowFrom": [ingress]}})
    assert "--ui-port=0" in container["args"]
    assert "ui" not in {p["name"] for p in container["ports"]}
    assert all(p["port"] != "ui" for rule in policy["spec"]["ingress"] for p in rule["ports"])


def _names(docs: list[dict[str, Any]], kind: str) -> list[tuple[str, str]]:
    """(namespace, name) of the rendered objects of ``kind``, sorted."""
    return sorted(
        (d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in docs if d["kind"] == kind
    )


def test_network_policies_admit_only_the_groups_pods(helm_offline: Helm) -> None:
    extra = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    values = {"watchNamespaces": ["a", "b"], "networkPolicy": {"extraIngress": [extra]}}
    policies = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d["spec"]
        for d in helm_offline.render("ops", values)
        if d["kind"] == "NetworkPolicy"
    }
    assert sorted(policies) == [("a", "floe-spark"), ("b", "floe-spark"), ("ops", "floe-operator")]
    # The task service: driver pods (both labels) of the watched namespaces, in one peer (AND), and
    # the extra peers; on the service port only (the liveness port admits only the kubelet).
    operator = policies[("ops", "floe-operator")]
    assert operator["policyTypes"] == ["Ingress"]
    (rule,) = operator["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    drivers, *extras = rule["from"]
    assert drivers["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/managed-by": "floe", "floe.dev/role": "driver"}
    }
    assert drivers["namespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]
    }
    assert extras == [extra]
    # Spark's ports: only the groups' own driver and executor pods, of the same namespace.
    spark = {
        "matchExpressions": [
            {"key": "floe.dev/group", "operator": "Exists"},
            {"key": "floe.dev/role", "operator": "In", "values": ["driver", "executor"]},
        ]
    }
    for namespace in ("a", "b"):
        policy = policies[(namespace, "floe-spark")]
        assert policy["podSelector"] == spark
        assert policy["ingress"] == [{"from": [{"podSelector": spark}]}]
    # The default: the release namespace's drivers only.
    defaults = helm_offline.render("ops", {})
    operator = next(
        d for d in defaults if d["metadata"]["name"] == "floe-operator" and d["kind"] == "NetworkPolicy"
    )
    values_in = operator["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0][
        "values"
    ]
    assert values_in == ["ops"]
    # The uninstall hook's pod, with the default group: no ingress at all.
    hook = next(
        d["spec"]
        for d in helm_offline.render("ops", {"defaultGroup": {"enabled": True}})
        if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "floe-cleanup"
    )
    assert hook == {
        "podSelector": {
            "matchLabels": {"app.kubernetes.io/instance": "floe", "app.kubernetes.io/component": "cleanup"}
        },
        "policyTypes": ["Ingress"],
    }
    assert "NetworkPolicy" not in {
        d["kind"] for d in helm_offline.render("ops", {"networkPolicy": {"enabled": False}})
    }


def test_deployment_is_locked_down(helm_offline: Helm) -> None:
    docs = helm_offline.render("ops", {"watchNamespaces": ["a"]})
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}} in pod["volumes"]
    assert container["resources"]["requests"] and container["resources"]["limits"] == {
        "cpu": "2",
        "memory": "1Gi",
    }
    for probe in ("startupProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "health", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    assert container["args"] == [
        "--verbose",
        "operator",
        "--service-port=7070",
        "--registration-token-file=/etc/floe/registration-token/token",
        "--liveness=http://0.0.0.0:8081/healthz",
        "--peering-lifetime=60",
        "--no-create-peering",
        "--secret-interval=30",
        "--refresh-interval=10",
        "--driver-service-account=floe-driver",
        "--namespace=a",
        "--ui-port=8080",
    ]
    mount = {"name": "registration-token", "mountPath": "/etc/floe/registration-token", "readOnly": True}
    assert mount in container["volumeMounts"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FLOE_SERVICE_URL"] == "http://floe-operator.ops.svc:7070"
    assert env["FLOE_OPTIMIZER_IMAGE"] == "ghcr.io/floe-dev/floe-optimizer:0.1.0"
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["metadata"]["name"] == "floe-operator"
    assert service["spec"]["selector"]["floe.dev/leader"] == "true"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 7070, "targetPort": "http", "protocol": "TCP"}
    ]
    # Pinned by digest when one is given, for both images.
    digest = "sha256:" + "ab" * 32
    docs = helm_offline.render("ops", {"image": {"digest": digest}, "optimizerImage": {"digest": digest}})
    container = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][
        0
    ]
    assert container["image"] == f"ghcr.io/floe-dev/floe-operator@{digest}"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FLOE_OPTIMIZER_IMAGE"] == f"ghcr.io/floe-dev/floe-optimizer@{digest}"


# --------------------------------------------------------------------------------------------------
# Against the API server


def _namespace(k8s: K8sCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    k8s.kubectl("create", "namespace", name)
    return name


@pytest.fixture(scope="module")
def crds(k8s: K8sCluster) -> None:
    """The chart's CRDs, established (helm install finds them there and leaves them as they are)."""
    k8s.kubectl("apply", "-f", str(CHART / "crds"))
    for crd in (
        "optimizergroups.floe.dev",
        "optimizedtables.floe.dev",
        "optimizedtablesets.floe.dev",
        "kopfpeerings.kopf.dev",
        "clusterkopfpeerings.kopf.dev",
    ):
        k8s.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"watchNamespaces": ["@watched"], "defaultGroup": {"enabled": True, "namespace": "@watched"}},
        {
            "serviceAccount": {"annotations": {"example.com/role": "x"}},
            "replicaCount": 2,
            "rbac": {"discovery": False},
            "externalMetrics": {"enabled": True},
            "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "floe"}},
        },
    ],
    ids=["defaults", "namespaced", "options"],
)
def test_rendered_chart_passes_server_side_dry_run(
    k8s: K8sCluster, helm: Helm, crds: None, values: dict[str, Any]
) -> None:
    release_ns, watched = _namespace(k8s, "dry"), _namespace(k8s, "dry-w")
    values = json.loads(json.dumps(values).replace("@watched", watched))
    rendered = helm.template(release_ns, values)
    result = k8s.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert "created (server dry run)" in result.stdout
    assert "error" not in result.stderr.lower(), result.stderr


def _can_i(k8s: K8sCluster, subject: str, checks: list[tuple[str, ...]]) -> dict[tuple[str, ...], bool]:
    """``kubectl auth can-i ARGS --as SUBJECT`` for each check (exit 0: yes, 1: no)."""

    def one(args: tuple[str, ...]) -> bool:
        result = k8s.kubectl("auth", "can-i", *args, f"--as={subject}", check=False)
        if result.returncode not in (0, 1) or result.stdout.strip() not in ("yes", "no"):
            raise AssertionError(f"auth can-i {args}: {result.stdout} {result.stderr}")
        return result.returncode == 0

    with ThreadPoolExecutor(8) as pool:
        return dict(zip(checks, pool.map(one, checks), strict=True))


def _assert_matrix(
    k8s: K8sCluster, subject: str, allowed: list[tuple[str, ...]], denied: list[tuple[str, ...]]
) -> None:
    answers = _can_i(k8s, subject, allowed + denied)
    wrong = [f"can-i {' '.join(c)}: should be yes" for c in allowed if not answers[c]]
    wrong += [f"can-i {' '.join(c)}: should be no" for c in denied if answers[c]]
    assert not wrong, "\n".join(wrong)


@pytest.fixture(scope="module")
def namespaced_release(k8s: K8sCluster, helm: Helm, crds: None) -> Iterator[dict[str, str]]:
    """``helm install --wait`` serving one namespace, with the default group there, placed on kwok."""
    names = {
        "release": _namespace(k8s, "floe-system"),
        "watched": _namespace(k8s, "team-a"),
        "other": _namespace(k8s, "team-b"),
    }
    values = {
        "watchNamespaces": [names["watched"]],
        **KWOK_PLACEMENT,
        "defaultGroup": {
            "enabled": True,
            "namespace": names["watched"],
            "spec": {
                "executors": 1,
                "executorCores": 1,
                "executorMemory": "1Gi",
                "executorTemplate": KWOK_PLACEMENT,
            },
        },
    }
    names["values"] = helm.values_file(values)
    helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        names["release"],
        "-f",
        names["values"],
        "--wait",
        "--timeout=90s",
    )
    yield names
    helm("uninstall", RELEASE, "--namespace", names["release"], "--wait", check=False)


def test_install_runs_the_operator_pod(
    k8s: K8sCluster, helm: Helm, namespaced_release: dict[str, str]
) -> None:
    ns = namespaced_release["release"]
    status = json.loads(helm("status", RELEASE, "--namespace", ns, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    deployment = k8s.kubectl_json("get", "deployment", "floe-operator", "-n", ns)
    assert deployment["status"].get("readyReplicas") == 1  # kwok plays the kubelet
    group = k8s.kubectl_json("get", "og", "default", "-n", namespaced_release["watched"])
    assert group["spec"]["executorMemory"] == "1Gi"
    peering = k8s.kubectl_json("get", "kopfpeerings.kopf.dev", "floe", "-n", namespaced_release["watched"])
    assert peering["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    # The admission policies are in force for the operator that runs below (Kubernetes 1.33 here).
    for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
        for policy in ("secrets", "pods"):
            assert _get(k8s, kind, f"floe-{ns}-{policy}") is not None, (kind, policy)


def test_namespaced_rbac_is_least_privilege(k8s: K8sCluster, namespaced_release: dict[str, str]) -> None:
    """What the installed release lets its identities do (test_rbac.py checks the complete lists)."""
    ns, watched, other = (namespaced_release[k] for k in ("release", "watched", "other"))
    subject = f"system:serviceaccount:{ns}:floe"
    allowed = [
        ("watch", "optimizergroups.floe.dev", "-n", watched),
        ("patch", "optimizedtables.floe.dev", "-n", watched),
        ("patch", "optimizergroups.floe.dev", "--subresource=status", "-n", watched),
        ("patch", "optimizedtables.floe.dev", "--subresource=status", "-n", watched),
        ("create", "pods", "-n", watched),
        ("delete", "pods", "-n", watched),
        ("patch", "configmaps", "-n", watched),
        ("create", "services", "-n", watched),
        ("get", "secrets", "-n", watched),
        ("patch", "secrets/floe-registration", "-n", watched),  # the drivers' registration token
        ("create", "secrets", "-n", watched),
        ("create", "events", "-n", watched),
        ("patch", "kopfpeerings.kopf.dev/floe", "-n", watched),
        ("patch", "pods", "-n", ns),  # the leader label on its own pod
        ("watch", "customresourcedefinitions"),  # kopf's discovery, read-only
    ]
    denied = [
        ("list", "secrets", "-n", watched),
        ("watch", "secrets", "-n", watched),
        ("update", "secrets", "-n", watched),
        ("patch", "secrets", "-n", watched),
        ("patch", "secrets/catalog", "-n", watched),
        ("create", "secrets", "-n", other),
        ("update", "secrets/floe-registration", "-n", watched),
        ("delete", "secrets/floe-registration", "-n", watched),
        ("patch", "secrets/floe-registration", "-n", other),
        ("patch", "secrets/floe-registration-token", "-n", ns),
        ("get", "secrets", "-n", other),
        ("get", "secrets", "-n", ns),
        ("get", "secrets", "--all-namespaces"),
        ("create", "pods", "-n", other),
        ("create", "pods", "-n", ns),
        ("patch", "pods", "-n", watched),
        ("update", "pods", "-n", watched),
        ("deletecollection", "pods", "-n", watched),
        ("list", "configmaps", "-n", watched),
        ("get", "configmaps", "-n", other),
        ("create", "persistentvolumeclaims", "-n", watched),
        ("create", "serviceaccounts", "-n", watched),
        ("patch", "serviceaccounts", "-n", watched),
        ("create", "roles", "-n", watched),
        ("patch", "roles", "-n", watched),
        ("create", "rolebindings", "-n", watched),
        ("patch", "rolebindings", "-n", watched),
        ("create", "roles", "-n", other),
        ("list", "optimizergroups.floe.dev", "-n", other),
        ("create", "pods", "--subresource=exec", "-n", watched),
        ("create", "pods", "--subresource=attach", "-n", watched),
        ("create", "pods", "--subresource=portforward", "-n", watched),
        ("create", "deployments.apps", "-n", watched),
        ("delete", "services", "-n", watched),
        ("escalate", "roles", "-n", watched),
        ("bind", "roles", "-n", watched),
        ("bind", "clusterroles"),
        ("impersonate", "serviceaccounts", "-n", watched),
        ("create", "clusterroles"),
        ("create", "clusterrolebindings"),
        ("get", "nodes"),
        ("delete", "nodes"),
        ("delete", "namespaces"),
        ("create", "customresourcedefinitions"),
        ("delete", "customresourcedefinitions"),
        ("create", "kopfpeerings.kopf.dev", "-n", watched),
        ("patch", "kopfpeerings.kopf.dev/other", "-n", watched),
        ("patch", "clusterkopfpeerings.kopf.dev"),
        ("create", "tokenrequests", "-n", watched),
        ("create", "serviceaccounts", "--subresource=token", "-n", watched),
    ]
    _assert_matrix(k8s, subject, allowed, denied)
    # The drivers' identity: executor pods and their ConfigMap in its own namespace, nothing else.
    _assert_matrix(
        k8s,
        f"system:serviceaccount:{watched}:floe-driver",
        [
            ("create", "pods", "-n", watched),
            ("deletecollection", "pods", "-n", watched),
            ("create", "configmaps", "-n", watched),
        ],
        [
            ("create", "pods", "-n", other),
            ("get", "secrets", "-n", watched),
            ("get", "configmaps", "-n", watched),
            ("create", "services", "-n", watched),
            ("create", "persistentvolumeclaims", "-n", watched),
            ("patch", "pods", "-n", watched),
            ("create", "pods", "--subresource=exec", "-n", watched),
            ("list", "optimizergroups.floe.dev", "-n", watched),
        ],
    )
    # The uninstall hook's identity: that one group, nothing else.
    _assert_matrix(
        k8s,
        f"system:serviceaccount:{ns}:floe-cleanup",
        [("delete", "optimizergroups.floe.dev/default", "-n", watched)],
        [
            ("delete", "optimizergroups.floe.dev/other", "-n", watched),
            ("list", "optimizergroups.floe.dev", "-n", watched),
            ("delete", "optimizedtables.floe.dev/default", "-n", watched),
            ("delete", "pods", "-n", watched),
            ("get", "secrets", "-n", watched),
        ],
    )


class _Problems(logging.Handler):
    """Collects warnings and errors logged while the operator runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


@contextlib.contextmanager
def _operator_as_the_chart_runs_it(k8s: K8sCluster, namespace: str, tmp: Path) -> Iterator[Any]:
    """The operator in this process, as the chart's pod would run it.

    Its credentials are a token of the chart's ServiceAccount; its configuration comes from the
    Deployment's args (turned into a configuration by floe's CLI) and env; POD_NAME is the
    Deployment's (kwok-run) pod. What differs: the task service port (0: any free port on this
    machine), the liveness port (a free one), and the registration token file, which is the chart's
    Secret written where this process can read it (kwok mounts nothing).
    """
    from floe.cli import build_parser, operator_config
    from floe.controller import kube as kube_module
    from floe.controller.controller import Controller
    from floe.controller.main import run_kopf

    kubeconfig = k8s.service_account_kubeconfig("floe", namespace)

    deployment = k8s.kubectl_json("get", "deployment", "floe-operator", "-n", namespace)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    token_file = tmp / "registration-token"
    token_file.write_text(_chart_token(k8s, namespace))
    liveness_port = _free_port()
    args = build_parser().parse_args(
        [
            f"--registration-token-file={token_file}"
            if arg.startswith("--registration-token-file=")
            else arg.replace(":8081/", f":{liveness_port}/")
            for arg in container["args"]
        ]
    )
    selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())
    pod = k8s.kubectl_json("get", "pods", "-n", namespace, "-l", selector)["items"][0]["metadata"]["name"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env |= {"POD_NAME": pod, "POD_NAMESPACE": namespace, "KUBECONFIG": str(kubeconfig)}
    env.pop("HOME", None)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    problems = _Problems()
    logging.getLogger().addHandler(problems)
    stop, ready = threading.Event(), threading.Event()
    controller = None
    thread = None
    try:
        kube_module.load_config()
        config = dataclasses.replace(
            operator_config(args), service_port=0, tick_interval_s=0.3, status_interval_s=1.0
        )
        assert config.liveness_endpoint == f"http://0.0.0.0:{liveness_port}/healthz"
        controller = Controller(config, kube_module.Kube())
        controller.start()
        thread = threading.Thread(target=run_kopf, args=(controller, stop, ready), daemon=True)
        thread.start()
        assert ready.wait(60), "kopf did not start"
        k8s.wait_for("leadership", controller.leadership.is_leader, timeout=30)
        yield controller, pod, problems
    finally:
        stop.set()
        if thread is not None:
            thread.join(30)
        if controller is not None:
            controller.stop()
        logging.getLogger().removeHandler(problems)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _chart_token(k8s: K8sCluster, namespace: str) -> str:
    """The registration token in the chart's Secret."""
    secret = k8s.kubectl_json("get", "secret", "floe-registration-token", "-n", namespace)
    return base64.b64decode(secret["data"]["token"]).decode()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _http_get(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _get(k8s: K8sCluster, *args: str) -> Any:
    result = k8s.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def _run_cleanup_script(k8s: K8sCluster, namespace: str, group_namespace: str, timeout: float) -> str:
    """The chart's delete-default-group.py, run here with a token of the hook's ServiceAccount."""
    kubeconfig = k8s.service_account_kubeconfig("floe-cleanup", namespace, duration="10m")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "KUBECONFIG": str(kubeconfig),
        "GROUP_NAMESPACE": group_namespace,
        "GROUP_NAME": "default",
        "TIMEOUT_SECONDS": str(timeout),
    }
    result = subprocess.run(
        [sys.executable, str(CHART / "files" / "delete-default-group.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_operator_with_the_charts_identity_runs_the_default_group_and_follows_upgrade(
    k8s: K8sCluster, helm: Helm, namespaced_release: dict[str, str], tmp_path: Path
) -> None:
    ns, watched, other = (namespaced_release[k] for k in ("release", "watched", "other"))
    token = _chart_token(k8s, ns)
    with _operator_as_the_chart_runs_it(k8s, ns, tmp_path) as (controller, pod, problems):
        # Leading: the Deployment's pod is labelled, and the task service's Service selects it.
        k8s.wait_for(
            "the leader label",
            lambda: (
                (_get(k8s, "pod", pod, "-n", ns) or {})["metadata"]["labels"].get("floe.dev/leader") == "true"
            ),
        )

        # The Service selects that pod and only it. (Its EndpointSlice stays empty here: kwok's pod
        # IPs are loopback addresses, which EndpointSlices refuse.)
        service = k8s.kubectl_json("get", "service", "floe-operator", "-n", ns)
        selector = ",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items())
        selected = k8s.kubectl_json("get", "pods", "-n", ns, "-l", selector)["items"]
        assert [p["metadata"]["name"] for p in selected] == [pod]

        # The default group: driver pod (Running under kwok), its Service and ConfigMaps, made with
        # the chart's permissions only; the pod runs as the drivers' ServiceAccount the chart made.
        driver = "floe-default-driver"
        k8s.wait_for(
            "the default group's driver pod Running",
            lambda: (
                ((_get(k8s, "pod", driver, "-n", watched) or {}).get("status") or {}).get("phase")
                == "Running"
            ),
            timeout=60,
        )
        container = _get(k8s, "pod", driver, "-n", watched)["spec"]["containers"][0]
        assert container["image"] == "ghcr.io/floe-dev/floe-optimizer:0.1.0"
        assert {"name": "FLOE_SERVICE_URL", "value": f"http://floe-operator.{ns}.svc:7070"} in container[
            "env"
        ]
        for kind, name in [
            ("service", driver),
            ("configmap", "floe-default-spark"),
            ("configmap", "floe-default-scale"),
        ]:
            assert _get(k8s, kind, name, "-n", watched) is not None, kind
        assert _get(k8s, "pod", driver, "-n", watched)["spec"]["serviceAccountName"] == "floe-driver"
        # The operator made no RBAC object: every ServiceAccount, Role and RoleBinding there is the chart's.
        for kind in ("serviceaccounts", "roles", "rolebindings"):
            made = k8s.kubectl_json("get", kind, "-n", watched, "-l", "app.kubernetes.io/managed-by=floe")
            assert made["items"] == [], kind

        # The registration token: the chart's, copied by the operator (which may patch no other
        # Secret) into the group's namespace, where the driver pod mounts it.
        copy = _get(k8s, "secret", "floe-registration", "-n", watched)
        assert base64.b64decode(copy["data"]["token"]).decode() == token
        driver_pod = _get(k8s, "pod", driver, "-n", watched)
        volume = next(v for v in driver_pod["spec"]["volumes"] if v["name"] == "registration")
        assert volume["secret"]["secretName"] == "floe-registration"
        # What the driver does with it; without it, no registration.
        group = f"{watched}/default"
        request = RegisterRequest(group=group, threads=2, memory_bytes=0, name="driver")
        with pytest.raises(Unauthorized, match="missing registration token"):
            TaskServiceClient(controller.server.url).register(request)
        client = TaskServiceClient(controller.server.url, registration_token=token)
        session = client.register(request)

        # /metrics, unauthenticated, from the running operator.
        status, text = _http_get(f"{controller.server.url}/metrics")
        assert status == 200
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        assert samples[("floe_group_optimizers", (("group", group),))] == 1
        assert samples[("floe_group_threads", (("group", group),))] == 2
        assert samples[("floe_optimizer_registrations_total", (("result", "refused"),))] == 1
        client.unregister(session.token)
        client.close()

        # Liveness, as the probe asks: kopf's loop answers, with floe's engine probe in it.
        assert controller.config.liveness_endpoint is not None
        url = controller.config.liveness_endpoint.replace("0.0.0.0", "127.0.0.1")
        k8s.wait_for("the liveness endpoint", lambda: _http_get(url)[0] == 200, timeout=30)
        assert "engine_idle_s" in _http_get(url)[1]
        k8s.wait_for(
            "the group's status",
            lambda: bool((_get(k8s, "og", "default", "-n", watched).get("status") or {}).get("conditions")),
        )

        # helm upgrade: more executors for the group, a second namespace served.
        helm(
            "upgrade",
            RELEASE,
            str(CHART),
            "--namespace",
            ns,
            "-f",
            namespaced_release["values"],
            "--set",
            "defaultGroup.spec.executors=3",
            "--set",
            f"watchNamespaces={{{watched},{other}}}",
            "--wait",
            "--timeout=90s",
        )
        k8s.wait_for(
            "the scale ConfigMap at 3 executors",
            lambda: (
                (_get(k8s, "configmap", "floe-default-scale", "-n", watched) or {})
                .get("data", {})
                .get("executors")
                == "3"
            ),
        )
        # The upgrade kept the registration token: running drivers stay registered.
        assert _chart_token(k8s, ns) == token
        args = k8s.kubectl_json("get", "deployment", "floe-operator", "-n", ns)["spec"]["template"]["spec"][
            "containers"
        ][0]["args"]
        assert f"--namespace={other}" in args
        assert _can_i(k8s, f"system:serviceaccount:{ns}:floe", [("create", "pods", "-n", other)]) == {
            ("create", "pods", "-n", other): True
        }
        # The newly served namespace has what its groups' drivers run as, and kopf's peering object.
        for kind in ("serviceaccount", "role", "rolebinding"):
            assert _get(k8s, kind, "floe-driver", "-n", other) is not None, kind
        assert _get(k8s, "kopfpeerings.kopf.dev", "floe", "-n", other) is not None

        # What the pre-delete hook Job does at `helm uninstall` (kwok runs no container), with the
        # hook's ServiceAccount: the group goes while the operator runs, which removes kopf's
        # finalizer; the garbage collector then removes the driver pod and the rest.
        output = _run_cleanup_script(k8s, ns, watched, timeout=60)
        assert "deleted" in output and "removing its finalizers" not in output, output
        assert _get(k8s, "og", "default", "-n", watched) is None
    # A status code, not "403" anywhere: the API server's random port may end in those digits.
    forbidden = [
        m
        for m in problems.messages
        if re.search(r"(?<![\d:])403(?!\d)", m) or "orbidden" in m or "permission" in m.lower()
    ]
    # The upgrade replaced the Deployment's pod: the old one's leader label may fail to clear.
    forbidden = [m for m in forbidden if pod not in m]
    assert not forbidden, "\n".join(forbidden)


def test_uninstall_leaves_nothing_behind(
    k8s: K8sCluster, helm: Helm, namespaced_release: dict[str, str]
) -> None:
    ns, watched = namespaced_release["release"], namespaced_release["watched"]
    helm("uninstall", RELEASE, "--namespace", ns, "--wait", "--timeout=90s")
    kinds = k8s.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()

    def left(selector: str, *scope: str) -> list[str]:
        out = k8s.kubectl("get", ",".join(kinds), *scope, "-l", selector, "-o", "name", check=False)
        return out.stdout.split()

    # The pre-delete hook's Job and its pod go too (hook-succeeded), the pod a moment later.
    k8s.wait_for("the release's objects deleted", lambda: left(RELEASE_SELECTOR, "--all-namespaces") == [])
    # What the operator made for the default group goes with it (owner references, garbage collector).
    k8s.wait_for(
        "the default group's objects garbage-collected",
        lambda: left("app.kubernetes.io/managed-by=floe", "-n", watched) == [],
        timeout=60,
    )
    # Helm never deletes the CRDs of a chart's crds/ directory: they stay, by design.
    for crd in (
        "optimizergroups.floe.dev",
        "optimizedtables.floe.dev",
        "optimizedtablesets.floe.dev",
        "kopfpeerings.kopf.dev",
    ):
        assert _get(k8s, "crd", crd) is not None


def test_a_release_that_served_the_whole_cluster_must_name_its_namespaces(
    k8s: K8sCluster, helm: Helm, crds: None
) -> None:
    """Before watchNamespaces defaulted to the release namespace, an empty list served the whole
    cluster, with a ClusterKopfPeering. Upgrading such a release with the list still empty would
    silently stop serving every other namespace: the chart refuses, and says what to set."""
    ns, team = _namespace(k8s, "floe-old"), _namespace(k8s, "team-old")
    # What the earlier chart left: its ClusterKopfPeering, owned by the release.
    old = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {
            "name": "floe",
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": ns},
        },
    }
    k8s.kubectl("apply", "-f", "-", input=json.dumps(old))
    try:
        result = helm("upgrade", "--install", RELEASE, str(CHART), "--namespace", ns, check=False)
        assert result.returncode != 0
        assert "served the whole cluster" in result.stderr and "watchNamespaces" in result.stderr, (
            result.stderr
        )
        assert _get(k8s, "deployment", "floe-operator", "-n", ns) is None
        # Naming the namespaces is the way through (and removes the ClusterKopfPeering: no longer rendered).
        values = helm.values_file({**KWOK_PLACEMENT, "watchNamespaces": [ns, team]})
        helm("upgrade", "--install", RELEASE, str(CHART), "--namespace", ns, "-f", values, "--timeout=90s")
        assert _get(k8s, "kopfpeerings.kopf.dev", "floe", "-n", team) is not None
    finally:
        helm("uninstall", RELEASE, "--namespace", ns, "--wait", "--timeout=90s", check=False)
        k8s.kubectl("delete", "clusterkopfpeerings.kopf.dev", "floe", "--ignore-not-found")
    # Another release's ClusterKopfPeering (another namespace) is none of this release's business.
    other = {
        **old,
        "metadata": {
            **old["metadata"],
            "annotations": {**old["metadata"]["annotations"], "meta.helm.sh/release-namespace": "elsewhere"},
        },
    }
    k8s.kubectl("apply", "-f", "-", input=json.dumps(other))
    try:
        helm(
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            ns,
            "-f",
            helm.values_file(KWOK_PLACEMENT),
            "--timeout=90s",
        )
    finally:
        helm("uninstall", RELEASE, "--namespace", ns, "--wait", "--timeout=90s", check=False)
        k8s.kubectl("delete", "clusterkopfpeerings.kopf.dev", "floe", "--ignore-not-found")
