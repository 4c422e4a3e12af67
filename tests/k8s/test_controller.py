"""The controller against a real API server: kopf handlers, driver objects, Spark executor pods,
scaling, table status from a real optimizing run, Secrets kept out of status, GC and finalizers.

The drivers' ServiceAccount, Role and RoleBinding are the chart's (rendered by helm, applied to the
module's namespace), and the local Spark driver runs with that ServiceAccount's token: Spark's
executor pods are made with exactly the permissions the chart grants the drivers."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from mounted_secrets import mount_catalog_secret
from pki import Pki, get_json
from prometheus_client import generate_latest
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession
from run_records import MINOR
from test_autoscale import partitioned_small_files
from test_correctness import build_table

from floe.api.status import WaitingStatus
from floe.api.table import CatalogRef
from floe.controller import kube as kube_module
from floe.controller.config import HistoryTableConfig, OperatorConfig
from floe.controller.controller import Controller
from floe.controller.external_metrics import ExternalMetricsConfig
from floe.controller.objects import PROPERTIES_KEY, REGISTRATION_KEY, REGISTRATION_SECRET, TEMPLATE_KEY
from floe.local.reference_reader import ReferenceReader
from floe.protocol.client import TOKEN_FILE_ENV
from floe.tables.catalog import load_table, open_catalog
from floe.tables.run_history_table import read_runs
from floe_optimizer.app import Optimizer

from .conftest import FAKE_NODE_TAINT, REPO_ROOT, K8sCluster
from .helm import Helm, apply_driver_rbac
from .in_process import kubeconfig_of, operator_in_process

pytestmark = pytest.mark.k8s

PEERING_CRDS = REPO_ROOT / "operator" / "floe" / "controller" / "peering-crds.yaml"
KWOK_TEMPLATE = {
    "tolerations": [{"key": FAKE_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"type": "kwok"},
}
SECRET_VALUE = "s3cr3t-never-shown-7f3a"


@pytest.fixture(scope="module")
def namespace(k8s: K8sCluster, helm_binary: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """CRDs (floe's and kopf's peering) installed, and a fresh namespace for this module, with the
    chart's driver ServiceAccount, Role and RoleBinding in it."""
    k8s.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    k8s.kubectl("apply", "-f", str(PEERING_CRDS))
    for crd in (
        "optimizergroups.floe.dev",
        "optimizedtables.floe.dev",
        "optimizedtablesets.floe.dev",
        "kopfpeerings.kopf.dev",
    ):
        k8s.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    name = _new_namespace(k8s, "ctl")
    apply_driver_rbac(k8s, Helm(helm_binary, tmp_path_factory.mktemp("helm-home")), name)
    return name


@pytest.fixture(scope="module")
def bare_namespace(k8s: K8sCluster) -> str:
    """A served namespace where nobody made the drivers' ServiceAccount (floe without its chart)."""
    return _new_namespace(k8s, "bare")


