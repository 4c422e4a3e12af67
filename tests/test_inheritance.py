"""Inherited settings: a table's own manifest, then its OptimizedTableSet's template, then its
OptimizerGroup's tableDefaults, then floe's defaults; and the status that shows where each came from."""

from __future__ import annotations

from typing import Any

import pytest

from floe.api.group import OptimizerGroup, OptimizerGroupSpec
from floe.api.inheritance import (
    OWN_SOURCE,
    InheritedSettingsInvalid,
    SettingsLayer,
    effective_spec,
    own_settings,
)
from floe.api.models import OptimizedTable
from floe.api.table import OptimizedTableSpec, OptimizedTableTemplate
from floe.controller.settings import InheritedSettings, owning_set
from floe.controller.status import merge_patch
from floe.optimizing.engine import OptimizingEngine
from floe.service.task_service import TaskService

SET = "OptimizedTableSet/lake"
GROUP = "OptimizerGroup/etl"


def _table(**settings: Any) -> OptimizedTableSpec:
    return OptimizedTableSpec.model_validate(
        {
            "table": "sales.orders",
            "catalog": {"name": "lake", "secretRef": "lake"},
            "group": "etl",
            **settings,
        }
    )


def _layer(source: str, **settings: Any) -> SettingsLayer | None:
    return SettingsLayer.of(source, OptimizedTableTemplate.model_validate(settings))


def test_the_closest_level_that_sets_a_field_wins() -> None:
    table = _table(quota=0.25)
    template = _layer(SET, quota=2.0, fragmentRatio=4, minor={"triggerInterval": "2h"})
    defaults = _layer(
        GROUP, quota=3.0, fragmentRatio=16, minTargetSizeRatio=0.5, minor={"triggerFileCount": 6}
    )
    effective = effective_spec(table, [template, defaults])
    spec = effective.spec
    assert (spec.quota, spec.fragment_ratio, spec.min_target_size_ratio) == (0.25, 4, 0.5)
    # Nested settings merge field by field: the set's interval, the group's count.
    assert (spec.minor.trigger_interval, spec.minor.trigger_file_count) == (7200.0, 6)
    assert spec.max_task_size == OptimizedTableSpec.model_fields["max_task_size"].default  # floe's
    assert effective.sources == {
        "quota": OWN_SOURCE,
        "fragmentRatio": SET,
        "minTargetSizeRatio": GROUP,
        "minor.triggerInterval": SET,
        "minor.triggerFileCount": GROUP,
    }
    # The table, its catalog and group are the table's own, whatever the levels say.
    assert (spec.table, spec.group, spec.catalog.secret_ref) == ("sales.orders", "etl", "lake")


def test_a_table_without_a_set_inherits_its_groups_defaults_and_none_is_floes() -> None:
    table = _table()
    assert own_settings(table) == {}
    spec = effective_spec(table, [None, _layer(GROUP, execute={"numRetries": 1})]).spec
    assert spec.execute.num_retries == 1
    assert effective_spec(table, []).spec == table


def test_an_explicit_null_takes_back_what_a_lower_level_set() -> None:
    retention = {"column": "ts", "olderThan": "30d", "interval": "2h"}
    defaults = _layer(GROUP, targetSize="64Mi", maintenance={"dataRetention": retention})
    table = _table(targetSize=None, maintenance={"dataRetention": None})
    effective = effective_spec(table, [None, defaults])
    assert effective.spec.target_size is None and effective.spec.maintenance.data_retention is None
    # The sources of the group's retention fields went with it.
    assert effective.sources == {"targetSize": OWN_SOURCE, "maintenance.dataRetention": OWN_SOURCE}
    # And a map set again above a null replaces it.
    template = _layer(SET, maintenance={"dataRetention": {"column": "day", "olderThan": "7d"}})
    nulled = _layer(GROUP, maintenance={"dataRetention": None})
    effective = effective_spec(_table(), [template, nulled])
    assert effective.spec.maintenance.data_retention is not None
    assert effective.spec.maintenance.data_retention.column == "day"
    assert effective.sources == {
        "maintenance.dataRetention.column": SET,
        "maintenance.dataRetention.olderThan": SET,
    }


def test_lists_are_replaced_whole() -> None:
    template = _layer(SET, clustering={"strategy": "zorder", "columns": ["a", "b"]})
    table = _table(clustering={"strategy": "zorder", "columns": ["c"]})
    clustering = effective_spec(table, [template]).spec.clustering
    assert clustering is not None and clustering.columns == ["c"]


def test_the_status_shows_every_setting_and_where_each_came_from() -> None:
    effective = effective_spec(_table(quota=0.25), [_layer(SET, minor={"triggerFileCount": 6})])
    status = effective.status()
    assert set(status) == {"effectiveSpec", "specSources"}
    shown = status["effectiveSpec"]
    assert (shown["quota"], shown["minor"], shown["maintenance"]["orphanFiles"]["olderThan"]) == (
        0.25,
        {"triggerFileCount": 6, "triggerInterval": "1h"},
        "3d",
    )
    assert not {"table", "catalog", "group"} & set(shown)
    # What the status shows is a valid template: the CRD's status schema is the template's.
    OptimizedTableTemplate.model_validate(shown)
    assert status["specSources"] == {"minor.triggerFileCount": SET, "quota": OWN_SOURCE}


