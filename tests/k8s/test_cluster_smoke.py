"""Proves the local control plane works: API, scheduling onto kwok's fake node, garbage collection."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import FAKE_NODE_TAINT, K8sCluster

pytestmark = pytest.mark.k8s


@pytest.fixture
def namespace(k8s: K8sCluster) -> Iterator[str]:
    """A fresh namespace, usable once kube-controller-manager has given it its default ServiceAccount."""
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    k8s.kubectl("create", "namespace", name)
    k8s.wait_for(
        f"ServiceAccount default in {name}",
        lambda: k8s.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
    )
    yield name
    k8s.kubectl("delete", "namespace", name, "--wait=false", check=False)


def fake_pod(name: str, namespace: str) -> dict[str, Any]:
    """A pod that only kwok's fake node accepts; its image is never pulled."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "tolerations": [{"key": FAKE_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "fake.invalid/never-pulled:1"}],
        },
    }


def run_pod(k8s: K8sCluster, name: str, namespace: str) -> dict[str, Any]:
    """Creates ``fake_pod`` and waits until it is Running; returns it."""
    k8s.kubectl("apply", "-f", "-", input=json.dumps(fake_pod(name, namespace)))
    k8s.wait_for(
        f"pod {namespace}/{name} Running",
        lambda: (
            k8s.kubectl_json("get", "pod", name, "-n", namespace).get("status", {}).get("phase") == "Running"
        ),
    )
    pod: dict[str, Any] = k8s.kubectl_json("get", "pod", name, "-n", namespace)
    return pod


def test_apiserver_is_ready(k8s: K8sCluster) -> None:
    assert k8s.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    assert k8s.server.startswith("https://127.0.0.1:")


def test_namespace_is_active(k8s: K8sCluster, namespace: str) -> None:
    assert k8s.kubectl_json("get", "namespace", namespace)["status"]["phase"] == "Active"


def test_pod_is_scheduled_onto_the_fake_node_and_runs(k8s: K8sCluster, namespace: str) -> None:
    pod = run_pod(k8s, "runner", namespace)

    assert pod["spec"]["nodeName"] == k8s.node_name  # bound by kube-scheduler
    assert pod["status"]["phase"] == "Running"  # played by kwok
    assert all(status["ready"] for status in pod["status"]["containerStatuses"])


def test_owned_configmap_is_garbage_collected_with_its_pod(k8s: K8sCluster, namespace: str) -> None:
    pod = run_pod(k8s, "owner", namespace)
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "owned",
            "namespace": namespace,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": pod["metadata"]["uid"]}
            ],
        },
        "data": {"key": "value"},
    }
    k8s.kubectl("apply", "-f", "-", input=json.dumps(configmap))
    assert k8s.kubectl_json("get", "configmap", "owned", "-n", namespace)["data"] == {"key": "value"}

    k8s.kubectl("delete", "pod", "owner", "-n", namespace, "--wait=true", timeout=120)

    k8s.wait_for(
        "the garbage collector to delete configmap owned",
        lambda: k8s.kubectl("get", "configmap", "owned", "-n", namespace, check=False).returncode != 0,
    )
    missing = k8s.kubectl("get", "configmap", "owned", "-n", namespace, check=False)
    assert "NotFound" in missing.stderr