def _new_namespace(k8s: K8sCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    k8s.kubectl("create", "namespace", name)
    k8s.wait_for(
        "default ServiceAccount",
        lambda: k8s.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
    )
    return name


@pytest.fixture(scope="module")
def controller(
    k8s: K8sCluster, namespace: str, bare_namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Controller]:
    """The operator in-process: kopf in a thread (with peering), task service, ticking engine, and
    the external metrics API with a serving certificate of `serving-ca`."""
    serving = tmp_path_factory.mktemp("external-metrics")
    tls = Pki(serving)
    tls.ca("serving-ca")
    tls.leaf("tls", "serving-ca", "/CN=floe-operator", "serverAuth", "-addext", "subjectAltName=IP:127.0.0.1")
    history = tmp_path_factory.mktemp("history")
    config = OperatorConfig(
        # Every run also goes to a run history table, in a SQLite catalog of its own.
        history=HistoryTableConfig(
            HISTORY_TABLE,
            CatalogRef.model_validate(
                {
                    "name": "history",
                    "properties": {
                        "type": "sql",
                        "uri": f"sqlite:///{history / 'catalog.db'}",
                        "warehouse": (history / "warehouse").as_uri(),
                    },
                }
            ),
        ),
        namespaces=[namespace, bare_namespace],
        service_port=0,
        service_url="http://floe-operator.floe-system.svc:7070",
        default_image="floe-optimizer:test",
        tick_interval_s=0.3,
        status_interval_s=1.0,
        refresh_interval_s=1.0,
        # The status test waits for every job's first run, not for a spread over the hour.
        spread_first_maintenance=False,
        external_metrics=ExternalMetricsConfig(0, serving),
        ui_port=_free_port(),
    )
    with operator_in_process(k8s, config) as ctrl:
        yield ctrl


HISTORY_TABLE = "floe_history.runs"
WAITING_REASONS = set(re.findall(r"[A-Z][A-Za-z]+", WaitingStatus.model_fields["reason"].description or ""))
"""Every reason the status schema documents for what a table waits for."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _apply(k8s: K8sCluster, manifest: dict[str, Any]) -> None:
    k8s.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def _group(name: str, namespace: str, executors: int = 2, cores: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizerGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "executors": executors,
            "executorCores": cores,
            "executorMemory": "2Gi",
            "executorTemplate": KWOK_TEMPLATE,
        },
    }


def _get(k8s: K8sCluster, *args: str) -> Any:
    result = k8s.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def _status(k8s: K8sCluster, kind: str, name: str, namespace: str) -> dict[str, Any]:
    return dict((_get(k8s, kind, name, "-n", namespace) or {}).get("status") or {})


def _events(k8s: K8sCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = _get(k8s, "events", "-n", namespace)["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


def assert_locked_down(pod_spec: dict[str, Any], container: dict[str, Any]) -> None:
    """Non-root, seccomp RuntimeDefault, no privilege escalation, every capability dropped."""
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_group_gets_driver_pod_service_and_config(
    k8s: K8sCluster, namespace: str, controller: Controller
) -> None:
    _apply(k8s, _group("alpha", namespace))
    k8s.wait_for("driver pod", lambda: _get(k8s, "pod", "floe-alpha-driver", "-n", namespace) is not None)
    group = _get(k8s, "og", "alpha", "-n", namespace)
    owner = {"kind": "OptimizerGroup", "name": "alpha", "uid": group["metadata"]["uid"], "controller": True}

    pod = _get(k8s, "pod", "floe-alpha-driver", "-n", namespace)
    assert pod["metadata"]["labels"]["floe.dev/group"] == "alpha"
    assert pod["metadata"]["labels"]["floe.dev/role"] == "driver"
    assert owner.items() <= pod["metadata"]["ownerReferences"][0].items()
    container = pod["spec"]["containers"][0]
    assert container["image"] == "floe-optimizer:test"
    assert container["command"][:3] == ["python", "-m", "floe_optimizer.driver"]
    group_arg = container["command"].index("--group") + 1
    assert container["command"][group_arg] == f"{namespace}/alpha"  # groups are keyed by namespace
    assert "k8s://https://kubernetes.default.svc" in container["command"]
    assert {"name": "FLOE_SERVICE_URL", "value": "http://floe-operator.floe-system.svc:7070"} in container[
        "env"
    ]
    assert pod["spec"]["serviceAccountName"] == "floe-driver"  # the chart's, shared by the namespace's groups
    assert pod["spec"]["nodeSelector"] == {"type": "kwok"}
    assert_locked_down(pod["spec"], container)
    assert pod["spec"]["securityContext"]["fsGroup"] == 185  # the optimizer image's group
    # The registration token: a file from the namespace's Secret, which the operator wrote.
    token_path = "/etc/floe/registration/token"
    assert {"name": "FLOE_REGISTRATION_TOKEN_FILE", "value": token_path} in container["env"]
    assert {"name": "registration", "mountPath": "/etc/floe/registration", "readOnly": True} in container[
        "volumeMounts"
    ]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "registration")
    assert volume["secret"]["secretName"] == REGISTRATION_SECRET
    assert volume["secret"]["defaultMode"] == 0o440
    secret = _get(k8s, "secret", REGISTRATION_SECRET, "-n", namespace)
    token = base64.b64decode(secret["data"][REGISTRATION_KEY]).decode()
    assert token == controller.config.registration_token
    assert {"kind": "OptimizerGroup", "name": "alpha", "controller": False}.items() <= next(
        r for r in secret["metadata"]["ownerReferences"] if r["name"] == "alpha"
    ).items()
    assert token not in json.dumps(pod)  # mounted, never written into the pod

    service = _get(k8s, "service", "floe-alpha-driver", "-n", namespace)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"floe.dev/group": "alpha", "floe.dev/role": "driver"}
    for kind, name in [
        ("service", "floe-alpha-driver"),
        ("configmap", "floe-alpha-spark"),
        ("configmap", "floe-alpha-scale"),
    ]:
        obj = _get(k8s, kind, name, "-n", namespace)
        assert owner.items() <= obj["metadata"]["ownerReferences"][0].items(), kind
    # The operator writes no RBAC: no ServiceAccount, Role or RoleBinding of its own.
    for kind in ("serviceaccounts", "roles", "rolebindings"):
        assert _get(k8s, kind, "-n", namespace, "-l", "app.kubernetes.io/managed-by=floe")["items"] == [], (
            kind
        )

    spark = _get(k8s, "configmap", "floe-alpha-spark", "-n", namespace)["data"]
    properties = dict(line.split("=", 1) for line in spark[PROPERTIES_KEY].splitlines())
    heap = int(properties["spark.executor.memory"].removesuffix("m"))
    overhead = int(properties["spark.executor.memoryOverhead"].removesuffix("m"))
    assert heap + overhead == 2048 and heap < 2048
    assert properties["spark.executor.instances"] == "2"
    assert properties["spark.kubernetes.driver.pod.name"] == "floe-alpha-driver"
    assert properties["spark.driver.host"] == f"floe-alpha-driver.{namespace}.svc"
    assert properties["spark.kubernetes.executor.label.floe.dev/group"] == "alpha"
    # What the drivers' Role leaves out, Spark must not try: its driver Service and volume claims.
    assert properties["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    assert properties["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert properties["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
    template = yaml.safe_load(spark[TEMPLATE_KEY])["spec"]
    assert template["tolerations"] == KWOK_TEMPLATE["tolerations"]
    assert template["automountServiceAccountToken"] is False  # executors never call the API
    assert_locked_down(template, template["containers"][0])

    # kwok runs the driver pod; no executor registers, so the group is not Ready yet.
    k8s.wait_for(
        "group status",
        lambda: (
            _status(k8s, "og", "alpha", namespace).get("selector")
            == "floe.dev/group=alpha,floe.dev/role=executor"
            and any(
                c["type"] == "Progressing" and c["status"] == "True"
                for c in _status(k8s, "og", "alpha", namespace).get("conditions", [])
            )
        ),
    )
    conditions = {c["type"]: c for c in _status(k8s, "og", "alpha", namespace)["conditions"]}
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"]
    assert all(c["lastTransitionTime"] for c in conditions.values())
    table = k8s.kubectl("get", "og", "alpha", "-n", namespace).stdout
    assert "DESIRED" in table and "READY" in table
    assert any(e["reason"] == "DriverCreated" for e in _events(k8s, namespace, "alpha"))


def _start_local_driver(
    k8s: K8sCluster, namespace: str, group: str, controller: Controller, tmp: Path
) -> tuple[subprocess.Popen[bytes], Path]:
    """Runs the driver entrypoint here, against the test API server: Spark creates the executor pods,
    authenticated as the drivers' ServiceAccount, as in the driver pod."""
    spark_cm = _get(k8s, "configmap", f"floe-{group}-spark", "-n", namespace)["data"]
    (tmp / "spark.properties").write_text(spark_cm[PROPERTIES_KEY])
    (tmp / "template.yaml").write_text(spark_cm[TEMPLATE_KEY])
    scale_file = tmp / "executors"
    _sync_scale_file(k8s, namespace, group, scale_file)
    # Plays the kubelet's Secret projection: the token the operator put in the namespace.
    secret = _get(k8s, "secret", REGISTRATION_SECRET, "-n", namespace)
    token_file = tmp / "registration-token"
    token_file.write_bytes(base64.b64decode(secret["data"][REGISTRATION_KEY]))
    command = [
        sys.executable, "-m", "floe_optimizer.driver",
        "--master", f"k8s://{k8s.server}",
        "--properties-file", str(tmp / "spark.properties"),
        "--scale-file", str(scale_file),
        "--service", controller.server.url,
        "--group", f"{namespace}/{group}",  # the task service knows groups as namespace/name
        "--executor-cores", "2",
        "--executor-memory", "2Gi",
        "--grace-period", "1",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.driver.port=0",
        "--conf", "spark.blockManager.port=0",
        "--conf", "spark.ui.enabled=false",
        "--conf", f"spark.kubernetes.executor.podTemplateFile={tmp / 'template.yaml'}",
    ]  # fmt: skip
    kubeconfig = k8s.service_account_kubeconfig("floe-driver", namespace)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), TOKEN_FILE_ENV: str(token_file)}
    log = (tmp / "driver.log").open("wb")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), scale_file


