"""From a resource's pydantic model to the structural OpenAPI v3 schema of its CRD.

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
"""

from __future__ import annotations

import copy
import types
import typing
import warnings
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import PydanticJsonSchemaWarning

from floe.api.crd_rules import EXTRA_SCHEMA, INHERITED, NOT_NULLABLE, RULES, cel_string
from floe.api.group import OptimizerGroup
from floe.api.meta import ObjectMeta
from floe.api.models import OptimizedTable
from floe.api.table_set import OptimizedTableSet

ResourceModel = type[OptimizerGroup] | type[OptimizedTable] | type[OptimizedTableSet]

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
        checks.append(f"k.matches({cel_string(names['pattern'])})")
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
