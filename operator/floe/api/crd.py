"""The CustomResourceDefinitions of ``floe.dev/v1alpha1``, generated from the pydantic models.

``python -m floe.api.crd crds/`` writes ``crds/optimizergroups.floe.dev.yaml`` and
``crds/optimizedtables.floe.dev.yaml``; with ``--check`` it only compares and exits 1 on drift.
``tests/test_crd_generation.py`` fails when the committed files differ from what this module makes.

From pydantic's JSON schema to a structural OpenAPI v3 schema
-------------------------------------------------------------
* Every ``$ref`` is inlined; keys beside the ``$ref`` (``description``, ``default``) win.
* ``X | None`` (pydantic's ``anyOf: [X, {type: null}]``) becomes X with ``nullable: true``; a ``null``
  default is dropped.
* JSON Schema 2020's ``exclusiveMinimum: N`` becomes OpenAPI 3.0's ``minimum: N`` with
  ``exclusiveMinimum: true`` (``exclusiveMaximum`` alike); ``const`` becomes a one-value ``enum``.
* ``title`` and ``additionalProperties: false`` are dropped: the API server prunes unknown fields, and
  ``kubectl apply`` (strict field validation, the default) rejects them by name.
* ``metadata`` is left to the API server (``type: object``), except that ``metadata.name`` carries the
  model's bounds where they are tighter than the API server's own (an OptimizerGroup's name goes into
  Service names); ``apiVersion``/``kind`` are plain strings.
* A map whose keys are bounded (pydantic's ``propertyNames``/``patternProperties``) becomes an
  ``additionalProperties`` map with a CEL rule on its keys, since a structural schema has neither.
* Only the Kubernetes objects passed through to pods (tolerations, affinity) are free-form
  (``x-kubernetes-preserve-unknown-fields``), bounded in size only: the pod API validates them.
* Defaults are the serialised forms (``128Mi``, ``1h``): the schema is generated in pydantic's
  serialization mode, which differs from validation mode in nothing but that (a test holds this).
  A nested model whose pydantic default comes from a factory (``spec.minor``, an OptimizerGroup's
  ``spec``, ...) defaults to ``{}`` (the fields its factory's value changes, if any), so that the API
  server fills in the nested defaults too: what ``kubectl get -o yaml`` shows is what floe uses, and
  the printer columns and CEL rules always see a value. ``status`` carries no defaults: the
  controller writes it. Nor do the settings a table inherits (`INHERITED`: an OptimizedTable's
  settings, a set's template, a group's ``tableDefaults``): unset there means inherited, and
  the table's ``status.effectiveSpec`` shows what floe uses.

Quantities and durations
------------------------
A structural schema may not put ``type`` (or a ``pattern`` beside it) inside an ``anyOf`` branch,
except for the exact int-or-string form ``anyOf: [{type: integer}, {type: string}]``. So a quantity
(``units.Quantity``, ``128Mi`` or a number of bytes) becomes::

    x-kubernetes-int-or-string: true
    anyOf: [{type: integer}, {type: string}]
    pattern: ^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|k|K|M|G|T)?$   # OpenAPI checks it on strings only
    maxLength: 64
    minimum: 0                                            # ... and this on integers only

i.e. the branch validations are hoisted beside the int-or-string marker, where each applies only to
values of its own type (checked against kube-apiserver v1.33 in ``tests/k8s/test_crds.py``), and a CEL
rule refuses a float such as ``2.0``, which the type check alone would take (see `_INT_OR_STRING_RULE`). A
duration (``units.Duration``: ``1h30m``, ``250ms``, ``-1`` for off) is a ``type: string`` with its
pattern. Both have a ``maxLength`` (64, far beyond any real value), which the parsers in
``units`` enforce too, so that the CEL rules that parse them stay within the API server's cost budget.

CEL rules (``x-kubernetes-validations``)
----------------------------------------
Kubernetes-only checks of things pydantic does not (or cannot) see; each is listed in :data:`RULES`
with the reason it truly holds. The CEL parsers :func:`cel_seconds` and :func:`cel_bytes` read
durations and quantities exactly as ``units.parse_duration``/``parse_quantity`` do.
"""

from __future__ import annotations

import argparse
import copy
import sys
import types
import typing
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from pydantic.json_schema import PydanticJsonSchemaWarning