def _sync_scale_file(k8s: K8sCluster, namespace: str, group: str, path: Path) -> None:
    """Plays the kubelet's ConfigMap projection for the local driver."""
    data = _get(k8s, "configmap", f"floe-{group}-scale", "-n", namespace)["data"]
    path.write_text(data["executors"])


def _executor_pods(k8s: K8sCluster, namespace: str, group: str) -> list[dict[str, Any]]:
    selector = f"floe.dev/group={group},floe.dev/role=executor"
    pods = _get(k8s, "pods", "-n", namespace, "-l", selector)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def test_spark_creates_executor_pods_and_follows_scaling(
    k8s: K8sCluster, namespace: str, controller: Controller, tmp_path: Path
) -> None:
    _apply(k8s, _group("beta", namespace, executors=2))
    k8s.wait_for(
        "driver pod Running",
        lambda: (
            (_get(k8s, "pod", "floe-beta-driver", "-n", namespace) or {}).get("status", {}).get("phase")
            == "Running"
        ),
    )
    driver_uid = _get(k8s, "pod", "floe-beta-driver", "-n", namespace)["metadata"]["uid"]
    driver, scale_file = _start_local_driver(k8s, namespace, "beta", controller, tmp_path)
    try:

        def count(n: int) -> bool:
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            _sync_scale_file(k8s, namespace, "beta", scale_file)
            return len(_executor_pods(k8s, namespace, "beta")) == n

        k8s.wait_for("2 executor pods", lambda: count(2), timeout=120)
        pod = _executor_pods(k8s, namespace, "beta")[0]
        assert pod["metadata"]["ownerReferences"][0]["uid"] == driver_uid
        assert pod["metadata"]["labels"]["floe.dev/role"] == "executor"
        resources = pod["spec"]["containers"][0]["resources"]
        # Spark built the executor container on the template's, security context included.
        assert_locked_down(pod["spec"], pod["spec"]["containers"][0])
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert resources["limits"]["memory"] == "2Gi"
        assert resources["requests"]["cpu"] == "2"
        k8s.wait_for(
            "readyExecutors 2", lambda: _status(k8s, "og", "beta", namespace).get("readyExecutors") == 2
        )
        conditions = {c["type"]: c for c in _status(k8s, "og", "beta", namespace)["conditions"]}
        assert conditions["Ready"]["status"] == "True"
        # Two executors held: their cores count, against a static group at the same count.
        k8s.wait_for(
            "held executor core-seconds in status",
            lambda: (
                (_status(k8s, "og", "beta", namespace).get("executorCoreSeconds") or {}).get("held", 0) > 0
            ),
            timeout=60,
        )
        held = _status(k8s, "og", "beta", namespace)["executorCoreSeconds"]
        assert 0 < held["held"] <= held["static"]
        # The driver registered with the token from the namespace's registration Secret.
        k8s.wait_for(
            "the driver's optimizer registered",
            lambda: len(controller.service.optimizers(f"{namespace}/beta")) == 1,
            timeout=60,
        )

        k8s.kubectl("scale", "og", "beta", "-n", namespace, "--replicas", "3")
        k8s.wait_for("3 executor pods", lambda: count(3), timeout=90)
        k8s.kubectl("patch", "og", "beta", "-n", namespace, "--type=merge", "-p", '{"spec":{"executors":1}}')
        k8s.wait_for("1 executor pod", lambda: count(1), timeout=90)
        k8s.kubectl("scale", "og", "beta", "-n", namespace, "--replicas", "0")
        k8s.wait_for("no executor pods", lambda: count(0), timeout=90)
        assert _get(k8s, "pod", "floe-beta-driver", "-n", namespace)["metadata"]["uid"] == driver_uid
        assert any(e["reason"] == "Scaled" for e in _events(k8s, namespace, "beta"))
        path = f"/apis/floe.dev/v1alpha1/namespaces/{namespace}/optimizergroups/beta/scale"
        scale = json.loads(k8s.kubectl("get", "--raw", path).stdout)
        assert scale["spec"].get("replicas", 0) == 0  # omitted when zero
        assert scale["status"]["selector"] == "floe.dev/group=beta,floe.dev/role=executor"
    finally:
        driver.terminate()
        driver.wait(60)
    # Spark did all of it with the drivers' Role: nothing it tried was refused, and at its stop it
    # removed the executors' ConfigMap (by label, a deletecollection).
    log = (tmp_path / "driver.log").read_text()
    assert "forbidden" not in log.lower(), log[-5000:]
    left = _get(k8s, "configmaps", "-n", namespace, "-l", "spark-role=executor")["items"]
    assert left == [], [c["metadata"]["name"] for c in left]


def test_a_missing_driver_service_account_degrades_the_group(
    k8s: K8sCluster, bare_namespace: str, controller: Controller, helm_binary: str, tmp_path: Path
) -> None:
    _apply(k8s, _group("lone", bare_namespace, executors=1))

    def degraded() -> dict[str, Any] | None:
        conditions = {c["type"]: c for c in _status(k8s, "og", "lone", bare_namespace).get("conditions", [])}
        found = conditions.get("Degraded", {})
        return found if found.get("reason") == "DriverServiceAccountMissing" else None

    k8s.wait_for("the group Degraded for want of the drivers' ServiceAccount", lambda: degraded() is not None)
    message = (degraded() or {})["message"]
    assert "floe-driver" in message and bare_namespace in message and "watchNamespaces" in message
    warnings = [
        e for e in _events(k8s, bare_namespace, "lone") if e["reason"] == "DriverServiceAccountMissing"
    ]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
    assert _get(k8s, "pod", "floe-lone-driver", "-n", bare_namespace) is None
    # Once the chart's objects are there (helm upgrade adding the namespace), the driver follows.
    apply_driver_rbac(k8s, Helm(helm_binary, tmp_path), bare_namespace)
    k8s.wait_for(
        "the driver pod, once its ServiceAccount exists",
        lambda: _get(k8s, "pod", "floe-lone-driver", "-n", bare_namespace) is not None,
        timeout=90,
    )
    k8s.wait_for("the group no longer Degraded for it", lambda: degraded() is None)
    warnings = [
        e for e in _events(k8s, bare_namespace, "lone") if e["reason"] == "DriverServiceAccountMissing"
    ]
    assert len(warnings) == 1  # said once, not at every retry
    k8s.kubectl("delete", "og", "lone", "-n", bare_namespace, "--wait=true", "--timeout=60s")


