"""Markdown helpers shared by the reference page generators (`mkdocs_hooks`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

GENERATED = "<!-- generated at build time by scripts/docs/{module}.py from {source}; do not edit -->"


def notice(module: str, source: str) -> str:
    """The comment at the top of a generated page: where it comes from."""
    return GENERATED.format(module=module, source=source)


def page_head(module: str, source: str, title: str, *paragraphs: str) -> list[str]:
    """The first lines of a generated page: where it comes from, its title, its introduction."""
    lines = [notice(module, source), "", f"# {title}", ""]
    for paragraph in paragraphs:
        lines += [paragraph, ""]
    return lines


_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _outside_code(text: str, change: Callable[[str], str]) -> str:
    out, last = [], 0
    for span in _CODE_SPAN.finditer(text):
        out += [change(text[last : span.start()]), span.group(0)]
        last = span.end()
    out.append(change(text[last:]))
    return "".join(out)


def _literal(text: str) -> str:
    """Text shown as it is: no emphasis from a glob's ``*``, no HTML from ``<name>``."""
    return text.replace("\\*", "*").replace("*", "\\*").replace("<", "&lt;")


def prose(text: str) -> str:
    """A docstring or description as one Markdown paragraph: reST's double backticks made single,
    lines joined, ``*`` and ``<`` outside code spans shown as they are."""
    text = re.sub(r"\s*\n\s*", " ", text.strip().replace("``", "`"))
    return _outside_code(text, _literal)


def cell(text: str) -> str:
    """``text`` (Markdown) fit for a table cell: one line, its pipes escaped outside code spans
    (Python-Markdown splits a row at no pipe inside a code span, and would show the backslash of an
    escaped one)."""
    text = re.sub(r"\s*\n\s*", " ", text.strip())
    return _outside_code(text, lambda part: part.replace("\\|", "|").replace("|", "\\|"))


def code(value: Any) -> str:
    """A value as an inline code span: strings as they are, anything else as JSON."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; every cell escaped with `cell`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _bound(node: dict[str, Any], key: str) -> str | None:
    """``value ≥ 1``, ``value < 5``: OpenAPI 3.0's boolean exclusive bounds and JSON Schema's numbers."""
    exclusive = node.get(f"exclusive{key.capitalize()}")
    signs = {"minimum": (">", "≥"), "maximum": ("<", "≤")}[key]
    if isinstance(exclusive, int | float) and not isinstance(exclusive, bool):
        return f"value {signs[0]} {exclusive}"
    if key not in node:
        return None
    return f"value {signs[0] if exclusive is True else signs[1]} {node[key]}"


def schema_limits(node: dict[str, Any], known_patterns: tuple[str, ...] = (), skip_rule: str = "") -> str:
    """The bounds a schema node sets on a value, in words: range, length, items, keys, pattern and
    CEL rules (but the one whose message is ``skip_rule``). A pattern in ``known_patterns`` is
    left out, with the length that goes with it: the field's type names that format already."""
    out = [bound for key in ("minimum", "maximum") if (bound := _bound(node, key))]
    known = node.get("pattern") in known_patterns
    if node.get("minLength", 0) > 0:
        out.append(f"length ≥ {node['minLength']}")
    if "maxLength" in node and not known:
        out.append(f"length ≤ {node['maxLength']}")
    for key, word in (("minItems", "items ≥"), ("maxItems", "items ≤")):
        if key in node:
            out.append(f"{word} {node[key]}")
    for key, word in (("minProperties", "keys ≥"), ("maxProperties", "keys ≤")):
        if key in node:
            out.append(f"{word} {node[key]}")
    if "pattern" in node and not known:
        out.append(f"matches {code(node['pattern'])}")
    for rule in node.get("x-kubernetes-validations", []):
        if rule.get("message") != skip_rule:
            message = re.sub(r"(\^\S*\$)", lambda m: code(m.group(1)), str(rule["message"]))
            out.append(f"rule: {prose(message)}")
    return "; ".join(out)