from floe.api.group import (
    MANUAL_OR_AUTOSCALED,
    STARTUP_CPU_ABOVE_CORES,
    STARTUP_CPU_NEEDS_BURSTABLE,
    OptimizerGroup,
)
from floe.api.meta import SPARK_MIN_EXECUTOR_MEMORY, ObjectMeta
from floe.api.models import API_GROUP, GROUP_PLURAL, TABLE_PLURAL, TABLE_SET_PLURAL, VERSION, OptimizedTable
from floe.api.table import MIN_ORPHAN_AGE_S, SET_OWN_FIELDS, OptimizedTableSpec
from floe.api.table_set import OptimizedTableSet
from floe.api.units import _DURATION_FACTORS, _DURATION_PART, _QUANTITY_FACTORS

ResourceModel = type[OptimizerGroup] | type[OptimizedTable] | type[OptimizedTableSet]
CATEGORY = "floe"

HEADER = (
    "# Generated from operator/floe/api/models.py by `python -m floe.api.crd crds/`. Do not edit:\n"
    "# change the models (or operator/floe/api/crd.py) and regenerate.\n"
)

#: The schema's type check takes an integral float (2.0) for an integer, even in an int-or-string, but
#: a CEL rule sees a double and fails on it: without this rule a quantity with no CEL rule of its own
#: would take 2.0 and the others would not. kubectl sends 2.0 as 2, so only clients that send JSON
#: floats as they are meet it; pydantic, reading manifests as kubectl does, takes 2.0 as 2 bytes.
_INT_OR_STRING_RULE = {
    "rule": "type(self) == int || type(self) == string",
    "message": "must be a whole number of bytes or a quantity such as 128Mi",
}
_NUMBER_PREFIX = r"^[0-9]+(\.[0-9]+)?"
_NUMERIC_KEYWORDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
_STRING_KEYWORDS = {"pattern", "minLength", "maxLength", "format"}
_KEY_ORDER = (
    "description",
    "type",
    "format",
    "nullable",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "x-kubernetes-int-or-string",
    "anyOf",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
)


# --------------------------------------------------------------------------------------------------
# CEL helpers


def _cel_string(text: str) -> str:
    """``text`` as a single-quoted CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _suffix_chain(expr: str, factors: Mapping[str, float]) -> str:
    # Longest suffix first, so that "ms" is not read as "s" (nor "Mi" as "i").
    chain = "".join(
        f"{expr}.endsWith({_cel_string(suffix)}) ? {float(factor)!r} : "
        for suffix, factor in sorted(factors.items(), key=lambda item: -len(item[0]))
    )
    return f"({chain}1.0)"


def cel_seconds(expr: str) -> str:
    """CEL for the seconds (a double) of the duration string ``expr``, as ``units.parse_duration``.

    ``-1`` is -1.0; otherwise the sum of the number x unit parts (``1h30m`` is 5400.0).
    """
    part = _cel_string(_DURATION_PART.pattern)
    factor = _suffix_chain("p", _DURATION_FACTORS)
    return (
        f"({expr} == '-1' ? -1.0 : {expr}.findAll({part})"
        f".map(p, double(p.find({_cel_string(_NUMBER_PREFIX)})) * {factor}).sum())"
    )


def cel_bytes(expr: str) -> str:
    """CEL for the bytes (a double) of the int-or-string quantity ``expr``, as ``units.parse_quantity``.

    parse_quantity truncates to whole bytes, so compare the result with whole numbers only
    (``x >= N`` is then the same test as ``int(x) >= N``).
    """
    factors = {unit: factor for unit, factor in _QUANTITY_FACTORS.items() if unit is not None}
    return (
        f"(type({expr}) == int ? double({expr}) : "
        f"double({expr}.find({_cel_string(_NUMBER_PREFIX)})) * {_suffix_chain(expr, factors)})"
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


# --------------------------------------------------------------------------------------------------
# Schema conversion


def _flatten(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Resolves a top-level ``$ref`` and ``X | None`` until neither is left."""
    node = dict(node)
    while True:
        ref = node.pop("$ref", None)
        if ref is not None:
            node = {**defs[ref.removeprefix("#/$defs/")], **node}
            continue
        branches = node.get("anyOf")
        if branches is not None and {"type": "null"} in branches:
            rest = [b for b in branches if b != {"type": "null"}]
            if len(rest) != 1:
                raise ValueError(f"cannot express a union of {len(rest)} types and null: {branches}")
            del node["anyOf"]
            node = {**rest[0], **node, "nullable": True}
            if "default" in node and node["default"] is None:
                del node["default"]
            continue
        return node