def test_a_driver_running_as_another_account_is_replaced(
    k8s: K8sCluster, namespace: str, controller: Controller
) -> None:
    """Upgrading from an operator that made a ServiceAccount per group: the new one moves running
    drivers onto the chart's (`--driver-service-account`) by replacing their pods."""
    _apply(k8s, _group("delta", namespace, executors=1))
    k8s.wait_for("driver pod", lambda: _get(k8s, "pod", "floe-delta-driver", "-n", namespace) is not None)
    old_uid = _get(k8s, "pod", "floe-delta-driver", "-n", namespace)["metadata"]["uid"]
    k8s.kubectl("create", "serviceaccount", "floe-driver-next", "-n", namespace)
    saved = controller.config.driver_service_account
    controller.config.driver_service_account = "floe-driver-next"  # as a restarted operator would have it
    try:
        # Any reconciliation does it; an edit of the spec is the quickest to cause one.
        k8s.kubectl("patch", "og", "delta", "-n", namespace, "--type=merge", "-p", '{"spec":{"executors":2}}')

        def replaced() -> bool:
            pod = _get(k8s, "pod", "floe-delta-driver", "-n", namespace)
            return pod is not None and pod["metadata"]["uid"] != old_uid

        k8s.wait_for("the driver pod replaced", replaced, timeout=90)
        assert (
            _get(k8s, "pod", "floe-delta-driver", "-n", namespace)["spec"]["serviceAccountName"]
            == "floe-driver-next"
        )
        restarts = [e for e in _events(k8s, namespace, "delta") if e["reason"] == "DriverRestarting"]
        assert any("floe-driver-next" in e["message"] for e in restarts), restarts
    finally:
        controller.config.driver_service_account = saved
        k8s.kubectl("delete", "og", "delta", "-n", namespace, "--wait=true", "--timeout=60s")


def test_table_status_after_optimizing_keeps_secrets_out(
    k8s: K8sCluster,
    namespace: str,
    controller: Controller,
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
    spark: SparkSession,
) -> None:
    build_table(sql_catalog, reference, "identity", evolve_schema=False)
    properties = {"type": "sql", **{k: str(v) for k, v in sql_catalog.properties.items()}}
    properties["client.secret-token"] = SECRET_VALUE  # extra catalog property: must stay secret
    mount_catalog_secret("catalog", properties)  # as kubelet mounts it in the group's pods
    _apply(
        k8s,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "catalog", "namespace": namespace},
            "stringData": properties,
        },
    )
    _apply(k8s, _group("local", namespace, executors=1))
    _apply(
        k8s,
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": "orders", "namespace": namespace},
            "spec": {
                "table": "db.t",
                "catalog": {"name": sql_catalog.name, "secretRef": "catalog"},
                "group": "local",
                "targetSize": "16Ki",
                "maxTaskSize": "16Ki",
                "minPlanInterval": "0s",
            },
        },
    )
    # The group's pods are (re)made to mount the table's catalog Secret; from then on its tasks
    # leave the Secret's credentials out, and the optimizer reads them from the mount.
    k8s.wait_for(
        "the group's pods to mount the catalog Secret, and the table's tasks to rely on it",
        lambda: (
            controller.catalog_secrets.mounted_secrets.get(f"{namespace}/local") == frozenset({"catalog"})
            and controller.engine.uses_mounted_secret(f"{namespace}/orders")
        ),
        timeout=60,
    )
    optimizer = Optimizer(
        controller.server.url,
        group=f"{namespace}/local",
        threads=2,
        spark=spark,
        name="test-local",
        registration_token=controller.config.registration_token,
    )
    optimizer.start()
    try:
        k8s.wait_for(
            "committed optimizing in status",
            lambda: "committed" in (_status(k8s, "ot", "orders", namespace).get("lastResult") or ""),
            timeout=180,
        )
        # The table's few manifests are far below the rewrite's trigger: its evaluation settles
        # that job, which does not run until the table changes.
        jobs = {"dangling-deletes", "expire", "orphans"}
        k8s.wait_for(
            "the first run of every default maintenance job with something to look at, in status",
            lambda: set(_status(k8s, "ot", "orders", namespace).get("maintenance") or {}) == jobs,
            timeout=120,
        )
    finally:
        optimizer.stop(grace_s=5)
    status = _status(k8s, "ot", "orders", namespace)
    assert status["state"]  # whatever comes next: another round of optimizing may already have started
    # Each process sets its own type's time only; which types ran depends on the triggers.
    assert any(status.get(f"last{kind}Optimizing") for kind in ("Minor", "Major", "Full"))
    assert status["lastOptimized"]
    assert status["dataFiles"] > 0
    assert {c["type"] for c in status["conditions"]} == {
        "Optimizing",
        "Pending",
        "Degraded",
        "CatalogReady",
        "MaintenanceAllowed",
    }
    ready = next(c for c in status["conditions"] if c["type"] == "CatalogReady")
    assert ready["status"] == "True" and ready["message"].endswith("with the properties of Secret 'catalog'")
    expire = status["maintenance"]["expire"]
    assert expire["lastRun"] and expire["nextDue"] and not expire["lastResult"].startswith("failed")
    # The run history the API server took (its schema checks every record): the committed process
    # with its snapshot and executor time, and the maintenance runs beside it.
    runs = status["history"]
    committed = [r for r in runs if r["kind"] in ("minor", "major", "full") and r["outcome"] == "committed"]
    assert committed, runs
    assert all(r["snapshotId"] and r["executorSeconds"] > 0 and r["bytesOut"] > 0 for r in committed)
    assert {r["kind"] for r in runs} & jobs or len(committed) == len(runs)
    # Its health (its files as the last evaluation found them) and what it waits for now.
    assert 0 <= status["health"]["score"] <= 100 and set(status["health"]) == {
        "score",
        "smallFiles",
        "equalityDeletes",
        "positionDeletes",
    }
    # Whatever it waits for now (the optimizer is gone: NoExecutors, if another round is due), in words.
    assert status["waiting"]["reason"] in WAITING_REASONS and status["waiting"]["message"], status
    wide = k8s.kubectl("get", "ot", "orders", "-n", namespace, "-o", "wide").stdout
    header, row = wide.splitlines()[:2]
    assert "WAITING" in header.split()
    # The table keeps being evaluated, so the column may already show a later score than status did.
    shown = row.split()[header.split().index("HEALTH")]
    assert shown.isdigit() and 0 <= int(shown) <= 100, wide
    # The same runs in the run history table, once the sink appended them.
    assert controller.history is not None and controller.history.flush()
    stored = read_runs(
        load_table(open_catalog(controller.config.history.catalog), HISTORY_TABLE),  # type: ignore[union-attr]
        f"{namespace}/orders",
        None,
    )
    assert {r["runId"] for r in committed} <= {r.run_id for r in stored}
    reasons = {e["reason"] for e in _events(k8s, namespace, "orders")}
    assert {"OptimizingStarted", "Committed"} <= reasons
    everything = k8s.kubectl("get", "ot,og,events", "-n", namespace, "-o", "yaml").stdout
    assert SECRET_VALUE not in everything
    # The web UI shows the table, its group and its committed runs, and no credential.
    assert controller.ui_server is not None
    for path in ("/", "/tables", "/queue", f"/tables/{namespace}/orders"):
        with urllib.request.urlopen(controller.ui_server.url + path, timeout=30) as page:
            html = page.read().decode()
        assert SECRET_VALUE not in html and f"{namespace}/local" in html, path
    assert "<td>committed</td>" in html  # a run of the table's last runs
    assert '<circle class="point"' in html
    template = _get(k8s, "configmap", "floe-local-spark", "-n", namespace)["data"][TEMPLATE_KEY]
    assert "secretName: catalog" in template
    driver = _get(k8s, "pod", "floe-local-driver", "-n", namespace)
    assert {"secretName": "catalog", "optional": True, "defaultMode": 0o440} in [
        v.get("secret") for v in driver["spec"]["volumes"]
    ]
    # Batched: a flush with nothing changed sends nothing. The engine lives on (maintenance, the
    # quota's hour sliding), so a change may land between two flushes: wait for a quiet one.
    k8s.wait_for("a flush that sends nothing", lambda: controller.flusher.flush() == 0, timeout=60)

    # The finalizer: deleting the table removes it from the engine before the resource goes.
    assert _get(k8s, "ot", "orders", "-n", namespace)["metadata"].get("finalizers")
    k8s.kubectl("delete", "ot", "orders", "-n", namespace, "--timeout=60s")
    assert f"{namespace}/orders" not in controller.engine.runtimes


