"""Which tables of a catalog an OptimizedTableSet selects, and what each table's resource is named.

Patterns are globs over ``namespace.table`` identifiers, the namespace nested by dots: ``*``
and ``?`` stay within one dot-separated part, ``**`` spans parts (any depth of namespace),
``[abc]``, ``[a-z]`` and ``[!abc]`` are classes of one character. Matching is case-sensitive, as catalogs
keep identifiers.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from pyiceberg.catalog import Catalog

from floe.api.meta import DNS1123_SUBDOMAIN, MAX_SUBDOMAIN_LENGTH
from floe.api.models import API_VERSION
from floe.api.table_set import TABLE_SET_LABEL, OptimizedTableSet

_HASH_LENGTH = 8


def glob_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression that matches what the glob `pattern` matches, whole identifiers only."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^.]*")
        elif char == "?":
            out.append("[^.]")
        elif char == "[":
            end = pattern.index("]", i)
            members = pattern[i + 1 : end]
            negated = members.startswith("!")
            # Members as they are but for the regex's own specials: '-' between two keeps its
            # meaning of a range, as in shell globs.
            body = "".join("\\" + c if c in "\\^[]" else c for c in members.removeprefix("!"))
            # A negated class never matches the dot that separates parts.
            out.append(f"[^.{body}]" if negated else f"[{body}]")
            i = end + 1
            continue
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out))


class TableSelector:
    """The include and exclude patterns of a set: a table is selected when an include pattern
    matches it and no exclude pattern does."""

    def __init__(self, include: Sequence[str], exclude: Sequence[str] = ()) -> None:
        self._include = [glob_regex(p) for p in include]
        self._exclude = [glob_regex(p) for p in exclude]

    def matches(self, identifier: str) -> bool:
        """Whether the set selects the table `identifier` (``namespace.table``)."""
        return any(p.fullmatch(identifier) for p in self._include) and not any(
            p.fullmatch(identifier) for p in self._exclude
        )

    def select(self, identifiers: Iterable[str]) -> list[str]:
        """The selected identifiers, sorted."""
        return sorted(i for i in set(identifiers) if self.matches(i))


def list_table_identifiers(catalog: Catalog) -> list[str]:
    """Every table of `catalog` as ``namespace.table``, namespaces nested to any depth; sorted.

    Catalogs differ in what ``list_namespaces(parent)`` returns (the direct children, or every
    descendant); each namespace is listed once either way.
    """
    seen: set[tuple[str, ...]] = set()
    pending = [tuple(ns) for ns in catalog.list_namespaces()]
    tables: set[str] = set()
    while pending:
        namespace = pending.pop()
        if namespace in seen or not namespace:
            continue
        seen.add(namespace)
        tables.update(".".join(identifier) for identifier in catalog.list_tables(namespace))
        for child in catalog.list_namespaces(namespace):
            child = tuple(child)
            if len(child) > len(namespace) and child[: len(namespace)] == namespace:
                pending.append(child)
    return sorted(tables)


def table_resource_name(identifier: str, distinct: bool = False) -> str:
    """The name of the OptimizedTable a set makes for `identifier`: the identifier itself when it
    is a valid object name (``sales.orders``), else a readable form of it with a hash of the
    identifier, so that tables differing only in case or punctuation never share a name.
    `distinct`: the form with the hash in any case (the plain name is held for another table)."""
    plain = len(identifier) <= MAX_SUBDOMAIN_LENGTH and re.fullmatch(DNS1123_SUBDOMAIN, identifier)
    if plain and not distinct:
        return identifier
    parts = []
    for part in identifier.lower().split("."):
        cleaned = re.sub(r"[^a-z0-9-]+", "-", part).strip("-")
        parts.append(cleaned or "x")
    digest = hashlib.sha256(identifier.encode()).hexdigest()[:_HASH_LENGTH]
    readable = ".".join(parts)[: MAX_SUBDOMAIN_LENGTH - _HASH_LENGTH - 1].rstrip("-.")
    return f"{readable}-{digest}"


def claim_tables(
    catalog: str, selected: Iterable[str], served: Collection[tuple[Any, Any]], taken_names: Collection[str]
) -> tuple[dict[str, str], list[str]]:
    """Which of a set's `selected` tables of `catalog` the set serves: by resource name, those no
    other OptimizedTable of the namespace serves (`served`: their (catalog, table) pairs) and whose
    name none holds (`taken_names`); and the identifiers left to the others."""
    mine: dict[str, str] = {}
    others: list[str] = []
    for identifier in selected:
        name = table_resource_name(identifier)
        if (catalog, identifier) in served or name in taken_names:
            others.append(identifier)
        else:
            mine[name] = identifier
    return mine, others


def set_table_manifest(table_set: OptimizedTableSet, name: str, identifier: str) -> dict[str, Any]:
    """The OptimizedTable the set gives the table `identifier`, named `name` and labelled with the
    set; its spec is the set's template with the table, catalog and group filled in."""
    spec = table_set.spec.table_spec(identifier)
    return {
        "apiVersion": API_VERSION,
        "kind": "OptimizedTable",
        "metadata": {
            "name": name,
            "namespace": table_set.metadata.namespace,
            "labels": {TABLE_SET_LABEL: table_set.metadata.name},
        },
        "spec": spec.model_dump(by_alias=True, exclude_defaults=True),
    }
