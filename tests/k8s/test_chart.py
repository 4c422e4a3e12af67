"""The Helm chart (charts/floe) against the real API server of tests/k8s.

* Static: the chart's CRDs are byte-identical to the generated ones and to kopf's peering CRDs; the
  values reference in the chart's README is what scripts/docs/values_reference.py generates.
* helm: ``helm lint --strict``; bad values fail ``helm template`` / ``helm install`` with the key
  named; ``helm template`` output passes ``kubectl apply --dry-run=server``.
* A namespaced install: ``helm install --wait`` (kwok runs the operator pod), a ``kubectl auth
  can-i --as=system:serviceaccount:NS:floe`` matrix (what the operator needs: yes; Secrets
  elsewhere, nodes, cluster RBAC, escalation: no); then the operator runs in-process with the
  chart's ServiceAccount token and the Deployment's own arguments and environment: it leads
  (labels the Deployment's pod, which the Service then selects), creates the default group's
  driver pod, Service and RBAC, which kwok runs, and follows a ``helm upgrade``; finally
  ``helm uninstall`` leaves no object with the release's labels (the CRDs stay, by Helm's rule).
* A cluster-wide install: the ClusterRole's matrix.

helm is built once from the Go module proxy by scripts/helm/build.sh and cached (``FLOE_HELM``
names another helm v3 binary to use instead).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
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

from floe.service.client import TaskServiceClient, Unauthorized
from floe.service.wire import RegisterRequest

from .conftest import FAKE_NODE_TAINT, REPO_ROOT, K8sCluster, K8sError

pytestmark = pytest.mark.k8s

CHART = REPO_ROOT / "charts" / "floe"
HELM_BUILD = REPO_ROOT / "scripts" / "helm" / "build.sh"
VALUES_REFERENCE = REPO_ROOT / "scripts" / "docs" / "values_reference.py"
PEERING_CRDS = REPO_ROOT / "operator" / "floe" / "controller" / "peering-crds.yaml"
RELEASE = "floe"
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


class Helm:
    """The helm binary, with its config, cache and data dirs kept under the test's tmp dir."""

    def __init__(self, binary: str, home: Path, kubeconfig: Path | None = None) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        command = [self.binary, *args]
        if self.kubeconfig is not None:
            command += ["--kubeconfig", str(self.kubeconfig)]
        result = subprocess.run(
            command, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result


@pytest.fixture(scope="session")
def helm_binary(request: pytest.FixtureRequest) -> str:
    """``$FLOE_HELM``, else scripts/helm/build.sh's helm: cached, or built now (minutes, progress shown)."""
    override = os.environ.get("FLOE_HELM")
    if override:
        return override
    check = subprocess.run([str(HELM_BUILD), "--check"], capture_output=True, text=True, check=False)
    if check.returncode == 0:
        return check.stdout.strip().splitlines()[-1]
    capture: Any = request.config.pluginmanager.getplugin("capturemanager")
    suspended = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with suspended:
        print(f"\n[helm] building helm with {HELM_BUILD} (cached afterwards)", flush=True)
        build = subprocess.run([str(HELM_BUILD)], stdout=subprocess.PIPE, text=True, check=False)
    if build.returncode != 0:
        raise K8sError(f"{HELM_BUILD} failed with exit code {build.returncode}; its output is above")
    return build.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def helm_offline(helm_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm for commands that need no cluster (lint, template)."""
    return Helm(helm_binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def helm(helm_binary: str, k8s: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm against the test cluster, as its admin."""
    return Helm(helm_binary, tmp_path_factory.mktemp("helm-home"), k8s.kubeconfig)


def _values_file(tmp: Path, values: dict[str, Any]) -> str:
    path = tmp / f"values-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def _render(helm: Helm, tmp: Path, namespace: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    out = helm("template", RELEASE, str(CHART), "--namespace", namespace, "-f", _values_file(tmp, values))
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def test_helm_lint(helm_offline: Helm, tmp_path: Path) -> None:
    helm_offline("lint", "--strict", str(CHART))
    namespaced = {"watchNamespaces": ["a", "b"], "defaultGroup": {"enabled": True, "namespace": "a"}}
    helm_offline("lint", "--strict", str(CHART), "-f", _values_file(tmp_path, namespaced))


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
            ['defaultGroup.namespace "b" is not among watchNamespaces'],
        ),
        ({"registrationToken": {"existingSecret": "My_Secret"}}, ["/registrationToken/existingSecret"]),
        ({"livenessPort": 80}, ["/livenessPort", "minimum"]),
        ({"peeringLifetimeSeconds": 1}, ["/peeringLifetimeSeconds", "minimum"]),
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
        "token-secret",
        "liveness-port",
        "peering",
    ],
)
def test_bad_values_fail_with_the_key_named(
    helm_offline: Helm, tmp_path: Path, values: dict[str, Any], expected: list[str]
) -> None:
    result = helm_offline("template", RELEASE, str(CHART), "-f", _values_file(tmp_path, values), check=False)
    assert result.returncode != 0
    for text in expected:
        assert text in result.stderr, result.stderr