def test_a_history_table_that_cannot_be_written_shows_on_the_groups_and_holds_nothing_back(
    k8s: K8sCluster, namespace: str, controller: Controller
) -> None:
    """The history table's data directory turns into a file: appends fail, the runs wait, each
    group's HistoryWritten condition turns False with why, a HistoryNotWritten Event says it once,
    and both clear when the table takes the runs again."""
    sink, config = controller.history, controller.config.history
    assert sink is not None and config is not None
    _apply(k8s, _group("hist", namespace, executors=0))
    sink.put(MINOR.model_copy(update={"table": f"{namespace}/hist-probe"}))
    assert sink.flush()  # the first append creates the table
    table = load_table(open_catalog(config.catalog), HISTORY_TABLE)
    data = Path(table.metadata.location.removeprefix("file://")) / "data"
    moved = data.with_name("data-moved")
    data.rename(moved)
    data.write_text("not a directory")
    try:
        sink.put(MINOR.model_copy(update={"table": f"{namespace}/hist-probe", "run_id": "probe-2"}))
        assert not sink.flush()

        def history_condition() -> dict[str, Any]:
            conditions = _status(k8s, "og", "hist", namespace).get("conditions") or []
            return next((c for c in conditions if c["type"] == "HistoryWritten"), {})

        k8s.wait_for("HistoryWritten False", lambda: history_condition().get("status") == "False", timeout=60)
        assert "the run history table could not be written (1 runs wait)" in history_condition()["message"]
        warnings = [e for e in _events(k8s, namespace, "hist") if e["reason"] == "HistoryNotWritten"]
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
    finally:
        data.unlink()
        moved.rename(data)
    assert sink.flush()
    k8s.wait_for("HistoryWritten True", lambda: history_condition().get("status") == "True", timeout=60)
    assert "probe-2" in {r.run_id for r in read_runs(table.refresh(), f"{namespace}/hist-probe", None)}


def test_deleting_a_group_garbage_collects_its_objects(
    k8s: K8sCluster, namespace: str, controller: Controller
) -> None:
    _apply(k8s, _group("gamma", namespace, executors=1))
    k8s.wait_for("driver pod", lambda: _get(k8s, "pod", "floe-gamma-driver", "-n", namespace) is not None)
    k8s.kubectl("delete", "og", "gamma", "-n", namespace, "--wait=true", "--timeout=60s")

    def gone() -> bool:
        return all(
            _get(k8s, kind, name, "-n", namespace) is None
            for kind, name in [
                ("pod", "floe-gamma-driver"),
                ("service", "floe-gamma-driver"),
                ("configmap", "floe-gamma-spark"),
                ("configmap", "floe-gamma-scale"),
            ]
        )

    k8s.wait_for("garbage collection of the group's objects", gone, timeout=60)

    # The namespace's registration Secret stays for the other groups, without gamma as an owner.
    def owners() -> list[str]:
        secret = _get(k8s, "secret", REGISTRATION_SECRET, "-n", namespace)
        return [r["name"] for r in secret["metadata"]["ownerReferences"]]

    k8s.wait_for("gamma's owner reference gone from the registration Secret", lambda: "gamma" not in owners())
    assert "alpha" in owners()


