"""The manifests reference page: every field of the three kinds of ``floe.dev/v1alpha1``.

It reads the CRDs as `floe.api.crd` generates them from the pydantic models (the schema the API
server enforces, CEL rules included), so a field, bound or default the page shows is one the
API server applies. A setting a table inherits (`floe.api.crd_rules.INHERITED`) has no default in
the schema, since unset means inherited; its default is floe's own, read from
`floe.api.table.OptimizedTableSpec`.

An object whose fields are exactly a table's inheritable settings (an OptimizerGroup's
``tableDefaults``, an OptimizedTableSet's ``template``, a table's ``status.effectiveSpec``) is not
expanded again: its row points at the OptimizedTable spec.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ref_text import code, page_head, prose, schema_limits, table

from floe.api.units import DURATION_PATTERN, QUANTITY_PATTERN

Schema = dict[str, Any]

INT_OR_STRING_MESSAGE = "must be a whole number of bytes or a quantity such as 128Mi"
SETTINGS_ANCHOR = "optimizedtable-spec"
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where each kind's example on the page comes from: the first document of that kind in these.
EXAMPLES = ("examples/optimized-table.yaml", "examples/table-set.yaml")

#: Descriptions of the fields the models leave to Kubernetes' conventions, by the last part of the path.
CONVENTIONS = {
    "metadata": "standard Kubernetes object metadata (name, namespace, labels, annotations)",
    "conditions": "Kubernetes-style conditions; their types and reasons are listed in "
    "[Events and conditions](events-and-conditions.md)",
    "conditions[].type": "the condition's type",
    "conditions[].status": "whether the condition holds",
    "conditions[].reason": "why, in one CamelCase word",
    "conditions[].message": "why, in words",
    "conditions[].lastTransitionTime": "when `status` last changed (RFC 3339)",
    "observedGeneration": "the `metadata.generation` the operator last acted on",
}
#: Fields without a description in the model, described here, by kind and path.
UNDESCRIBED = {
    ("OptimizedTableSet", "status.message"): "what the last listing found and did, in words",
}


@dataclass(frozen=True)
class Field:
    """One row: a field by its dotted path under spec or status."""

    path: str
    type: str
    default: str
    limits: str
    description: str


def kinds() -> list[Any]:
    """The `floe.api.crd.KindSpec` of each kind, in the order of the CRDs."""
    from floe.api.crd import KIND_SPECS

    return list(KIND_SPECS)


def kind_schema(spec: Any) -> Schema:
    """The ``openAPIV3Schema`` of one kind, as its CRD carries it."""
    from floe.api.crd import crd

    schema: Schema = crd(spec)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def floe_defaults() -> dict[str, Any]:
    """floe's default of every inheritable table setting, by camelCase path (``minor.triggerFileCount``)."""
    from floe.api.table import SET_OWN_FIELDS, OptimizedTableSpec

    spec = OptimizedTableSpec.model_validate({"table": "a.b", "catalog": {"name": "c"}})
    dumped = spec.model_dump(mode="json", by_alias=True, exclude=set(SET_OWN_FIELDS))
    flat: dict[str, Any] = {}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and value:
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value

    walk(dumped, "")
    return flat


def inherited_settings() -> set[str]:
    """The top-level names of a table's inheritable settings."""
    from floe.api.crd_rules import INHERITED

    return {path[1] for path in INHERITED["OptimizedTable"]}


def type_of(node: Schema) -> str:
    """A field's type in words."""
    if node.get("x-kubernetes-int-or-string"):
        return (
            "quantity (bytes, or e.g. `128Mi`)"
            if node.get("pattern") == QUANTITY_PATTERN
            else "int or string"
        )
    if node.get("pattern") == DURATION_PATTERN:
        return "duration (e.g. `90s`, `1h30m`, `7d`)"
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return "object (Kubernetes)"
    if "enum" in node:
        return " \\| ".join(code(value) for value in node["enum"])
    kind = str(node.get("type", "any"))
    if kind == "array":
        return f"list of {type_of(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {type_of(node['additionalProperties'])}"
    if node.get("format") == "date-time":
        return "string (RFC 3339 time)"
    return kind


def limits(node: Schema) -> str:
    """Bounds the API server enforces on the field (a quantity's or duration's pattern aside)."""
    return schema_limits(node, (QUANTITY_PATTERN, DURATION_PATTERN), INT_OR_STRING_MESSAGE)


def _describe(kind: str, path: str, node: Schema) -> str:
    text = node.get("description")
    if text:
        return prose(str(text))
    if (kind, path) in UNDESCRIBED:
        return UNDESCRIBED[(kind, path)]
    for suffix, convention in CONVENTIONS.items():
        if path == suffix or path.endswith(f".{suffix}"):
            return convention
    raise ValueError(f"{kind}: the field {path} has no description (add one to the model)")


def _value(value: Any) -> str:
    return "unset" if value is None else code(value)


def _is_settings(node: Schema, settings: set[str]) -> bool:
    return node.get("type") == "object" and set(node.get("properties", {})) == settings


