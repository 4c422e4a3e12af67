"""The CRDs in crds/ are generated from the pydantic models, are structural, and agree with the models.

No cluster here: tests/k8s/test_crds.py checks the same files against a real API server.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from floe.api import crd as crd_module
from floe.api.crd import KIND_SPECS, crds, main, render
from floe.api.crd_rules import RULES, cel_bytes, cel_seconds
from floe.api.group import OptimizerGroup, OptimizerGroupSpec
from floe.api.meta import MAX_GROUP_NAME_LENGTH
from floe.api.models import OptimizedTable
from floe.api.status import OptimizedTableStatus
from floe.api.units import (
    DURATION_PATTERN,
    MAX_UNIT_LENGTH,
    QUANTITY_PATTERN,
    parse_duration,
    parse_quantity,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
CRDS_DIR = REPO_ROOT / "crds"
REGENERATE = "regenerate them with: .venv/bin/python -m floe.api.crd crds/"

#: Keys a structural schema may not set inside anyOf/allOf/oneOf/not.
_FORBIDDEN_IN_JUNCTORS = {"type", "description", "default", "nullable", "additionalProperties", "properties"}
_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def _schema(kind: str) -> dict[str, Any]:
    spec = next(s for s in KIND_SPECS if s.kind == kind)
    schema: dict[str, Any] = crds()[spec.file_name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node below (and including) ``node``, with its path."""
    found = [(path or "<root>", node)]
    for name, sub in node.get("properties", {}).items():
        found += _walk(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        found += _walk(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        found += _walk(node["items"], f"{path}[]")
    return found


# --------------------------------------------------------------------------------------------------
# Drift


@pytest.mark.parametrize("name", sorted(crds()))
def test_committed_crds_match_the_models(name: str) -> None:
    path = CRDS_DIR / name
    assert path.is_file(), f"{path.relative_to(REPO_ROOT)} is missing; {REGENERATE}"
    assert path.read_text() == render(crds()[name]), (
        f"{path.relative_to(REPO_ROOT)} is out of date with operator/floe/api/models.py; {REGENERATE}"
    )


def test_crds_directory_holds_only_generated_files() -> None:
    present = {p.name for p in CRDS_DIR.glob("*.yaml")}
    assert present == set(crds()), f"unexpected or missing files in crds/; {REGENERATE}"
    assert set(crds()) == {
        "optimizergroups.floe.dev.yaml",
        "optimizedtables.floe.dev.yaml",
        "optimizedtablesets.floe.dev.yaml",
    }


def test_generated_yaml_parses_back_to_the_same_document() -> None:
    for document in crds().values():
        assert yaml.safe_load(render(document)) == document


def test_cli_writes_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path), "--check"]) == 1
    assert "regenerate with: python -m floe.api.crd" in capsys.readouterr().err
    assert main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(crds())
    assert main([str(tmp_path), "--check"]) == 0
    (tmp_path / "optimizedtables.floe.dev.yaml").write_text("stale\n")
    assert main([str(tmp_path), "--check"]) == 1


# --------------------------------------------------------------------------------------------------
# Structural schemas


@pytest.mark.parametrize("kind", ["OptimizerGroup", "OptimizedTable"])
def test_schema_is_structural(kind: str) -> None:
    schema = _schema(kind)
    text = yaml.safe_dump(schema)
    assert "$ref" not in text and "$defs" not in text
    for path, node in _walk(schema):
        assert "title" not in node and "const" not in node, path
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if "x-kubernetes-preserve-unknown-fields" in node:
            # Only Kubernetes objects passed through to pods are free-form.
            assert path.startswith(".spec.executorTemplate."), path
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node and node["anyOf"] == _INT_OR_STRING, path
        else:
            assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path
            for junctor in ("anyOf", "allOf", "oneOf", "not"):
                assert junctor not in node, f"{path}: {junctor} outside int-or-string"
        if "properties" in node or "additionalProperties" in node:
            assert node["type"] == "object", path
        if "items" in node:
            assert node["type"] == "array", path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            if bound in node:
                assert node[bound] is True and isinstance(node[bound.replace("exclusiveM", "m")], int | float)
        if "nullable" in node:
            assert node["nullable"] is True
            assert node.get("default", "unset") is not None, path
        for junctor in ("anyOf", "allOf", "oneOf"):
            for branch in node.get(junctor, []):
                if node.get("x-kubernetes-int-or-string") and junctor == "anyOf":
                    continue
                assert not _FORBIDDEN_IN_JUNCTORS & set(branch), f"{path}: {branch}"