def test_settings_that_do_not_merge_into_a_valid_spec_are_refused_naming_the_levels() -> None:
    bad = SettingsLayer(GROUP, {"quota": -1})  # as a newer or broken level might hold
    expected = r"'sales\.orders'.*quota \(OptimizerGroup/etl\): Input should be greater than 0"
    with pytest.raises(InheritedSettingsInvalid, match=expected):
        effective_spec(_table(), [None, bad])


def test_a_groups_table_defaults_take_the_bounds_of_a_table() -> None:
    with pytest.raises(ValueError, match=r"tableDefaults\.quota"):
        OptimizerGroupSpec.model_validate({"tableDefaults": {"quota": 0}})
    with pytest.raises(ValueError, match=r"tableDefaults\.table"):
        OptimizerGroupSpec.model_validate({"tableDefaults": {"table": "a.b"}})


def test_status_patches_take_away_the_keys_a_setting_no_longer_has() -> None:
    old = {"quota": 2.0, "maintenance": {"dataRetention": {"column": "ts"}, "orphanFiles": {"enabled": True}}}
    new = {"quota": 2.0, "maintenance": {"orphanFiles": {"enabled": False}}}
    assert merge_patch(old, new) == {
        "maintenance": {"dataRetention": None, "orphanFiles": {"enabled": False}}
    }
    assert merge_patch(None, new) == new and merge_patch(old, [1]) == [1]


# --------------------------------------------------------------------------------------------------
# The operator's record of what each table inherits (floe.controller.settings)


def _engine_with_group(defaults: dict[str, Any] | None) -> OptimizingEngine:
    engine = OptimizingEngine(TaskService(clock=lambda: 0.0), namespaced_groups=True)
    spec = {"tableDefaults": defaults} if defaults is not None else {}
    engine.apply_group(
        OptimizerGroup.model_validate(
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizerGroup",
                "metadata": {"name": "etl", "namespace": "analytics"},
                "spec": spec,
            }
        )
    )
    return engine


def _resource(name: str, **settings: Any) -> OptimizedTable:
    return OptimizedTable.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": name, "namespace": "analytics"},
            "spec": {"table": f"sales.{name}", "catalog": {"name": "lake"}, "group": "etl", **settings},
        }
    )


def test_a_table_reconciled_before_its_set_reads_the_set_at_once() -> None:
    """At a restart the handlers of tables and sets resume in any order: a table whose set the
    operator has not seen yet has the set read from the API server, once."""
    reads: list[tuple[str, str]] = []
    stored = {("analytics", "lake"): {"spec": {"template": {"quota": 2.0}}}}

    def read_set(namespace: str, name: str) -> dict[str, Any] | None:
        reads.append((namespace, name))
        return stored.get((namespace, name))

    settings = InheritedSettings(_engine_with_group({"quota": 3.0, "fragmentRatio": 4}), read_set)
    settings.use_set("analytics/orders", "lake")
    settings.use_set("analytics/returns", "lake")
    settings.use_set("analytics/events", None)
    assert settings.resolve("analytics/orders", _resource("orders")).spec.quota == 2.0
    assert settings.resolve("analytics/returns", _resource("returns")).spec.quota == 2.0
    assert settings.resolve("analytics/events", _resource("events")).spec.quota == 3.0
    assert reads == [("analytics", "lake")]
    assert settings.status["analytics/orders"]["specSources"] == {
        "fragmentRatio": "OptimizerGroup/etl",
        "quota": "OptimizedTableSet/lake",
    }
    # The set's handler then brings its template, and the tables to resolve again when it changed.
    assert settings.apply_set("analytics", "lake", {"quota": 2.0}) == []
    assert sorted(settings.apply_set("analytics", "lake", {"quota": 1.0})) == [
        "analytics/orders",
        "analytics/returns",
    ]
    assert settings.resolve("analytics/orders", _resource("orders")).spec.quota == 1.0
    # A set that is gone gives nothing; its table keeps its own and its group's settings.
    settings.use_set("analytics/orphan", "gone")
    assert settings.resolve("analytics/orphan", _resource("orphan", quota=0.25)).spec.quota == 0.25
    settings.forget("analytics/orders")
    assert "analytics/orders" not in settings.status


def test_owning_set_is_the_controlling_owner_of_that_kind() -> None:
    refs = [
        {"kind": "OptimizedTableSet", "name": "other", "controller": False},
        {"kind": "OptimizerGroup", "name": "etl", "controller": True},
        {"kind": "OptimizedTableSet", "name": "lake", "controller": True},
    ]
    assert owning_set(refs) == "lake" and owning_set(refs[:2]) is None and owning_set(None) is None
