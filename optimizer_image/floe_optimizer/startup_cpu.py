"""Executor pods that start with more CPU than they run with (``executorStartupCpuLimit``).

A waking executor's start, its JVM and its Python daemon, is bound by the pod's CPU limit: with
one core it takes about a second longer than with two. The group's executor pods are created
with the startup limit, and once an executor registers with the driver its pod is resized in
place (Kubernetes 1.33's ``resize`` subresource) to ``executorCores``, the limit its tasks run
with. The request is not changed, so scheduling is not either.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from kubernetes.client.exceptions import ApiException

from floe.api.units import cpu_cores

log = logging.getLogger("floe.driver")

STARTUP_LIMIT_PROPERTY = "spark.kubernetes.executor.limit.cores"
"""Where the operator puts the startup limit: Spark creates every executor pod with it."""
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
"""Containers merge by name: a JSON merge patch would replace the whole list."""


def startup_limit_above(properties: dict[str, str], executor_cores: int) -> bool:
    """Whether the group's executor pods start with a CPU limit above their ``executor_cores``."""
    limit = properties.get(STARTUP_LIMIT_PROPERTY)
    return limit is not None and cpu_cores(limit) > executor_cores


class StartupCpuSettler:
    """Resizes each registered executor's pod to ``executor_cores`` CPUs, once.

    `settle` is called with the executors registered now; it lists the application's executor
    pods only while one of them is not settled yet. A resize the API server refuses (a cluster
    before 1.33, or a driver Role without ``pods/resize``) is logged once per pod and not tried
    again: the executor runs on, with its startup limit.
    """

    def __init__(self, core: Any, namespace: str, app_id: str, executor_cores: int) -> None:
        self._core = core
        self._namespace = namespace
        self._selector = f"spark-app-selector={app_id},spark-role=executor"
        self._limit = str(executor_cores)
        self._settled: set[str] = set()

    def settle(self, registered: Iterable[str]) -> list[str]:
        """Resize the pods of the `registered` executors not settled yet; the pods resized."""
        pending = set(registered) - self._settled
        if not pending:
            return []
        resized = []
        pods = self._core.list_namespaced_pod(self._namespace, label_selector=self._selector).items
        for pod in pods:
            executor = (pod.metadata.labels or {}).get("spark-exec-id")
            if executor not in pending or pod.metadata.deletion_timestamp is not None:
                continue
            container = next((c for c in pod.spec.containers if "cpu" in (c.resources.limits or {})), None)
            if container is None or container.resources.limits["cpu"] == self._limit:
                continue
            patch = {
                "spec": {
                    "containers": [{"name": container.name, "resources": {"limits": {"cpu": self._limit}}}]
                }
            }
            try:
                self._core.patch_namespaced_pod_resize(
                    pod.metadata.name, self._namespace, patch, _content_type=STRATEGIC_MERGE
                )
            except ApiException as e:
                if e.status == 404:
                    continue  # the pod went meanwhile
                log.warning(
                    "executor pod %s keeps its startup CPU limit %s: resizing it to %s was refused "
                    "(%s %s: %s)",
                    pod.metadata.name,
                    container.resources.limits["cpu"],
                    self._limit,
                    e.status,
                    e.reason,
                    _api_message(e.body),
                )
                continue
            resized.append(pod.metadata.name)
            log.info("executor pod %s resized to its CPU limit of %s", pod.metadata.name, self._limit)
        self._settled |= pending  # an executor without a pod listed has none any more
        return resized


def _api_message(body: Any) -> str:
    """The API server's message in an error response's body, else the body."""
    try:
        return str(json.loads(body)["message"])
    except (TypeError, ValueError, KeyError):
        return str(body)