def test_optional_objects_render_only_when_enabled(helm_offline: Helm, tmp_path: Path) -> None:
    kinds = [d["kind"] for d in _render(helm_offline, tmp_path, "ops", {})]
    assert "ServiceMonitor" not in kinds and "OptimizerGroup" not in kinds
    assert {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering"} <= set(kinds)
    secrets = [d for d in _render(helm_offline, tmp_path, "ops", {}) if d["kind"] == "Secret"]
    assert [s["metadata"]["name"] for s in secrets] == ["floe-registration-token"]
    assert len(base64.b64decode(secrets[0]["data"]["token"])) == 48
    # A Secret of the user's instead: the chart makes none and the operator mounts that one.
    own = {"registrationToken": {"existingSecret": "mine", "existingSecretKey": "secret"}}
    docs = _render(helm_offline, tmp_path, "ops", own)
    assert "Secret" not in [d["kind"] for d in docs]
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "registration-token")
    assert volume["secret"] == {"secretName": "mine", "items": [{"key": "secret", "path": "token"}]}
    assert "Job" not in kinds  # the pre-delete hook comes with the default group only

    docs = _render(
        helm_offline,
        tmp_path,
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
    # Namespaced: a Role per watched namespace, cluster-wide only the read-only discovery role.
    roles = sorted((r["metadata"]["namespace"], r["metadata"]["name"]) for r in by_kind["Role"])
    assert roles == [("ops", "floe"), ("ops", "floe-cleanup"), ("x", "floe")]
    assert [r["metadata"]["name"] for r in by_kind["ClusterRole"]] == ["floe-ops-discovery"]
    assert all(set(rule["verbs"]) <= {"list", "watch"} for rule in by_kind["ClusterRole"][0]["rules"])
    assert sorted(p["metadata"]["namespace"] for p in by_kind["KopfPeering"]) == ["ops", "x"]
    assert "ClusterKopfPeering" not in by_kind


def test_deployment_is_locked_down(helm_offline: Helm, tmp_path: Path) -> None:
    docs = _render(helm_offline, tmp_path, "ops", {"watchNamespaces": ["a"]})
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
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
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
        "--namespace=a",
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
        },
    ],
    ids=["cluster-wide", "namespaced", "options"],
)
def test_rendered_chart_passes_server_side_dry_run(
    k8s: K8sCluster, helm: Helm, crds: None, tmp_path: Path, values: dict[str, Any]
) -> None:
    release_ns, watched = _namespace(k8s, "dry"), _namespace(k8s, "dry-w")
    values = json.loads(json.dumps(values).replace("@watched", watched))
    rendered = helm(
        "template", RELEASE, str(CHART), "--namespace", release_ns, "-f", _values_file(tmp_path, values)
    ).stdout
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
def namespaced_release(
    k8s: K8sCluster, helm: Helm, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
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
    tmp = tmp_path_factory.mktemp("release")
    names["values"] = _values_file(tmp, values)
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


def test_namespaced_rbac_is_least_privilege(k8s: K8sCluster, namespaced_release: dict[str, str]) -> None:
    ns, watched, other = (namespaced_release[k] for k in ("release", "watched", "other"))
    subject = f"system:serviceaccount:{ns}:floe"
    allowed = [
        ("watch", "optimizergroups.floe.dev", "-n", watched),
        ("patch", "optimizedtables.floe.dev", "-n", watched),
        ("patch", "optimizergroups.floe.dev", "--subresource=status", "-n", watched),
        ("patch", "optimizedtables.floe.dev", "--subresource=status", "-n", watched),
        ("create", "pods", "-n", watched),
        ("deletecollection", "pods", "-n", watched),
        ("update", "configmaps", "-n", watched),
        ("create", "persistentvolumeclaims", "-n", watched),
        ("create", "services", "-n", watched),
        ("create", "serviceaccounts", "-n", watched),
        ("create", "roles", "-n", watched),
        ("patch", "rolebindings", "-n", watched),
        ("get", "secrets", "-n", watched),
        ("patch", "secrets/floe-registration", "-n", watched),  # the drivers' registration token
        ("create", "secrets", "-n", watched),
        ("create", "events", "-n", watched),
        ("patch", "kopfpeerings.kopf.dev", "-n", watched),
        ("create", "kopfpeerings.kopf.dev", "-n", watched),
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
        ("get", "configmaps", "-n", other),
        ("create", "roles", "-n", other),
        ("list", "optimizergroups.floe.dev", "-n", other),
        ("create", "pods", "--subresource=exec", "-n", watched),
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
        ("patch", "clusterkopfpeerings.kopf.dev"),
        ("create", "tokenrequests", "-n", watched),
        ("create", "serviceaccounts", "--subresource=token", "-n", watched),
    ]
    _assert_matrix(k8s, subject, allowed, denied)
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
    from floe.controller.runtime import Controller, run_kopf

    token = k8s.kubectl("create", "token", "floe", "-n", namespace, "--duration=1h").stdout.strip()
    admin = yaml.safe_load(k8s.kubeconfig.read_text())
    admin["users"] = [{"name": "floe-operator", "user": {"token": token}}]
    admin["contexts"][0]["context"]["user"] = "floe-operator"
    kubeconfig = tmp / "operator.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(admin))
    kubeconfig.chmod(0o600)

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
    token = k8s.kubectl("create", "token", "floe-cleanup", "-n", namespace, "--duration=10m").stdout.strip()
    config = yaml.safe_load(k8s.kubeconfig.read_text())
    config["users"] = [{"name": "floe-cleanup", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "floe-cleanup"
    kubeconfig = k8s.work_dir / f"cleanup-{uuid.uuid4().hex[:6]}.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    kubeconfig.chmod(0o600)
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

        # The default group: driver pod (Running under kwok), its Service and RBAC, made with the
        # chart's permissions only (creating the driver Role needs every permission it grants).
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
        for kind in ("service", "serviceaccount", "role", "rolebinding"):
            assert _get(k8s, kind, driver, "-n", watched) is not None, kind

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

        # What the pre-delete hook Job does at `helm uninstall` (kwok runs no container), with the
        # hook's ServiceAccount: the group goes while the operator runs, which removes kopf's
        # finalizer; the garbage collector then removes the driver pod and the rest.
        output = _run_cleanup_script(k8s, ns, watched, timeout=60)
        assert "deleted" in output and "removing its finalizers" not in output, output
        assert _get(k8s, "og", "default", "-n", watched) is None
    forbidden = [m for m in problems.messages if "403" in m or "orbidden" in m or "permission" in m.lower()]
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
    for crd in ("optimizergroups.floe.dev", "optimizedtables.floe.dev", "kopfpeerings.kopf.dev"):
        assert _get(k8s, "crd", crd) is not None


def test_cluster_wide_rbac_is_least_privilege(
    k8s: K8sCluster, helm: Helm, crds: None, tmp_path: Path
) -> None:
    ns, some = _namespace(k8s, "floe-cw"), _namespace(k8s, "team-c")
    values = _values_file(tmp_path, {**KWOK_PLACEMENT, "defaultGroup": {"enabled": True}})
    helm("install", RELEASE, str(CHART), "--namespace", ns, "-f", values, "--wait", "--timeout=90s")
    try:
        assert _get(k8s, "clusterkopfpeerings.kopf.dev", "floe") is not None
        # No operator runs here: the pre-delete hook's script removes kopf's finalizer itself.
        finalizer = {"metadata": {"finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}}
        k8s.kubectl("patch", "og", "default", "-n", ns, "--type=merge", "-p", json.dumps(finalizer))
        output = _run_cleanup_script(k8s, ns, ns, timeout=2)
        assert "removing its finalizers" in output and "deleted" in output, output
        allowed = [
            ("create", "pods", "-n", some),
            ("create", "roles", "-n", some),
            ("get", "secrets", "-n", some),
            ("patch", "optimizergroups.floe.dev", "--subresource=status", "-n", some),
            ("patch", "clusterkopfpeerings.kopf.dev"),
            ("patch", "pods", "-n", ns),
        ]
        denied = [
            ("list", "secrets", "--all-namespaces"),
            ("update", "secrets", "-n", some),
            ("create", "pods", "--subresource=exec", "-n", some),
            ("create", "deployments.apps", "-n", some),
            ("escalate", "roles", "-n", some),
            ("bind", "clusterroles"),
            ("create", "clusterroles"),
            ("create", "clusterrolebindings"),
            ("impersonate", "users"),
            ("delete", "nodes"),
            ("delete", "namespaces"),
            ("delete", "customresourcedefinitions"),
            ("create", "kopfpeerings.kopf.dev", "-n", some),
        ]
        _assert_matrix(k8s, f"system:serviceaccount:{ns}:floe", allowed, denied)
    finally:
        helm("uninstall", RELEASE, "--namespace", ns, "--wait", "--timeout=90s")
    assert _get(k8s, "clusterkopfpeerings.kopf.dev", "floe") is None
    assert _get(k8s, "clusterrole", f"floe-{ns}") is None