def test_an_autoscaled_group_follows_its_tables_demand(
    k8s: K8sCluster, namespace: str, controller: Controller, sql_catalog: SqlCatalog
) -> None:
    """At zero executors with nothing due; a table with 3 tasks due (quota 1 of 2 threads: 2 of
    them count) brings 2 executors at once; deleted, the table's demand goes and the group goes
    back to zero after the scale-down delay; applied again, it comes back. Each decision is an
    Event, the scale ConfigMap the driver follows and status; the metrics show the figures."""
    group = _group("elastic", namespace, cores=1)
    del group["spec"]["executors"]
    group["spec"]["autoscaling"] = {"minExecutors": 0, "maxExecutors": 2, "scaleDownDelay": "2s"}
    _apply(k8s, group)

    def followed() -> str:
        return str((_get(k8s, "configmap", "floe-elastic-scale", "-n", namespace) or {}).get("data", {}))

    def scaled_to(executors: int) -> bool:
        status = _status(k8s, "og", "elastic", namespace)
        wanted = status.get("desiredExecutors") == executors
        # The driver hears the count from the task service at once, and from the ConfigMap (as
        # the kubelet projects it) when the service cannot answer.
        served = controller.service.executors(f"{namespace}/elastic") == executors
        return wanted and served and followed() == str({"executors": str(executors)})

    def ready_reason() -> str:
        conditions = _status(k8s, "og", "elastic", namespace).get("conditions") or []
        return str({c["type"]: c for c in conditions}.get("Ready", {}).get("reason"))

    k8s.wait_for("the group at zero executors", lambda: scaled_to(0), timeout=30)
    k8s.wait_for("Ready: ScaledToZero once the driver runs", lambda: ready_reason() == "ScaledToZero")

    partitioned_small_files(sql_catalog, "db.elastic", 3)
    properties = {"type": "sql", **{k: str(v) for k, v in sql_catalog.properties.items()}}
    table = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTable",
        "metadata": {"name": "elastic", "namespace": namespace},
        "spec": {
            "table": "db.elastic",
            "catalog": {"name": sql_catalog.name, "properties": properties},
            "group": "elastic",
            "quota": 1,
            "minor": {"triggerFileCount": 2},
            "minPlanInterval": "0s",
        },
    }
    _apply(k8s, table)
    k8s.wait_for("two executors for the table's demand", lambda: scaled_to(2), timeout=60)
    status = _status(k8s, "og", "elastic", namespace)
    assert status["demand"] == 2
    assert status["lastScale"] == "executors 0 → 2: demand of 2 tasks wants 2 executors"
    metrics = generate_latest(controller.service.metrics.registry).decode()
    assert f'floe_group_desired_executors{{group="{namespace}/elastic"}} 2.0' in metrics
    assert f'floe_group_demand_tasks{{group="{namespace}/elastic"}} 2.0' in metrics
    # The same demand for HPAs: the external metrics API, as the aggregation layer calls it (with
    # the client certificate whose CA the operator read from the API server at start).
    assert controller.metrics_server is not None and controller.config.external_metrics is not None
    pki = k8s.work_dir / "pki"
    served = controller.metrics_server.url + (
        f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/floe_group_demand_tasks"
        "?labelSelector=group%3Delastic"
    )
    status_code, body = get_json(
        served,
        controller.config.external_metrics.cert_dir / "serving-ca.crt",
        (pki / "front-proxy-client.crt", pki / "front-proxy-client.key"),
    )
    assert status_code == 200, body
    assert [(i["metricLabels"], i["value"]) for i in body["items"]] == [({"group": "elastic"}, "2")]
    # No warning while it scales up from zero: that is how an autoscaled group works.
    reasons = [e["reason"] for e in _events(k8s, namespace, "elastic")]
    assert "NoReadyExecutors" not in reasons and "NoOptimizer" not in reasons, reasons

    # The table's tasks are planned ahead, waiting for executors that never run them here (kwok
    # pods): deleting the table takes its demand away, applying it again brings it back.
    k8s.kubectl("delete", "ot", "elastic", "-n", namespace)
    k8s.wait_for("zero executors after the scale-down delay", lambda: scaled_to(0), timeout=60)
    assert _status(k8s, "og", "elastic", namespace)["lastScale"].startswith(
        "executors 2 → 0: demand stayed at most 0 executors' worth for 2s"
    )
    _apply(k8s, table)
    k8s.wait_for("two executors again", lambda: scaled_to(2), timeout=60)
    scaled = [e["reason"] for e in _events(k8s, namespace, "elastic") if e["reason"].startswith("Scaled")]
    assert scaled.count("ScaledUp") >= 1 and scaled.count("ScaledDown") >= 1, scaled
    k8s.kubectl("delete", "ot", "elastic", "-n", namespace)
    k8s.kubectl("delete", "og", "elastic", "-n", namespace)


