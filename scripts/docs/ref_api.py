"""The task service API page: the OpenAPI document the service serves, rendered as Markdown.

The document is `floe.service.openapi.build_openapi` (what ``GET /v1/openapi.json`` answers, and
what ``docs/task-service-openapi.json`` holds a copy of): each operation with its authentication,
parameters, request body and answers, then every schema with its fields.
"""

from __future__ import annotations

import re
from typing import Any

from ref_text import code, page_head, prose, schema_limits, table

Schema = dict[str, Any]
REF_PREFIX = "#/components/schemas/"


def document() -> dict[str, Any]:
    """The OpenAPI document, as the task service builds it."""
    from floe.service.openapi import build_openapi

    built: dict[str, Any] = build_openapi()
    return built


def anchor(name: str) -> str:
    """The anchor of a schema's heading (mkdocs' toc: lowercased, spaces as dashes)."""
    return re.sub(r"[^\w-]", "", name.lower().replace(" ", "-"))


def type_of(node: Schema) -> str:
    """A schema node's type in words, schemas linked."""
    if "$ref" in node:
        name = str(node["$ref"]).removeprefix(REF_PREFIX)
        return f"[{name}](#{anchor(name)})"
    if "const" in node:
        return code(node["const"])
    if "enum" in node:
        return " \\| ".join(code(value) for value in node["enum"])
    for key in ("anyOf", "oneOf"):
        if key in node:
            options = [option for option in node[key] if option != {"type": "null"}]
            text = " or ".join(type_of(option) for option in options)
            return text + (" or null" if len(options) < len(node[key]) else "")
    kind = node.get("type", "any")
    if kind == "array":
        return f"list of {type_of(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {type_of(node['additionalProperties'])}"
    return str(kind)


def _limits(node: Schema) -> str:
    """Limits of a node, or of the non-null branch of an ``X | None``."""
    options = [option for option in node.get("anyOf", []) if option != {"type": "null"}]
    branch = options[0] if len(options) == 1 else {}
    return "; ".join(part for part in (schema_limits(node), schema_limits(branch)) if part)


def schema_section(name: str, schema: Schema) -> list[str]:
    """One schema: its description and a table of its fields."""
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [prose(str(schema["description"])), ""]
    required = set(schema.get("required", []))
    rows = []
    for field, node in schema.get("properties", {}).items():
        if field in required:
            default = "required"
        elif "default" in node:
            default = "null" if node["default"] is None else code(node["default"])
        else:
            default = ""
        rows.append(
            (code(field), type_of(node), default, _limits(node), prose(str(node.get("description", ""))))
        )
    if rows:
        lines.append(table(("Field", "Type", "Default", "Limits", "Description"), rows))
    return lines


def _body(content: dict[str, Any]) -> str:
    return "; ".join(f"{type_of(media.get('schema', {}))} ({code(kind)})" for kind, media in content.items())


def operation_section(
    path: str, method: str, operation: dict[str, Any], schemes: dict[str, Any]
) -> list[str]:
    """One operation: what it does, who may call it, what it takes and what it answers."""
    lines = [f"### {operation['summary']}", "", f"`{method.upper()} {path}`", ""]
    lines += [prose(str(operation.get("description", ""))), ""]
    security = [name for requirement in operation.get("security", []) for name in requirement]
    if security:
        auth = " ".join(
            f"{code(name)}, sent as `Authorization: Bearer TOKEN`: {prose(str(schemes[name]['description']))}"
            for name in security
        )
        lines += [f"**Authentication**: {auth}", ""]
    else:
        lines += ["**Authentication**: none.", ""]
    parameters = operation.get("parameters", [])
    if parameters:
        rows = [
            (
                code(parameter["name"]),
                parameter["in"],
                type_of(parameter.get("schema", {})),
                "required" if parameter.get("required") else _default(parameter.get("schema", {})),
                schema_limits(parameter.get("schema", {})),
                prose(str(parameter.get("description", ""))),
            )
            for parameter in parameters
        ]
        lines += ["**Parameters**", ""]
        lines.append(table(("Name", "In", "Type", "Default", "Limits", "Description"), rows))
    body = operation.get("requestBody")
    if body:
        lines += [f"**Request body**: {_body(body.get('content', {}))}", ""]
    answers = [
        (code(status), _body(answer.get("content", {})), prose(str(answer.get("description", ""))))
        for status, answer in operation.get("responses", {}).items()
    ]
    lines += ["**Responses**", ""]
    lines.append(table(("Status", "Body", "Meaning"), answers))
    return lines


def _default(schema: Schema) -> str:
    return code(schema["default"]) if "default" in schema else ""


def render() -> str:
    """The whole page."""
    spec = document()
    info = spec["info"]
    components = spec.get("components", {})
    schemes = components.get("securitySchemes", {})
    lines = page_head(
        "ref_api",
        "floe.service.openapi.build_openapi",
        "Task service API",
        f"{info['title']}, API version `{info['version']}` (OpenAPI {spec['openapi']}).",
        prose(str(info.get("description", ""))),
        "The task service listens on the operator's `--service-port` (7070 unless set; the Helm "
        "chart's Service points at it). The document itself is served at `GET /v1/openapi.json`; "
        "`docs/task-service-openapi.json` in the repository is a copy, checked against the code by "
        "the tests.",
    )
    lines += ["## Authentication", ""]
    lines.append(
        table(
            ("Scheme", "Kind", "Description"),
            [
                (code(name), f"HTTP {scheme.get('scheme', '')}", prose(str(scheme.get("description", ""))))
                for name, scheme in schemes.items()
            ],
        )
    )
    lines += ["## Operations", ""]
    overview = [
        (
            f"`{method.upper()} {path}`",
            f"[{operation['summary']}](#{anchor(operation['summary'])})",
            ", ".join(code(name) for requirement in operation.get("security", []) for name in requirement)
            or "none",
        )
        for path, methods in spec["paths"].items()
        for method, operation in methods.items()
    ]
    lines.append(table(("Call", "What it does", "Authentication"), overview))
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            lines += operation_section(path, method, operation, schemes)
    lines += ["## Schemas", ""]
    for name, schema in components.get("schemas", {}).items():
        lines += schema_section(name, schema)
    return "\n".join(lines).rstrip() + "\n"