def _hoist_int_or_string(node: dict[str, Any]) -> None:
    """Moves the validations of int-or-string branches beside the marker, where each only sees its type."""
    allowed = {"integer": _NUMERIC_KEYWORDS, "string": _STRING_KEYWORDS}
    for branch in node.pop("anyOf", []):
        kind = branch.get("type")
        if kind not in allowed:
            raise ValueError(f"int-or-string branch must be integer or string: {branch}")
        for key, value in branch.items():
            if key == "type":
                continue
            if key not in allowed[kind] or node.get(key, value) != value:
                raise ValueError(f"cannot hoist {key!r} of the {kind} branch of an int-or-string: {branch}")
            node[key] = value
    node["anyOf"] = [{"type": "integer"}, {"type": "string"}]


def _structural(raw: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _flatten(raw, defs)
    node.pop("title", None)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound in ("Minimum", "Maximum"):
        exclusive = node.get(f"exclusive{bound}")
        if isinstance(exclusive, int | float) and not isinstance(exclusive, bool):
            node[bound.lower()] = exclusive
            node[f"exclusive{bound}"] = True
    additional = node.get("additionalProperties")
    if additional is False:
        del node["additionalProperties"]
    elif additional is True:
        raise ValueError("free-form objects need an explicit x-kubernetes-preserve-unknown-fields")
    elif isinstance(additional, dict):
        node["additionalProperties"] = _structural(additional, defs)
    _key_rule(node, defs)
    if "properties" in node:
        node["properties"] = {name: _structural(sub, defs) for name, sub in node["properties"].items()}
    if "items" in node:
        node["items"] = _structural(node["items"], defs)
    if node.get("x-kubernetes-int-or-string"):
        _hoist_int_or_string(node)
        node.setdefault("x-kubernetes-validations", []).append(dict(_INT_OR_STRING_RULE))
    elif "anyOf" in node:
        raise ValueError(f"a structural schema cannot hold this union: {node['anyOf']}")
    return node


def _key_rule(node: dict[str, Any], defs: dict[str, Any]) -> None:
    """A map with bounded keys: its values become ``additionalProperties``, its key bounds a CEL rule.

    pydantic writes a key pattern as ``patternProperties: {PATTERN: value schema}`` and a key length
    as ``propertyNames: {maxLength: N}``; a structural schema allows neither.
    """
    names = dict(node.pop("propertyNames", {}))
    by_pattern = node.pop("patternProperties", None)
    if by_pattern is not None:
        if len(by_pattern) != 1 or "additionalProperties" in node:
            raise ValueError(f"cannot express these map keys: {by_pattern}")
        ((pattern, values),) = by_pattern.items()
        names["pattern"] = pattern
        node["additionalProperties"] = _structural(values, defs)
    if not names:
        return
    unknown = set(names) - {"maxLength", "pattern"}
    if unknown:
        raise ValueError(f"cannot express these key bounds in CEL: {sorted(unknown)}")
    checks, said = [], []
    if "maxLength" in names:
        checks.append(f"k.size() <= {names['maxLength']}")
        said.append(f"be at most {names['maxLength']} characters long")
    if "pattern" in names:
        checks.append(f"k.matches({_cel_string(names['pattern'])})")
        said.append(f"match {names['pattern']}")
    node.setdefault("x-kubernetes-validations", []).append(
        {"rule": f"self.all(k, {' && '.join(checks)})", "message": f"keys must {' and '.join(said)}"}
    )


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model behind ``annotation`` (``M`` or ``M | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [m for m in map(_model_of, typing.get_args(annotation)) if m is not None]
        return models[0] if len(models) == 1 else None
    return None


def _factory_defaults(model: type[BaseModel], node: dict[str, Any]) -> None:
    """``default: {}`` (or the fields the factory changes) for nested models built by a default factory."""
    for name, info in model.model_fields.items():
        nested = _model_of(info.annotation)
        if nested is None:
            continue
        sub = node["properties"][info.alias or name]
        if info.default_factory is not None and "default" not in sub:
            value = info.get_default(call_default_factory=True)
            sub["default"] = value.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        _factory_defaults(nested, sub)


def _strip_defaults(node: Any) -> None:
    if isinstance(node, dict):
        node.pop("default", None)
        for value in node.values():
            _strip_defaults(value)
    elif isinstance(node, list):
        for value in node:
            _strip_defaults(value)


def _ordered(node: Any) -> Any:
    """Schema keys in a stable, readable order (description and type first, nested schemas last)."""
    if isinstance(node, list):
        return [_ordered(value) for value in node]
    if not isinstance(node, dict):
        return node
    rank = {key: index for index, key in enumerate(_KEY_ORDER)}
    keys = sorted(node, key=lambda key: rank.get(key, len(rank)))
    out: dict[str, Any] = {}
    for key in keys:
        value = node[key]
        if key == "properties":
            out[key] = {name: _ordered(sub) for name, sub in value.items()}
        elif key in ("default", "enum", "x-kubernetes-validations", "x-kubernetes-list-map-keys"):
            out[key] = value
        else:
            out[key] = _ordered(value)
    return out


def _at(schema: dict[str, Any], path: Sequence[str], kind: str) -> dict[str, Any]:
    node = schema
    for name in path:
        try:
            node = node["properties"][name]
        except KeyError:
            raise KeyError(
                f"{kind}: no field {'.'.join(path)} in the schema (renamed in models.py?)"
            ) from None
    return node


def _metadata_schema(model: ResourceModel) -> dict[str, Any]:
    """The API server's own ObjectMeta, with the model's tighter bounds on ``name`` if it has any."""
    meta = model.model_fields["metadata"].annotation
    assert isinstance(meta, type) and issubclass(meta, ObjectMeta)
    if meta.model_fields["name"] == ObjectMeta.model_fields["name"]:
        return {"type": "object"}
    name = meta.model_json_schema(by_alias=True)["properties"]["name"]
    bounds = {key: name[key] for key in ("description", "maxLength", "pattern") if key in name}
    return {"type": "object", "properties": {"name": {"type": "string", **bounds}}}


def openapi_schema(model: ResourceModel, description: str) -> dict[str, Any]:
    """The structural ``openAPIV3Schema`` of one kind, with its CEL rules and Kubernetes-only additions."""
    kind = model.__name__
    with warnings.catch_warnings():
        # An OptimizedTableSet's template fields default to None, which quantity and duration
        # serializers cannot render: pydantic leaves those defaults out, as the CRD must.
        warnings.filterwarnings("ignore", category=PydanticJsonSchemaWarning)
        raw = model.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.pop("$defs", {})
    raw["properties"]["metadata"] = _metadata_schema(model)
    schema = _structural(raw, defs)
    _factory_defaults(model, schema)
    properties = schema["properties"]
    _strip_defaults(properties["status"])
    for path in INHERITED[kind]:
        _strip_defaults(_at(schema, path, kind))
    schema["description"] = description
    properties["apiVersion"] = {
        "description": "APIVersion defines the versioned schema of this representation of an object.",
        "type": "string",
    }
    properties["kind"] = {
        "description": "Kind is a string value representing the REST resource.",
        "type": "string",
    }
    required = [name for name in schema.get("required", []) if name not in ("apiVersion", "kind", "metadata")]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)
    for path, extra in EXTRA_SCHEMA[kind]:
        _at(schema, path, kind).update(copy.deepcopy(extra))
    for path in NOT_NULLABLE[kind]:
        _at(schema, path, kind).pop("nullable", None)
    for rule in RULES[kind]:
        _at(schema, rule.path, kind).setdefault("x-kubernetes-validations", []).append(rule.render())
    ordered: dict[str, Any] = _ordered(schema)
    return ordered


# --------------------------------------------------------------------------------------------------
# The two CRDs


@dataclass(frozen=True)
class Column:
    """One ``additionalPrinterColumns`` entry."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            out["priority"] = self.priority
        return out


_AGE = Column("Age", "date", ".metadata.creationTimestamp", "time since the resource was created")


@dataclass(frozen=True)
class KindSpec:
    """Names, columns and subresources of one kind."""

    model: ResourceModel
    plural: str
    short_name: str
    description: str
    columns: tuple[Column, ...]
    scale: dict[str, str] | None = None
    extra_names: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.model.__name__

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{API_GROUP}"

    @property
    def file_name(self) -> str:
        return f"{self.crd_name}.yaml"


KIND_SPECS: tuple[KindSpec, ...] = (
    KindSpec(
        model=OptimizerGroup,
        plural=GROUP_PLURAL,
        short_name="og",
        description="OptimizerGroup is a pool of Spark executors and the scheduling policy that shares its "
        "task threads between the OptimizedTables of the group.",
        columns=(
            Column("Policy", "string", ".spec.policy", "how the group picks the next table to plan"),
            Column("Desired", "integer", ".status.desiredExecutors", "executor pods wanted now"),
            Column("Ready", "integer", ".status.readyExecutors", "executor pods ready"),
            Column("Threads", "integer", ".status.threads", "optimizer threads registered"),
            Column("Tables", "integer", ".status.tables", "OptimizedTables served by the group"),
            Column("Running Tasks", "integer", ".status.runningTasks", "tasks running now"),
            _AGE,
        ),
        scale={
            "specReplicasPath": ".spec.executors",
            "statusReplicasPath": ".status.readyExecutors",
            "labelSelectorPath": ".status.selector",
        },
    ),
    KindSpec(
        model=OptimizedTable,
        plural=TABLE_PLURAL,
        short_name="ot",
        description="OptimizedTable is one Apache Iceberg table that floe keeps compacted: the "
        "OptimizerGroup serving it, its quota and its self-optimizing thresholds.",
        columns=(
            Column("Group", "string", ".spec.group", "the OptimizerGroup serving the table"),
            Column("Table", "string", ".spec.table", "catalog identifier, namespace.table"),
            Column("State", "string", ".status.state", "optimizing state of the table"),
            Column(
                "Quota",
                "number",
                ".status.effectiveSpec.quota",
                "CPU share in threads (<= 1: fraction of the group), its own or inherited",
            ),
            Column("Occupation", "number", ".status.quotaOccupation", "quota used over the last hour"),
            Column("Data Files", "integer", ".status.dataFiles", "live data files"),
            Column("Delete Files", "integer", ".status.deleteFiles", "live delete files"),
            Column("Last Optimized", "date", ".status.lastOptimized", "end of the latest optimizing"),
            _AGE,
        ),
    ),
    KindSpec(
        model=OptimizedTableSet,
        plural=TABLE_SET_PLURAL,
        short_name="ots",
        description="OptimizedTableSet keeps every table of a catalog that matches its patterns "
        "optimized: the operator lists the catalog and makes one OptimizedTable per selected table "
        "from the set's template.",
        columns=(
            Column("Group", "string", ".spec.group", "the OptimizerGroup serving the tables"),
            Column("Catalog", "string", ".spec.catalog.name", "the catalog listed"),
            Column("Matched", "integer", ".status.matchedTables", "catalog tables the patterns select"),
            Column("Managed", "integer", ".status.managedTables", "OptimizedTables the set owns"),
            Column(
                "Claimed", "integer", ".status.claimedTables", "selected tables other OptimizedTables serve"
            ),
            Column("Last Listed", "date", ".status.lastListed", "the set's latest listing of its catalog"),
            _AGE,
        ),
    ),
)


def crd(spec: KindSpec) -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of one kind."""
    subresources: dict[str, Any] = {"status": {}}
    if spec.scale is not None:
        subresources["scale"] = dict(spec.scale)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": spec.crd_name, "labels": {"app.kubernetes.io/part-of": "floe"}},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": spec.kind,
                "listKind": f"{spec.kind}List",
                "plural": spec.plural,
                "singular": spec.kind.lower(),
                "shortNames": [spec.short_name],
                "categories": [CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": [column.render() for column in spec.columns],
                    "schema": {"openAPIV3Schema": openapi_schema(spec.model, spec.description)},
                }
            ],
        },
    }


