"""The Kubernetes-only parts of floe's CRD schemas, by kind and path: the CEL rules, the settings
a table inherits (which carry no defaults), the schema additions and the fields never nullable.

CEL rules (``x-kubernetes-validations``)
----------------------------------------
Kubernetes-only checks of things pydantic does not (or cannot) see; each is listed in :data:`RULES`
with the reason it truly holds. The CEL parsers :func:`cel_seconds` and :func:`cel_bytes` read
durations and quantities exactly as ``units.parse_duration``/``parse_quantity`` do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic.alias_generators import to_camel

from floe.api.group import MANUAL_OR_AUTOSCALED, STARTUP_CPU_ABOVE_CORES, STARTUP_CPU_NEEDS_BURSTABLE
from floe.api.meta import SPARK_MIN_EXECUTOR_MEMORY
from floe.api.table import MIN_ORPHAN_AGE_S, SET_OWN_FIELDS, OptimizedTableSpec
from floe.api.units import _DURATION_FACTORS, _DURATION_PART, _QUANTITY_FACTORS

_NUMBER_PREFIX = r"^[0-9]+(\.[0-9]+)?"


def cel_string(text: str) -> str:
    """``text`` as a single-quoted CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _suffix_chain(expr: str, factors: Mapping[str, float]) -> str:
    # Longest suffix first, so that "ms" is not read as "s" (nor "Mi" as "i").
    chain = "".join(
        f"{expr}.endsWith({cel_string(suffix)}) ? {float(factor)!r} : "
        for suffix, factor in sorted(factors.items(), key=lambda item: -len(item[0]))
    )
    return f"({chain}1.0)"


def cel_seconds(expr: str) -> str:
    """CEL for the seconds (a double) of the duration string ``expr``, as ``units.parse_duration``.

    ``-1`` is -1.0; otherwise the sum of the number x unit parts (``1h30m`` is 5400.0).
    """
    part = cel_string(_DURATION_PART.pattern)
    factor = _suffix_chain("p", _DURATION_FACTORS)
    return (
        f"({expr} == '-1' ? -1.0 : {expr}.findAll({part})"
        f".map(p, double(p.find({cel_string(_NUMBER_PREFIX)})) * {factor}).sum())"
    )


def cel_bytes(expr: str) -> str:
    """CEL for the bytes (a double) of the int-or-string quantity ``expr``, as ``units.parse_quantity``.

    parse_quantity truncates to whole bytes, so compare the result with whole numbers only
    (``x >= N`` is then the same test as ``int(x) >= N``).
    """
    factors = {unit: factor for unit, factor in _QUANTITY_FACTORS.items() if unit is not None}
    return (
        f"(type({expr}) == int ? double({expr}) : "
        f"double({expr}.find({cel_string(_NUMBER_PREFIX)})) * {_suffix_chain(expr, factors)})"
    )


def cel_cores(expr: str) -> str:
    """CEL for the cores (a double) of the CPU quantity string ``expr`` (``250m`` or ``2``), as
    ``units.cpu_cores``."""
    return (
        f"({expr}.endsWith('m') ? double({expr}.substring(0, {expr}.size() - 1)) / 1000.0 : double({expr}))"
    )


