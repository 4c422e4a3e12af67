"""The operator benchmark's manifests: one OptimizerGroup, and the tables of a whole catalog in one
of the two shapes users apply them: one OptimizedTableSet, or one OptimizedTable per table."""

from __future__ import annotations

from typing import Any

from harness.control_plane import FAKE_NODE_TAINT

GROUP = "lake"
KWOK_TEMPLATE = {
    "tolerations": [{"key": FAKE_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"type": "kwok"},
}
"""The executor pods' template: scheduled on the control plane's kwok node, where they only pretend to run."""


SHAPES = ("set", "tables")
"""``set``: one OptimizedTableSet selecting ``db.*``; ``tables``: one OptimizedTable per table."""
TEMPLATE = {"minor": {"triggerFileCount": 2}}
"""floe's defaults but a minor trigger of 2 files, in either shape."""


def group_manifest(namespace: str) -> dict[str, Any]:
    """The OptimizerGroup, its executor pods on the kwok node."""
    return {
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


def table_set_manifests(namespace: str, properties: dict[str, str]) -> list[dict[str, Any]]:
    """The OptimizerGroup and the OptimizedTableSet selecting every table ``db.*`` of the catalog
    of ``properties``."""
    table_set = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTableSet",
        "metadata": {"name": "lake", "namespace": namespace},
        "spec": {
            "catalog": {"name": "lake", "properties": properties},
            "include": ["db.*"],
            "group": GROUP,
            "template": TEMPLATE,
        },
    }
    return [group_manifest(namespace), table_set]


def table_manifests(
    namespace: str, properties: dict[str, str], identifiers: list[str]
) -> list[dict[str, Any]]:
    """One OptimizedTable per table of `identifiers`, named as the set names its tables (the
    identifier), each with the catalog's properties inline, as a user's generated manifests have them."""
    return [
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": identifier, "namespace": namespace},
            "spec": {
                "table": identifier,
                "catalog": {"name": "lake", "properties": properties},
                "group": GROUP,
                **TEMPLATE,
            },
        }
        for identifier in identifiers
    ]
