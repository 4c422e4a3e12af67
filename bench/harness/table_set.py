"""The operator benchmark's manifests: one OptimizerGroup and one OptimizedTableSet over a whole catalog."""

from __future__ import annotations

from typing import Any

from harness.control_plane import FAKE_NODE_TAINT

GROUP = "lake"
KWOK_TEMPLATE = {
    "tolerations": [{"key": FAKE_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"type": "kwok"},
}
"""The executor pods' template: scheduled on the control plane's kwok node, where they only pretend to run."""


def table_set_manifests(namespace: str, properties: dict[str, str]) -> list[dict[str, Any]]:
    """The OptimizerGroup (its pods on the kwok node) and the OptimizedTableSet selecting every table
    ``db.*`` of the catalog of ``properties``: floe's defaults but a minor trigger of 2 files."""
    group = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizerGroup",
        "metadata": {"name": GROUP, "namespace": namespace},
        "spec": {
            "executors": 1,
            "executorCores": 2,
            "executorMemory": "2Gi",
            "executorTemplate": KWOK_TEMPLATE,
        },
    }
    table_set = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTableSet",
        "metadata": {"name": "lake", "namespace": namespace},
        "spec": {
            "catalog": {"name": "lake", "properties": properties},
            "include": ["db.*"],
            "group": GROUP,
            "template": {"minor": {"triggerFileCount": 2}},
        },
    }
    return [group, table_set]