def crds() -> dict[str, dict[str, Any]]:
    """Every CRD, by the name of its file in ``crds/``."""
    return {spec.file_name: crd(spec) for spec in KIND_SPECS}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (class docstrings) as ``|`` blocks; nothing else wrapped."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_str)


def render(document: dict[str, Any]) -> str:
    """The YAML text of a generated file, header included."""
    body = yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=10_000, allow_unicode=True)
    return HEADER + body


def write_crds(directory: Path) -> list[Path]:
    """Writes every CRD into ``directory``; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, document in crds().items():
        path = directory / name
        path.write_text(render(document))
        written.append(path)
    return written


def stale_files(directory: Path) -> list[str]:
    """Names of the CRD files in ``directory`` that are missing or differ from freshly generated ones."""
    return [
        name
        for name, document in crds().items()
        if not (directory / name).is_file() or (directory / name).read_text() != render(document)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m floe.api.crd", description="Generate floe's CRDs from the pydantic models."
    )
    parser.add_argument("directory", type=Path, help="where to write the CRD YAML files, e.g. crds/")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the files drift")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.directory)
        for name in stale:
            print(f"{args.directory / name} is out of date", file=sys.stderr)
        if stale:
            print(f"regenerate with: python -m floe.api.crd {args.directory}", file=sys.stderr)
        return 1 if stale else 0
    for path in write_crds(args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
