"""Load OptimizerGroup, OptimizedTable and OptimizedTableSet manifests from YAML files, as
`kubectl apply -f` would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from floe.api.models import Resource, resource_from_dict


class ManifestError(ValueError):
    """A manifest that cannot be loaded; the message names the file, document and field."""


def _describe_validation(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item["loc"]) or "<document>"
        lines.append(f"{loc}: {item['msg']}")
    return "; ".join(lines)


def load_manifests(path: Path) -> list[Resource]:
    """Load every floe resource from a YAML file or a directory of ``*.yaml``/``*.yml`` files."""
    if not path.exists():
        raise ManifestError(f"{path}: no such file or directory")
    files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
    if not files:
        raise ManifestError(f"{path}: no .yaml or .yml files")
    resources: list[Resource] = []
    for file in files:
        resources.extend(_load_file(file))
    return resources


def _load_file(file: Path) -> list[Resource]:
    try:
        documents = list(yaml.safe_load_all(file.read_text()))
    except yaml.YAMLError as exc:
        raise ManifestError(f"{file}: not valid YAML: {exc}") from exc
    resources: list[Resource] = []
    for index, document in enumerate(documents):
        if document is None:
            continue
        where = f"{file} (document {index + 1})"
        if not isinstance(document, dict):
            raise ManifestError(f"{where}: expected a mapping with apiVersion, kind, metadata, spec")
        resources.append(_validate(document, where))
    return resources


def _validate(document: dict[str, Any], where: str) -> Resource:
    try:
        return resource_from_dict(document)
    except ValidationError as exc:
        kind = document.get("kind", "?")
        name = (document.get("metadata") or {}).get("name", "?")
        raise ManifestError(f"{where}: invalid {kind} {name!r}: {_describe_validation(exc)}") from exc
    except ValueError as exc:
        raise ManifestError(f"{where}: {exc}") from exc