@dataclass(frozen=True)
class Rule:
    """One ``x-kubernetes-validations`` entry, on the schema at ``path`` (property names from the root)."""

    path: tuple[str, ...]
    rule: str
    message: str
    why: str
    message_expression: str | None = None
    field_path: str | None = None

    def render(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.message_expression is not None:
            out["messageExpression"] = self.message_expression
        if self.field_path is not None:
            out["fieldPath"] = self.field_path
        return out


def _positive_duration(name: str, why: str, parent: tuple[str, ...] = ("spec",)) -> Rule:
    # Below spec.maintenance the job's name says which of the several intervals is wrong.
    shown = ".".join((*parent[2:], name))
    return Rule(
        path=(*parent, name),
        rule=f"{cel_seconds('self')} > 0.0",
        message=f"{shown} must be greater than 0 (-1 does not turn it off)",
        message_expression=f"'{shown} must be greater than 0 (-1 does not turn it off), got ' + self",
        why=why,
    )


#: The CEL rules of each kind, and why each one holds.
RULES: dict[str, tuple[Rule, ...]] = {
    "OptimizerGroup": (
        _positive_duration(
            "heartbeatTimeout",
            "the optimizer keeper drops an optimizer silent for longer than heartbeatTimeout: 0 or -1 would "
            "drop every optimizer at every pass, so no task would ever finish",
        ),
        _positive_duration(
            "ackTimeout",
            "a task scheduled but not acked within ackTimeout goes back to PLANNED: 0 or -1 would take back "
            "every task before its optimizer can ack it",
        ),
        _positive_duration(
            "executeTimeout",
            "an acked task not completed within executeTimeout goes back to PLANNED: 0 or -1 would take "
            "back every task as soon as it starts",
        ),
        Rule(
            path=("spec",),
            rule=(
                "!has(self.ackTimeout) || !has(self.executeTimeout) || "
                f"{cel_seconds('self.ackTimeout')} < {cel_seconds('self.executeTimeout')}"
            ),
            message="ackTimeout must be shorter than executeTimeout",
            message_expression=(
                "'ackTimeout (' + self.ackTimeout + ') must be shorter than executeTimeout ('"
                " + self.executeTimeout + ')'"
            ),
            field_path=".ackTimeout",
            why="the ack is the handshake right after a poll, the execution is the whole rewrite after it: "
            "an ack deadline at least as long as the execution deadline is a swapped or mistyped pair",
        ),
        Rule(
            path=("spec",),
            rule="!has(self.executors) || !has(self.autoscaling)",
            message=MANUAL_OR_AUTOSCALED,
            field_path=".autoscaling",
            why="spec.executors is a fixed count (what kubectl scale and an HPA write) and autoscaling sizes "
            "the executors itself: with both, one would undo the other's every change",
        ),
        Rule(
            path=("spec",),
            rule=(
                "!has(self.executorStartupCpuLimit) || "
                f"{cel_cores('self.executorStartupCpuLimit')} > double(self.executorCores)"
            ),
            message=STARTUP_CPU_ABOVE_CORES,
            field_path=".executorStartupCpuLimit",
            why="the pod is resized down to executorCores once its executor registers: a startup limit at or "
            "below it gives the start no more CPU than the task gets",
        ),
        Rule(
            path=("spec",),
            rule=(
                "!has(self.executorStartupCpuLimit) || (has(self.executorCpuRequest) && "
                f"{cel_cores('self.executorCpuRequest')} < double(self.executorCores))"
            ),
            message=STARTUP_CPU_NEEDS_BURSTABLE,
            field_path=".executorCpuRequest",
            why="a pod whose CPU request equals its limit (and whose memory request equals its limit, as "
            "Spark sets them) is Guaranteed: started with a higher CPU limit it is Burstable, and the "
            "API server refuses a resize that would change its QoS class",
        ),
        Rule(
            path=("spec", "autoscaling"),
            rule="self.minExecutors <= self.maxExecutors",
            # No messageExpression: the API server's cost estimate of string(int) is unbounded.
            message="autoscaling.minExecutors must not exceed autoscaling.maxExecutors",
            field_path=".minExecutors",
            why="the executors are kept between the two: a minimum above the maximum leaves no count to keep",
        ),
        Rule(
            path=("spec", "autoscaling", "scaleDownDelay"),
            rule=f"{cel_seconds('self')} >= 0.0",
            message="autoscaling.scaleDownDelay must not be negative",
            message_expression="'autoscaling.scaleDownDelay must not be negative, got ' + self",
            why="the delay is how long demand must stay low before executors go; a negative one has no "
            "meaning (0 scales down at once)",
        ),
        Rule(
            path=("spec", "executorMemory"),
            rule=f"{cel_bytes('self')} >= {float(SPARK_MIN_EXECUTOR_MEMORY)!r}",
            message="executorMemory must be at least 450Mi",
            message_expression=(
                "'executorMemory must be at least 450Mi (Spark refuses smaller executors), got '"
                " + string(self)"
            ),
            why="Spark refuses to start an executor with less than 450 MiB (1.5 x its 300 MiB reserved "
            "memory) of heap, and the heap is only part of the pod's memory limit",
        ),
    ),
    "OptimizedTable": (
        Rule(
            path=("spec", "targetSize"),
            rule=f"{cel_bytes('self')} >= 1.0",
            message="targetSize must be greater than 0",
            message_expression="'targetSize must be greater than 0, got ' + string(self)",
            why="the same check as the model's validator: files cannot be written at a target of 0 bytes, "
            "and fragment/undersized thresholds are fractions of it",
        ),
        Rule(
            path=("spec", "maintenance", "orphanFiles", "olderThan"),
            rule=f"{cel_seconds('self')} >= {MIN_ORPHAN_AGE_S!r}",
            message="orphanFiles.olderThan must be at least 1h",
            message_expression=(
                "'orphanFiles.olderThan must be at least 1h (younger files may still be being written), got '"
                " + self"
            ),
            why="a file a writer or an optimizing task is still writing is referenced by no metadata yet: "
            "only an age well beyond any write keeps cleanup from deleting it",
        ),
        Rule(
            path=("spec", "maintenance", "manifests", "targetManifestSize"),
            rule=f"{cel_bytes('self')} >= 1.0",
            message="manifests.targetManifestSize must be greater than 0",
            message_expression="'manifests.targetManifestSize must be greater than 0, got ' + string(self)",
            why="every manifest would be small against a target of 0 bytes, and none could be written at it",
        ),
        *(
            _positive_duration(
                name,
                f"{'.'.join(parent[2:])}.{name} is a period or an age: 0 or -1 would run the job "
                "continuously or treat every row or snapshot as expired",
                parent,
            )
            for parent, name in (
                (("spec", "maintenance", "snapshotRetention"), "maxAge"),
                (("spec", "maintenance", "snapshotRetention"), "interval"),
                (("spec", "maintenance", "orphanFiles"), "interval"),
                (("spec", "maintenance", "manifests"), "interval"),
                (("spec", "maintenance", "danglingDeletes"), "interval"),
                (("spec", "maintenance", "dataRetention"), "olderThan"),
                (("spec", "maintenance", "dataRetention"), "interval"),
            )
        ),
        *(
            Rule(
                path=("spec", "refresh", name),
                rule=f"{cel_seconds('self')} > 0.0",
                message=f"refresh.{name} must be greater than 0",
                message_expression=f"'refresh.{name} must be greater than 0, got ' + self",
                why="the table's catalog is asked again after this long: 0 or -1 would ask it continuously",
            )
            for name in ("minInterval", "maxInterval")
        ),
    ),
}

#: An OptimizedTableSet's template holds OptimizedTable settings: the same rules hold there.
RULES["OptimizedTableSet"] = (
    *(
        replace(rule, path=("spec", "template", *rule.path[1:]))
        for rule in RULES["OptimizedTable"]
        if rule.path[:1] == ("spec",) and len(rule.path) > 1
    ),
    _positive_duration(
        "listInterval",
        "the catalog is listed again every listInterval: 0 or -1 would list it continuously",
    ),
)

#: An OptimizerGroup's tableDefaults hold OptimizedTable settings too.
RULES["OptimizerGroup"] = (
    *RULES["OptimizerGroup"],
    *(
        replace(rule, path=("spec", "tableDefaults", *rule.path[1:]))
        for rule in RULES["OptimizedTable"]
        if rule.path[:1] == ("spec",) and len(rule.path) > 1
    ),
)

#: Settings a table inherits (`floe.api.inheritance`), by kind: no defaults there, so that what a
#: manifest leaves unset stays unset, and a closer level's silence lets a farther one's value through.
INHERITED: dict[str, tuple[tuple[str, ...], ...]] = {
    "OptimizerGroup": (("spec", "tableDefaults"),),
    "OptimizedTable": tuple(
        ("spec", info.alias or to_camel(name))
        for name, info in OptimizedTableSpec.model_fields.items()
        if name not in SET_OWN_FIELDS
    ),
    "OptimizedTableSet": (("spec", "template"),),
}

#: Kubernetes-only schema additions, by kind and path.
EXTRA_SCHEMA: dict[str, tuple[tuple[tuple[str, ...], dict[str, Any]], ...]] = {
    "OptimizerGroup": (
        (("status", "conditions"), {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}),
    ),
    "OptimizedTable": (
        (("status", "conditions"), {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}),
    ),
    "OptimizedTableSet": (
        (("status", "conditions"), {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}),
    ),
}

#: Optional fields that must not be ``nullable``, by kind: the API server then prunes a ``null``
#: there as absent instead of storing it. The scale subresource reads ``spec.executors`` as an
#: integer and fails on a stored ``null``.
NOT_NULLABLE: dict[str, tuple[tuple[str, ...], ...]] = {
    "OptimizerGroup": (("spec", "executors"),),
    "OptimizedTable": (),
    "OptimizedTableSet": (),
}
