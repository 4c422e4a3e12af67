"""The resources of API group ``floe.dev/v1alpha1``: OptimizerGroup, OptimizedTable and
OptimizedTableSet (the OptimizedTables of every catalog table that matches its patterns).

These pydantic models are the single source of truth: embedded mode loads manifests with
them, and the CRD schemas are generated from them. Field names are Kubernetes-style
camelCase on the wire and snake_case in Python. Each kind's parts live in a module of their
own: `floe.api.meta` (bounds, shared types, metadata), `floe.api.group`, `floe.api.table`,
`floe.api.status` and `floe.api.table_set`; this module names the group, its version and
plurals, and reads a manifest document into its kind.
"""

from __future__ import annotations

from typing import Any, Literal

from floe.api.group import OptimizerGroup
from floe.api.meta import ObjectMeta, WireModel
from floe.api.status import OptimizedTableStatus
from floe.api.table import OptimizedTableSpec
from floe.api.table_set import OptimizedTableSet

API_GROUP = "floe.dev"
VERSION = "v1alpha1"
API_VERSION = f"{API_GROUP}/{VERSION}"
# The resources' plural names, as the API server's paths and kopf's handlers name them.
GROUP_PLURAL = "optimizergroups"
TABLE_PLURAL = "optimizedtables"
TABLE_SET_PLURAL = "optimizedtablesets"


class OptimizedTable(WireModel):
    """``kind: OptimizedTable``."""

    api_version: Literal["floe.dev/v1alpha1"]
    kind: Literal["OptimizedTable"]
    metadata: ObjectMeta
    spec: OptimizedTableSpec
    status: OptimizedTableStatus | None = None


Resource = OptimizerGroup | OptimizedTable | OptimizedTableSet
KINDS: dict[str, type[OptimizerGroup] | type[OptimizedTable] | type[OptimizedTableSet]] = {
    "OptimizerGroup": OptimizerGroup,
    "OptimizedTable": OptimizedTable,
    "OptimizedTableSet": OptimizedTableSet,
}


def resource_from_dict(document: dict[str, Any]) -> Resource:
    """Validate one manifest document into its model; raises ValueError naming the kind."""
    kind = document.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: expected one of {', '.join(KINDS)}")
    return KINDS[kind].model_validate(document)