def test_a_table_set_keeps_one_optimized_table_per_selected_table(
    k8s: K8sCluster, namespace: str, controller: Controller, tmp_path: Path
) -> None:
    """One manifest for a catalog: an OptimizedTable per selected table, owned by the set; each
    table's settings are its own, else the set's template, else its group's tableDefaults, and
    edits of either reach the tables at once, shown in status.effectiveSpec with their sources;
    a table an OptimizedTable written by hand serves is left to it; a table dropped from the
    catalog loses its OptimizedTable, with an Event; a catalog that cannot be listed changes
    nothing and says why; deleting the set deletes its tables."""
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/lake.db", warehouse=(tmp_path / "wh").as_uri())
    for name in (("sales",), ("sales", "eu"), ("raw",)):
        catalog.create_namespace(name)
    for identifier in ("sales.orders", "sales.eu.orders", "sales.tmp_orders", "raw.events"):
        catalog.create_table(identifier, pa.schema([("id", pa.int64())]))
    properties = {"type": "sql", **{k: str(v) for k, v in catalog.properties.items()}}
    by_hand = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTable",
        "metadata": {"name": "events-by-hand", "namespace": namespace},
        "spec": {
            "table": "raw.events",
            "catalog": {"name": "lake", "properties": properties},
            "enabled": False,
        },
    }
    _apply(k8s, by_hand)
    group = _group("lake", namespace, executors=0)
    group["spec"]["tableDefaults"] = {"quota": 3.0, "fragmentRatio": 4, "minor": {"triggerFileCount": 20}}
    _apply(k8s, group)
    table_set = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTableSet",
        "metadata": {"name": "lake", "namespace": namespace},
        "spec": {
            "catalog": {"name": "lake", "properties": properties},
            "include": ["sales.**", "raw.*"],
            "exclude": ["*.tmp_*"],
            "group": "lake",
            "template": {"quota": 2.0, "enabled": False},
        },
    }
    _apply(k8s, table_set)
    uid = _get(k8s, "ots", "lake", "-n", namespace)["metadata"]["uid"]

    def set_tables() -> dict[str, dict[str, Any]]:
        items = _get(k8s, "ot", "-n", namespace, "-l", "floe.dev/table-set=lake")["items"]
        return {item["metadata"]["name"]: item for item in items}

    k8s.wait_for("the set's two tables", lambda: sorted(set_tables()) == ["sales.eu.orders", "sales.orders"])
    orders = set_tables()["sales.orders"]
    assert orders["metadata"]["ownerReferences"][0]["uid"] == uid
    # The set writes the table, its catalog and group; the template is inherited, not copied.
    assert set(orders["spec"]) == {"table", "catalog", "group"}
    assert (orders["spec"]["table"], orders["spec"]["group"]) == ("sales.orders", "lake")

    def settings(name: str) -> tuple[dict[str, Any], dict[str, str]]:
        status = _status(k8s, "ot", name, namespace)
        return status.get("effectiveSpec") or {}, status.get("specSources") or {}

    def effective(name: str, *path: str) -> Any:
        value: Any = settings(name)[0]
        for key in path:
            value = (value or {}).get(key)
        return value

    k8s.wait_for("the tables' effective settings", lambda: effective("sales.orders", "quota") == 2.0)
    shown, sources = settings("sales.orders")
    assert (shown["fragmentRatio"], shown["minor"]["triggerFileCount"], shown["minTargetSizeRatio"]) == (
        4,
        20,
        0.75,
    )
    assert sources == {
        "enabled": "OptimizedTableSet/lake",
        "quota": "OptimizedTableSet/lake",
        "fragmentRatio": "OptimizerGroup/lake",
        "minor.triggerFileCount": "OptimizerGroup/lake",
    }
    status = _status(k8s, "ots", "lake", namespace)
    assert (status["matchedTables"], status["managedTables"], status["claimedTables"]) == (3, 2, 1)
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"CatalogReady": "True"}
    # The hand-written OptimizedTable of raw.events is the only one of that table.
    tables = _get(k8s, "ot", "-n", namespace)["items"]
    assert [t["metadata"]["name"] for t in tables if t["spec"]["table"] == "raw.events"] == ["events-by-hand"]

    # A setting of the table's own wins over the set's, and the set leaves it alone; an edit of
    # the template reaches every table that does not set the field itself, with no restart.
    k8s.kubectl(
        "patch", "ot", "sales.orders", "-n", namespace, "--type=merge", "-p", '{"spec":{"quota":0.25}}'
    )
    k8s.wait_for("the table's own quota", lambda: effective("sales.orders", "quota") == 0.25)
    assert settings("sales.orders")[1]["quota"] == "OptimizedTable"
    k8s.kubectl(
        "patch", "ots", "lake", "-n", namespace, "--type=merge", "-p", '{"spec":{"template":{"quota":1.0}}}'
    )
    k8s.wait_for("the template's new quota", lambda: effective("sales.eu.orders", "quota") == 1.0)
    assert effective("sales.orders", "quota") == 0.25
    assert set_tables()["sales.orders"]["spec"]["quota"] == 0.25
    # An edit of the group's defaults reaches its tables.
    k8s.kubectl(
        "patch", "og", "lake", "-n", namespace, "--type=merge", "-p",
        '{"spec":{"tableDefaults":{"minor":{"triggerFileCount":30}}}}',
    )  # fmt: skip
    k8s.wait_for(
        "the group's new default on both tables",
        lambda: {effective(n, "minor", "triggerFileCount") for n in set_tables()} == {30},
    )

    # A table dropped from the catalog loses its OptimizedTable; an annotation lists the catalog now.
    catalog.drop_table("sales.eu.orders")
    k8s.kubectl("annotate", "ots", "lake", "-n", namespace, "list.floe.dev/requested=1", "--overwrite")
    k8s.wait_for("the dropped table's OptimizedTable to go", lambda: sorted(set_tables()) == ["sales.orders"])
    assert "TableRemoved" in {e["reason"] for e in _events(k8s, namespace, "lake")}

    # A table renamed in the catalog is followed by its UUID, which the engine records once it
    # reads the table (enabled now): the same OptimizedTable, its own settings kept.
    k8s.kubectl(
        "patch", "ot", "sales.orders", "-n", namespace, "--type=merge", "-p", '{"spec":{"enabled":true}}'
    )
    uuid = str(catalog.load_table("sales.orders").metadata.table_uuid)
    k8s.wait_for(
        "the table's UUID in status",
        lambda: _status(k8s, "ot", "sales.orders", namespace).get("tableUuid") == uuid,
    )
    catalog.rename_table("sales.orders", "sales.orders_renamed")
    k8s.kubectl("annotate", "ots", "lake", "-n", namespace, "list.floe.dev/requested=2", "--overwrite")
    k8s.wait_for(
        "the OptimizedTable to follow the renamed table",
        lambda: set_tables().get("sales.orders", {}).get("spec", {}).get("table") == "sales.orders_renamed",
    )
    assert sorted(set_tables()) == ["sales.orders"]
    assert set_tables()["sales.orders"]["spec"]["quota"] == 0.25
    assert "TableRenamed" in {e["reason"] for e in _events(k8s, namespace, "lake")}

    # A catalog that cannot be listed: a condition and an Event, and nothing removed.
    k8s.kubectl(
        "patch", "ots", "lake", "-n", namespace, "--type=merge", "-p",
        json.dumps({"spec": {"catalog": {"properties": None, "secretRef": "no-such-catalog"}}}),
    )  # fmt: skip

    def catalog_ready() -> dict[str, Any]:
        conditions = _status(k8s, "ots", "lake", namespace).get("conditions") or []
        return dict({c["type"]: c for c in conditions}.get("CatalogReady") or {})

    k8s.wait_for("CatalogReady False", lambda: catalog_ready().get("status") == "False")
    assert catalog_ready()["reason"] == "SecretNotFound", catalog_ready()
    assert "no-such-catalog" in catalog_ready()["message"]
    assert "ListFailed" in {e["reason"] for e in _events(k8s, namespace, "lake")}
    assert sorted(set_tables()) == ["sales.orders"]

    # Deleting the set deletes its tables (garbage collection); the hand-written one stays.
    k8s.kubectl("delete", "ots", "lake", "-n", namespace)
    k8s.wait_for("the set's tables to go with it", lambda: not set_tables(), timeout=60)
    assert _get(k8s, "ot", "events-by-hand", "-n", namespace) is not None
    k8s.kubectl("delete", "ot", "events-by-hand", "-n", namespace)
    k8s.kubectl("delete", "og", "lake", "-n", namespace)