@pytest.mark.parametrize("kind", ["OptimizerGroup", "OptimizedTable"])
def test_metadata_is_left_to_the_api_server(kind: str) -> None:
    properties = _schema(kind)["properties"]
    assert properties["apiVersion"]["type"] == properties["kind"]["type"] == "string"
    assert set(properties) == {"apiVersion", "kind", "metadata", "spec", "status"}
    if kind == "OptimizedTable":
        assert properties["metadata"] == {"type": "object"}
        return
    # A group's name goes into its Service's name, a DNS-1035 label: it is held shorter than others.
    name = properties["metadata"]["properties"]["name"]
    assert set(properties["metadata"]["properties"]) == {"name"}
    assert name["maxLength"] == MAX_GROUP_NAME_LENGTH == 51
    assert name["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


@pytest.mark.parametrize("kind", ["OptimizerGroup", "OptimizedTable"])
def test_every_string_list_and_map_is_bounded(kind: str) -> None:
    """Every string has a maxLength (or is an enum), every list a maxItems, every map a maxProperties,
    so that no value can grow without bound (the API server would otherwise store up to 1.5 MiB)."""
    unbounded = []
    for path, node in _walk(_schema(kind)):
        if path in (".apiVersion", ".kind", ".metadata"):
            continue  # the API server's own
        kind_of = node.get("type")
        if node.get("x-kubernetes-int-or-string") or kind_of == "string":
            if "maxLength" not in node and "enum" not in node:
                unbounded.append(f"{path}: string without maxLength")
        elif kind_of == "array" and "maxItems" not in node:
            unbounded.append(f"{path}: list without maxItems")
        elif kind_of == "object" and "properties" not in node and "maxProperties" not in node:
            unbounded.append(f"{path}: map without maxProperties")
    assert not unbounded, "\n".join(unbounded)


def test_bounded_map_keys_become_cel_rules() -> None:
    spec = _schema("OptimizedTable")["properties"]["spec"]["properties"]
    properties = spec["catalog"]["properties"]["properties"]
    assert "patternProperties" not in properties and "propertyNames" not in properties
    assert properties["additionalProperties"] == {"type": "string", "maxLength": 8192}
    assert properties["x-kubernetes-validations"] == [
        {
            "rule": "self.all(k, k.size() <= 253 && k.matches('^[-._a-zA-Z0-9]+$'))",
            "message": "keys must be at most 253 characters long and match ^[-._a-zA-Z0-9]+$",
        }
    ]


def test_required_fields() -> None:
    table = _schema("OptimizedTable")
    assert table["required"] == ["spec"]
    assert table["properties"]["spec"]["required"] == ["table", "catalog"]
    assert table["properties"]["spec"]["properties"]["catalog"]["required"] == ["name"]
    group = _schema("OptimizerGroup")
    assert "required" not in group and group["properties"]["spec"]["default"] == {}


def test_quantities_are_int_or_string_with_hoisted_validations() -> None:
    target = _schema("OptimizedTable")["properties"]["spec"]["properties"]["targetSize"]
    assert target["x-kubernetes-int-or-string"] is True
    assert target["anyOf"] == _INT_OR_STRING
    assert target["pattern"] == QUANTITY_PATTERN and target["minimum"] == 0
    assert target["maxLength"] == MAX_UNIT_LENGTH
    # Unset, the table's write.target-file-size-bytes decides; other quantities keep defaults.
    assert "default" not in target and target["nullable"] is True
    memory = _schema("OptimizerGroup")["properties"]["spec"]["properties"]["executorMemory"]
    assert memory["default"] == "2Gi" and memory["x-kubernetes-int-or-string"] is True


def test_durations_are_patterned_strings() -> None:
    spec = _schema("OptimizerGroup")["properties"]["spec"]["properties"]
    for name, default in (("heartbeatTimeout", "1m"), ("ackTimeout", "30s"), ("executeTimeout", "1h")):
        node = spec[name]
        assert node["type"] == "string" and node["pattern"] == DURATION_PATTERN
        assert node["default"] == default and node["maxLength"] == MAX_UNIT_LENGTH


def test_validation_and_serialization_schemas_differ_only_in_defaults() -> None:
    """The CRD uses pydantic's serialization mode for its string defaults; nothing else may differ."""

    def without_defaults(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: without_defaults(v) for k, v in node.items() if k != "default"}
        if isinstance(node, list):
            return [without_defaults(v) for v in node]
        return node

    for model in (OptimizerGroup, OptimizedTable):
        validation = model.model_json_schema(by_alias=True, mode="validation")
        serialization = model.model_json_schema(by_alias=True, mode="serialization")
        assert without_defaults(validation) == without_defaults(serialization)


# --------------------------------------------------------------------------------------------------
# Defaults: what the API server fills in is what pydantic would


def _apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: a missing field gets its default, then recurse."""
    if not isinstance(value, dict) or "properties" not in schema:
        return value
    out = dict(value)
    for name, sub in schema["properties"].items():
        if name not in out and "default" in sub:
            out[name] = copy.deepcopy(sub["default"])
        if name in out:
            out[name] = _apply_defaults(sub, out[name])
    return out


def test_crd_defaults_equal_the_model_defaults() -> None:
    group = {"apiVersion": "floe.dev/v1alpha1", "kind": "OptimizerGroup", "metadata": {"name": "g"}}
    defaulted = _apply_defaults(_schema("OptimizerGroup"), group)
    assert defaulted["spec"]["executorMemory"] == "2Gi" and defaulted["spec"]["policy"] == "quota"
    assert OptimizerGroup.model_validate(defaulted).spec == OptimizerGroupSpec()

    minimal = {"table": "db.t", "catalog": {"name": "c"}}
    table = {"apiVersion": "floe.dev/v1alpha1", "kind": "OptimizedTable", "metadata": {"name": "t"}}
    defaulted = _apply_defaults(_schema("OptimizedTable"), {**table, "spec": minimal})
    # A table's settings get no defaults from the API server: unset, they are inherited
    # (floe.api.inheritance); floe's defaults are the model's, and status.effectiveSpec shows them.
    assert defaulted["spec"] == {**minimal, "group": "default"}
    assert (
        OptimizedTable.model_validate(defaulted).spec
        == OptimizedTable.model_validate({**table, "spec": minimal}).spec
    )
    # Nor do the levels a table inherits from, at any depth.
    for kind, path in (("OptimizedTableSet", "template"), ("OptimizerGroup", "tableDefaults")):
        node = _schema(kind)["properties"]["spec"]["properties"][path]
        assert "default:" not in yaml.safe_dump(node), kind


@pytest.mark.parametrize("kind", ["OptimizerGroup", "OptimizedTable"])
def test_status_has_no_defaults(kind: str) -> None:
    assert "default:" not in yaml.safe_dump(_schema(kind)["properties"]["status"])


# --------------------------------------------------------------------------------------------------
# Printer columns, subresources, names


def _field(schema: dict[str, Any], json_path: str) -> dict[str, Any]:
    node = schema
    for name in json_path.lstrip(".").split("."):
        node = node["properties"][name]
    return node


@pytest.mark.parametrize("spec", KIND_SPECS, ids=lambda s: s.kind)
def test_printer_columns_point_at_typed_fields(spec: crd_module.KindSpec) -> None:
    version = crds()[spec.file_name]["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            assert column["name"] == "Age" and column["type"] == "date"
            continue
        node = _field(schema, column["jsonPath"])
        expected = {"string": {"string"}, "integer": {"integer"}, "number": {"number"}, "date": {"string"}}
        assert node["type"] in expected[column["type"]], column
        if column["type"] == "date":
            assert node.get("format") == "date-time", column


def test_printer_column_names() -> None:
    names = {s.kind: [c.name.upper() for c in s.columns] for s in KIND_SPECS}
    assert names["OptimizedTable"] == [
        "GROUP",
        "TABLE",
        "STATE",
        "QUOTA",
        "OCCUPATION",
        "HEALTH",
        "WAITING",  # priority 1: `kubectl get -o wide` only
        "DATA FILES",
        "DELETE FILES",
        "LAST OPTIMIZED",
        "AGE",
    ]
    assert names["OptimizerGroup"] == [
        "POLICY",
        "DESIRED",
        "READY",
        "THREADS",
        "TABLES",
        "RUNNING TASKS",
        "AGE",
    ]


def test_subresources_and_names() -> None:
    documents = {document["spec"]["names"]["kind"]: document for document in crds().values()}
    group, table = documents["OptimizerGroup"], documents["OptimizedTable"]
    scale = group["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.executors",
        "statusReplicasPath": ".status.readyExecutors",
        "labelSelectorPath": ".status.selector",
    }
    schema = group["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _field(schema, scale["specReplicasPath"])["type"] == "integer"
    assert _field(schema, scale["statusReplicasPath"])["type"] == "integer"
    assert _field(schema, scale["labelSelectorPath"])["type"] == "string"
    assert table["spec"]["versions"][0]["subresources"] == {"status": {}}
    for document, short in ((group, "og"), (table, "ot")):
        names = document["spec"]["names"]
        assert names["shortNames"] == [short] and names["categories"] == ["floe"]
        assert document["spec"]["scope"] == "Namespaced" and document["spec"]["group"] == "floe.dev"
        assert [v["name"] for v in document["spec"]["versions"]] == ["v1alpha1"]


def test_every_cel_rule_is_rendered_and_explained() -> None:
    for kind, rules in RULES.items():
        for rule in rules:
            assert rule.why and rule.message
            node = _schema(kind)
            for name in rule.path:
                node = node["properties"][name]
            assert rule.render() in node["x-kubernetes-validations"]


def test_cel_parsers_follow_the_unit_tables() -> None:
    """The CEL parsers know every unit the Python parsers know (their behaviour is checked on a server)."""
    seconds = cel_seconds("self")
    for unit in ("ms", "s", "m", "h", "d"):
        assert f"p.endsWith('{unit}')" in seconds
    assert seconds.index("endsWith('ms')") < seconds.index("endsWith('s')")
    assert parse_duration("1h30m") == 5400
    nbytes = cel_bytes("self")
    for unit in ("Ki", "Mi", "Gi", "Ti", "k", "K", "M", "G", "T"):
        assert f"self.endsWith('{unit}') ? {float(parse_quantity('1' + unit))!r}" in nbytes


# --------------------------------------------------------------------------------------------------
# Status fields added for the CRD


def test_last_optimized_is_the_latest_of_the_three() -> None:
    status = OptimizedTableStatus(
        last_minor_optimizing="2026-01-02T10:00:00Z",
        last_major_optimizing="2026-01-02T12:00:00+01:00",  # 11:00 UTC: the latest
        last_full_optimizing="2025-12-31T00:00:00Z",
    )
    assert status.last_optimized == "2026-01-02T12:00:00+01:00"
    assert OptimizedTableStatus().last_optimized is None
    kept = OptimizedTableStatus(
        last_minor_optimizing="2026-01-02T10:00:00Z", last_optimized="2026-01-03T00:00:00Z"
    )
    assert kept.last_optimized == "2026-01-03T00:00:00Z"
    dumped = status.model_dump(by_alias=True, exclude_none=True)
    assert dumped["lastOptimized"] == "2026-01-02T12:00:00+01:00"
