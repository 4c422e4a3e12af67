"""A table's effective settings: its own manifest's, then its OptimizedTableSet's template, then its
OptimizerGroup's ``tableDefaults``, then floe's defaults; and where each setting came from.

Settings merge field by field, as Helm merges values: a nested map (``minor``,
``maintenance.orphanFiles``) merges key by key, so a table that sets only
``minor.triggerInterval`` keeps its set's ``minor.triggerFileCount``; a list or a scalar is
replaced whole; an explicit null (``maintenance.dataRetention: null``, ``targetSize: null``)
takes back what a lower level set. The table, its catalog and its group are never inherited.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from floe.api.group import OptimizerGroup
from floe.api.table import SET_OWN_FIELDS, OptimizedTableSpec

OWN_SOURCE = "OptimizedTable"
"""The source of a setting the table's own manifest sets."""


@dataclass(frozen=True)
class SettingsLayer:
    """Settings one level gives the tables below it: camelCase keys, serialised values (``1h``),
    only what that level sets."""

    source: str
    """Where they come from: ``OptimizedTableSet/NAME``, ``OptimizerGroup/NAME``."""
    settings: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, source: str, template: BaseModel | None) -> SettingsLayer | None:
        """The fields `template` (an OptimizedTableTemplate) sets; None when there is no template."""
        if template is None:
            return None
        return cls(source, template.model_dump(mode="json", by_alias=True, exclude_unset=True))


def set_layer(name: str, template: BaseModel) -> SettingsLayer:
    """What the template of the OptimizedTableSet `name` gives its tables."""
    layer = SettingsLayer.of(f"OptimizedTableSet/{name}", template)
    assert layer is not None  # a template given gives a layer
    return layer


def group_layer(group: OptimizerGroup) -> SettingsLayer | None:
    """What a group's ``tableDefaults`` give its tables; None when it has none."""
    return SettingsLayer.of(f"OptimizerGroup/{group.metadata.name}", group.spec.table_defaults)


@dataclass(frozen=True)
class EffectiveSpec:
    """The spec floe applies to a table, and the source of each setting not left to floe's default."""

    spec: OptimizedTableSpec
    sources: dict[str, str]

    def status(self) -> dict[str, Any]:
        """The status fields that show it: ``effectiveSpec`` and ``specSources``."""
        settings = self.spec.model_dump(
            mode="json", by_alias=True, exclude=set(SET_OWN_FIELDS), exclude_none=True
        )
        return {"effectiveSpec": settings, "specSources": dict(sorted(self.sources.items()))}


class InheritedSettingsInvalid(ValueError):
    """The merged settings are not a valid spec (each level was valid on its own)."""


def own_settings(spec: OptimizedTableSpec) -> dict[str, Any]:
    """The settings the table's manifest sets itself (what it left unset is inherited)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude=set(SET_OWN_FIELDS))


def effective_spec(spec: OptimizedTableSpec, inherited: Sequence[SettingsLayer | None]) -> EffectiveSpec:
    """`spec` (a table's manifest) with the settings it leaves unset taken from `inherited`, the
    closest level first (its set's template, then its group's defaults); floe's defaults fill the rest.

    Raises `InheritedSettingsInvalid` when the merged settings do not validate.
    """
    layers = [SettingsLayer(OWN_SOURCE, own_settings(spec)), *(x for x in inherited if x is not None)]
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for layer in reversed(layers):  # the farthest first: each closer level overrides it
        _merge(merged, layer.settings, layer.source, "", sources)
    identity = {"table": spec.table, "catalog": {"name": spec.catalog.name}, "group": spec.group}
    try:
        resolved = OptimizedTableSpec.model_validate({**merged, **identity})
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            path = ".".join(str(part) for part in error["loc"])
            problems.append(f"{path} ({sources.get(path, 'floe')}): {error['msg']}")
        raise InheritedSettingsInvalid(
            f"the settings of table {spec.table!r} are not valid: {'; '.join(problems)}"
        ) from exc
    return EffectiveSpec(resolved.model_copy(update={"catalog": spec.catalog}), sources)


def _merge(
    into: dict[str, Any], settings: Mapping[str, Any], source: str, prefix: str, sources: dict[str, str]
) -> None:
    for key, value in settings.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            below = into.get(key)
            if not isinstance(below, dict):
                below = into[key] = {}
                sources.pop(path, None)
                _forget_below(sources, path)
            _merge(below, value, source, f"{path}.", sources)
            continue
        into[key] = value
        _forget_below(sources, path)
        sources[path] = source


def _forget_below(sources: dict[str, str], path: str) -> None:
    """A value replaced whole: the sources of what it held below go with it."""
    for key in [k for k in sources if k.startswith(f"{path}.")]:
        del sources[key]
