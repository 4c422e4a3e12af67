"""Executor pods started with a CPU limit above their cores are resized in place once they register
(`floe_optimizer.startup_cpu`), against the real API server, as the drivers' ServiceAccount."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from floe_optimizer.startup_cpu import StartupCpuSettler, startup_limit_above

from .conftest import K8sCluster
from .helm import Helm, apply_driver_rbac

APP = "spark-0123"


@pytest.fixture
def namespace(k8s: K8sCluster) -> Iterator[str]:
    name = f"startup-cpu-{uuid.uuid4().hex[:8]}"
    k8s.kubectl("create", "namespace", name)
    yield name
    k8s.kubectl("delete", "namespace", name, "--wait=false", check=False)


def executor_pod(name: str, executor_id: str, cpu_request: str, app: str = APP) -> dict[str, Any]:
    """An executor pod as Spark makes it: the startup limit of 2 CPUs, memory request = limit."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"spark-app-selector": app, "spark-role": "executor", "spark-exec-id": executor_id},
        },
        # Left unscheduled: the API server refuses a resize of a pod on a node whose kubelet does
        # not resize (kwok's fake one); the e2e tests resize on a real kubelet.
        "spec": {
            "containers": [
                {
                    "name": "spark-kubernetes-executor",
                    "image": "fake.invalid/never-pulled:1",
                    "resources": {
                        "requests": {"cpu": cpu_request, "memory": "1Gi"},
                        "limits": {"cpu": "2", "memory": "1Gi"},
                    },
                }
            ],
        },
    }


def cpu_limit(core: Any, name: str, namespace: str) -> str:
    return str(core.read_namespaced_pod(name, namespace).spec.containers[0].resources.limits["cpu"])


def test_registered_executors_pods_are_resized_to_their_cores_once(
    k8s: K8sCluster, namespace: str, helm_binary: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    admin = client.CoreV1Api(config.new_client_from_config(config_file=str(k8s.kubeconfig)))
    for name, executor, request in (
        ("exec-1", "1", "250m"),
        ("exec-2", "2", "250m"),
        ("exec-3", "3", "1"),  # request = the cores: resized, the pod would turn Guaranteed
        ("other-app-1", "1", "250m"),
    ):
        app = "spark-other" if name.startswith("other") else APP
        admin.create_namespaced_pod(namespace, executor_pod(name, executor, request, app))
    # As the drivers' ServiceAccount, with the chart's Role.
    docs = apply_driver_rbac(k8s, Helm(helm_binary, tmp_path), namespace)
    account = next(d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount")
    as_driver = config.new_client_from_config(
        config_file=str(k8s.service_account_kubeconfig(account, namespace))
    )
    settler = StartupCpuSettler(client.CoreV1Api(as_driver), namespace, APP, executor_cores=1)

    assert settler.settle(["1"]) == ["exec-1"]
    assert cpu_limit(admin, "exec-1", namespace) == "1"
    assert cpu_limit(admin, "exec-2", namespace) == "2"  # not registered yet
    assert cpu_limit(admin, "other-app-1", namespace) == "2"  # another driver's executor

    with caplog.at_level(logging.WARNING, logger="floe.driver"):
        assert settler.settle(["1", "2", "3", "4"]) == ["exec-2"]
    assert cpu_limit(admin, "exec-2", namespace) == "1"
    assert cpu_limit(admin, "exec-3", namespace) == "2"
    assert (
        "executor pod exec-3 keeps its startup CPU limit 2: resizing it to 1 was refused (422" in caplog.text
    )

    # Settled, refused or without a pod: none is tried again.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="floe.driver"):
        assert settler.settle(["1", "2", "3", "4"]) == []
    assert caplog.text == ""


def test_only_a_startup_limit_above_the_cores_is_settled() -> None:
    assert startup_limit_above({"spark.kubernetes.executor.limit.cores": "2"}, 1)
    assert startup_limit_above({"spark.kubernetes.executor.limit.cores": "1500m"}, 1)
    assert not startup_limit_above({"spark.kubernetes.executor.limit.cores": "1"}, 1)
    assert not startup_limit_above({}, 1)