def fields(
    kind: str,
    node: Schema,
    prefix: str,
    settings: set[str],
    defaults: dict[str, Any] | None = None,
    inherited: bool = False,
) -> Iterator[Field]:
    """Every field under ``node``, depth first, by its path from ``prefix`` on. ``defaults``: floe's
    defaults of the inheritable settings directly under ``node`` (an OptimizedTable's spec);
    ``inherited``: ``node`` is such a setting itself."""
    required = set(node.get("required", []))
    for name, sub in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        description = _describe(kind, path, sub)
        if not (kind == "OptimizedTable" and path.startswith("spec.")) and _is_settings(sub, settings):
            description += (
                f"; its fields are a table's settings: see [OptimizedTable spec](#{SETTINGS_ANCHOR})"
            )
            yield Field(path, "object", "", limits(sub), description)
            continue
        setting = inherited or (defaults is not None and name in settings)
        is_object = "properties" in sub
        if name in required:
            default = "required"
        elif setting:
            relative = path.split(".", 1)[1]
            value = "" if is_object else ", else " + _value((defaults or {}).get(relative))
            default = "inherited" + value
        elif sub.get("default") not in ({}, None):
            default = code(sub["default"])
        else:
            default = ""
        yield Field(path, type_of(sub), default, limits(sub), description)
        if is_object:
            yield from fields(kind, sub, f"{path}.", settings, defaults if setting else None, setting)
        items = sub.get("items", {})
        if "properties" in items:
            yield from fields(kind, items, f"{path}[].", settings)
        values = sub.get("additionalProperties")
        if isinstance(values, dict) and "properties" in values:
            yield from fields(kind, values, f"{path}.<key>.", settings)


def _rows(kind: str, schema: Schema, part: str) -> list[Field]:
    """The fields of ``spec`` or ``status``, by their full path (``spec.minor.triggerFileCount``)."""
    defaults = floe_defaults() if (kind, part) == ("OptimizedTable", "spec") else None
    return list(fields(kind, schema["properties"][part], f"{part}.", inherited_settings(), defaults))


def _strip(path: str, part: str) -> str:
    return path.removeprefix(f"{part}.")


def example(kind: str) -> tuple[str, str]:
    """(file, YAML text) of the first document of ``kind`` in `EXAMPLES`, comments kept."""
    for name in EXAMPLES:
        for document in (REPO_ROOT / name).read_text().split("\n---\n"):
            loaded = yaml.safe_load(document)
            if isinstance(loaded, dict) and loaded.get("kind") == kind:
                return name, document.strip()
    raise ValueError(f"no {kind} in {', '.join(EXAMPLES)} to show as its example")


def kind_section(spec: Any) -> list[str]:
    """One kind's section: what it is, its names and columns, its spec and status tables."""
    schema = kind_schema(spec)
    kind = spec.kind
    lines = [
        f"## {kind}",
        "",
        prose(spec.description),
        "",
        f"`apiVersion: floe.dev/v1alpha1`, `kind: {kind}`; namespaced; plural `{spec.plural}`, "
        f"short name `{spec.short_name}` (`kubectl get {spec.short_name}`).",
        "",
        f"`kubectl get {spec.short_name}` shows: "
        + ", ".join(f"{column.name} ({column.description})" for column in spec.columns)
        + ".",
        "",
    ]
    source, text = example(kind)
    lines += [f'??? example "Example: `{source}`"', "", "    ```yaml"]
    lines += [f"    {line}".rstrip() for line in text.splitlines()]
    lines += ["    ```", ""]
    name = schema["properties"]["metadata"].get("properties", {}).get("name")
    if name:
        lines += [f"`metadata.name`: {prose(str(name.get('description', '')))} ({limits(name)}).", ""]
    for part in ("spec", "status"):
        node = schema["properties"][part]
        lines += [f"### {kind} {part}", "", prose(str(node.get("description", ""))), ""]
        if part == "status":
            lines += ["Written by the operator; never set it yourself.", ""]
        rows = [
            (code(_strip(f.path, part)), f.type, f.default, f.limits, f.description)
            for f in _rows(kind, schema, part)
        ]
        lines.append(table(("Field", "Type", "Default", "Limits", "Description"), rows))
    return lines


def render() -> str:
    """The whole page."""
    lines = page_head(
        "ref_manifests",
        "the CRDs floe.api.crd generates from the pydantic models",
        "Manifests",
        "Every field of floe's three kinds, `apiVersion: floe.dev/v1alpha1`: "
        "[OptimizerGroup](#optimizergroup), [OptimizedTable](#optimizedtable) and "
        "[OptimizedTableSet](#optimizedtableset). Fields are named by their path under `spec` or "
        "`status`: `minor.triggerFileCount` is `spec.minor.triggerFileCount`; `[]` is an item of a "
        "list, `<key>` any key of a map. The API server checks every limit shown: the CRDs in "
        "`crds/` carry them.",
        "A default of *inherited, else X* is a table setting: when the OptimizedTable leaves it "
        "unset, it comes from its OptimizedTableSet's `template`, else its OptimizerGroup's "
        "`tableDefaults`, else it is X. The table's `status.effectiveSpec` shows the settings floe "
        "applies and `status.specSources` where each came from "
        "(see [Settings and where they come from](../concepts/settings.md)).",
        "Durations are numbers with units `ms`, `s`, `m`, `h`, `d`, combined as in `1h30m`; "
        "quantities are bytes, or numbers with `Ki`, `Mi`, `Gi`, `Ti` (powers of 1024) or "
        "`k`/`K`, `M`, `G`, `T` (powers of 1000).",
    )
    for spec in kinds():
        lines += kind_section(spec)
    return "\n".join(lines).rstrip() + "\n"