def test_an_operator_that_cannot_serve_external_metrics_says_why_and_runs_on(
    k8s: K8sCluster, namespace: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """externalMetrics on, but the serving certificate is missing (a Secret not mounted): the
    operator logs why it does not serve the API and runs the task service and engine without it."""
    with kubeconfig_of(k8s):
        config = OperatorConfig(
            namespaces=[namespace],
            service_port=0,
            create_peering_objects=False,
            standalone=True,
            external_metrics=ExternalMetricsConfig(0, tmp_path / "not-mounted"),
        )
        ctrl = Controller(config, kube_module.Kube())
        with caplog.at_level("ERROR", logger="floe.controller.controller"):
            ctrl.start()
        try:
            assert ctrl.metrics_server is None
            (record,) = [r for r in caplog.records if "external.metrics.k8s.io" in r.getMessage()]
            assert "not-mounted" in record.getMessage(), record.getMessage()
            assert ctrl.server.url  # the task service serves regardless
        finally:
            ctrl.stop()


def test_a_periodic_listing_reads_the_optimized_tables_only_when_something_changed(
    k8s: K8sCluster, namespace: str, controller: Controller, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 10,000 tables, reading every OptimizedTable of the namespace at each listInterval was a
    fifth of the idle operator's time: a listing that would change nothing reads the catalog only."""
    catalog = SqlCatalog("quiet", uri=f"sqlite:///{tmp_path}/quiet.db", warehouse=(tmp_path / "wh").as_uri())
    catalog.create_namespace("sales")
    for identifier in ("sales.orders", "sales.items"):
        catalog.create_table(identifier, pa.schema([("id", pa.int64())]))
    reads: list[str] = []
    list_custom = controller.kube.list_custom

    def counted(plural: str, namespace_: str) -> list[dict[str, Any]]:
        if plural == "optimizedtables" and namespace_ == namespace:
            reads.append(plural)
        return list_custom(plural, namespace_)

    monkeypatch.setattr(controller.kube, "list_custom", counted)
    properties = {"type": "sql", **{k: str(v) for k, v in catalog.properties.items()}}
    _apply(k8s, _group("quiet", namespace, executors=0))
    _apply(
        k8s,
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTableSet",
            "metadata": {"name": "quiet", "namespace": namespace},
            "spec": {
                "catalog": {"name": "quiet", "properties": properties},
                "include": ["sales.*"],
                "group": "quiet",
                "listInterval": "1s",
                "template": {"enabled": False},
            },
        },
    )

    def set_tables() -> list[str]:
        items = _get(k8s, "ot", "-n", namespace, "-l", "floe.dev/table-set=quiet")["items"]
        return sorted(item["metadata"]["name"] for item in items)

    def listings(count: int) -> None:
        """Wait for `count` more listings of the set (its lastListed moves at each)."""
        for _ in range(count):
            last = _status(k8s, "ots", "quiet", namespace).get("lastListed")
            k8s.wait_for(
                "the set's next listing",
                lambda last=last: _status(k8s, "ots", "quiet", namespace).get("lastListed") != last,
                timeout=60,
            )

    k8s.wait_for("the set's two tables", lambda: set_tables() == ["sales.items", "sales.orders"])
    # The listing that made them changed something; the next ones, nothing once they are applied.
    k8s.wait_for("a listing that changed nothing", lambda: bool(controller.quiet_listings), timeout=60)
    before = len(reads)
    listings(2)
    assert len(reads) == before, "a listing that could change nothing read the OptimizedTables"
    assert _status(k8s, "ots", "quiet", namespace)["managedTables"] == 2

    # A table deleted by hand is a change the watch sees: the next listing reads them and makes it again.
    k8s.kubectl("delete", "ot", "sales.orders", "-n", namespace)
    k8s.wait_for("the deleted table made again", lambda: set_tables() == ["sales.items", "sales.orders"])
    assert len(reads) > before
    # The catalog listing other tables is a change too.
    catalog.create_table("sales.refunds", pa.schema([("id", pa.int64())]))
    k8s.wait_for("the new table's OptimizedTable", lambda: "sales.refunds" in set_tables(), timeout=60)
    k8s.kubectl("delete", "ots", "quiet", "-n", namespace)
    k8s.kubectl("delete", "og", "quiet", "-n", namespace)


def test_kopfs_record_of_the_handled_spec_holds_no_inline_credential(
    k8s: K8sCluster, namespace: str, controller: Controller
) -> None:
    """kopf's last-handled-configuration annotation holds digests where the spec has inline
    credentials (by name, or marked in `secretProperties`), and a changed credential is still a
    change the operator handles."""
    _apply(k8s, _group("annotated", namespace, executors=0))
    properties = {"type": "rest", "uri": "http://127.0.0.1:9", "credential": f"id:{SECRET_VALUE}"}
    table = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTable",
        "metadata": {"name": "inline", "namespace": namespace},
        "spec": {
            "table": "db.t",
            "group": "annotated",
            "catalog": {
                "name": "c",
                "properties": {**properties, "tenant": "T3NANT-never-shown"},
                "secretProperties": ["tenant"],
            },
        },
    }
    table_id = f"{namespace}/inline"

    def record() -> str | None:
        found = _get(k8s, "ot", "inline", "-n", namespace) or {}
        annotations = found.get("metadata", {}).get("annotations") or {}
        return annotations.get("floe.dev/last-handled-configuration")

    def handled(credential: str) -> bool:
        resource = controller.resources.get(table_id)
        return resource is not None and resource.spec.catalog.properties.get("credential") == credential

    _apply(k8s, table)
    k8s.wait_for(
        "the table handled and its spec recorded", lambda: handled(f"id:{SECRET_VALUE}") and bool(record())
    )
    first = str(record())
    assert SECRET_VALUE not in first and "T3NANT-never-shown" not in first
    assert '"uri":"http://127.0.0.1:9"' in first, "what is not a credential stays as it is"

    table["spec"]["catalog"]["properties"]["credential"] = "id:0THER-never-shown"  # type: ignore[index]
    _apply(k8s, table)
    k8s.wait_for(
        "the changed credential handled", lambda: handled("id:0THER-never-shown") and record() != first
    )
    assert "0THER-never-shown" not in str(record())
    # The operator's finalizer goes once its delete handler ran; on a busy machine that can take
    # longer than kubectl's wait, so the test waits on the resources themselves (with the logs
    # if they stay).
    k8s.kubectl("delete", "ot", "inline", "-n", namespace, "--wait=false")
    k8s.wait_for("the table deleted", lambda: _get(k8s, "ot", "inline", "-n", namespace) is None, timeout=180)
    k8s.kubectl("delete", "og", "annotated", "-n", namespace, "--wait=false")
    k8s.wait_for("the group deleted", lambda: _get(k8s, "og", "annotated", "-n", namespace) is None, 180)
