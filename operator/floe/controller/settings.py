"""The settings each OptimizedTable inherits, as the operator last saw them: its OptimizedTableSet's
template and its OptimizerGroup's ``tableDefaults`` (`floe.api.inheritance` has the rule).

A table made by a set names the set in its controller ownerReference. The set's template is
known from the set's own handler; a table reconciled before it (the operator starting, the
handlers of both kinds resuming in any order) has the set read from the API server at once,
so that no table is planned with settings its set overrides. The group's defaults are read
from the group the engine holds; a table whose group is not there yet is not planned either
(it waits, PENDING, for its group), and is resolved again when the group comes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from floe.api.inheritance import EffectiveSpec, SettingsLayer, effective_spec, group_layer, set_layer
from floe.api.models import OptimizedTable
from floe.api.table import OptimizedTableTemplate
from floe.optimizing.engine import OptimizingEngine

log = logging.getLogger(__name__)

SET_KIND = "OptimizedTableSet"

SetReader = Callable[[str, str], Mapping[str, Any] | None]
"""Reads an OptimizedTableSet (namespace, name) from the API server; None when it does not exist."""


def owning_set(owner_references: Any) -> str | None:
    """The name of the OptimizedTableSet that controls a table (its ownerReferences), if one does."""
    for ref in owner_references or []:
        if ref.get("kind") == SET_KIND and ref.get("controller"):
            return str(ref.get("name"))
    return None


def _stored_set_layer(name: str, template: Mapping[str, Any] | None) -> SettingsLayer:
    """What a set's `template` (its ``spec.template``, as stored) gives its tables."""
    return set_layer(name, OptimizedTableTemplate.model_validate(dict(template or {})))


class InheritedSettings:
    """Each table's set, each set's template, and what each table's status shows of its settings."""

    def __init__(self, engine: OptimizingEngine, read_set: SetReader) -> None:
        self.engine = engine
        self.read_set = read_set
        self._lock = threading.Lock()
        self._table_sets: dict[str, str] = {}
        """Table (namespace/name) -> the set (namespace/name) that made it."""
        self._set_layers: dict[str, SettingsLayer | None] = {}
        """Set (namespace/name) -> its template; None: the set does not exist."""
        self.status: dict[str, dict[str, Any]] = {}
        """Table -> its ``effectiveSpec`` and ``specSources`` status fields."""

    def use_set(self, table_id: str, table_set: str | None) -> None:
        """Record which set (its name, in the table's namespace) made the table, if any."""
        namespace = table_id.split("/", 1)[0]
        with self._lock:
            if table_set is None:
                self._table_sets.pop(table_id, None)
            else:
                self._table_sets[table_id] = f"{namespace}/{table_set}"

    def apply_set(self, namespace: str, name: str, template: Mapping[str, Any] | None) -> list[str]:
        """A set's template as its handler sees it; the tables of the set, when it changed."""
        key, layer = f"{namespace}/{name}", _stored_set_layer(name, template)
        with self._lock:
            if key in self._set_layers and self._set_layers[key] == layer:
                return []
            self._set_layers[key] = layer
            return [table_id for table_id, owner in self._table_sets.items() if owner == key]

    def forget(self, table_id: str) -> None:
        """The table is gone."""
        with self._lock:
            self._table_sets.pop(table_id, None)
            self.status.pop(table_id, None)

    def resolve(self, table_id: str, resource: OptimizedTable) -> EffectiveSpec:
        """The table's effective spec from its own, its set's and its group's settings; recorded for
        its status. Raises `InheritedSettingsInvalid` when they do not merge into a valid spec."""
        namespace = resource.metadata.namespace
        group = self.engine.groups.get(self.engine.group_key(resource.spec.group, namespace))
        defaults = group_layer(group) if group is not None else None
        effective = effective_spec(resource.spec, [self._layer_of_set(table_id), defaults])
        with self._lock:
            self.status[table_id] = effective.status()
        return effective

    def _layer_of_set(self, table_id: str) -> SettingsLayer | None:
        with self._lock:
            key = self._table_sets.get(table_id)
            if key is None:
                return None
            if key in self._set_layers:
                return self._set_layers[key]
        namespace, name = key.split("/", 1)
        found = self.read_set(namespace, name)
        layer = None
        if found is not None:
            try:
                layer = _stored_set_layer(name, (found.get("spec") or {}).get("template"))
            except ValueError as exc:  # the API server validated it: a newer floe's fields, say
                log.warning("template of OptimizedTableSet %s not readable: %s", key, exc)
        with self._lock:
            return self._set_layers.setdefault(key, layer)
