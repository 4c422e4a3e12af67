"""OptimizedTableSet: patterns, names, catalog listing, the operator's plan, and `floe run`'s
expansion of a set into tables (a real SQLite catalog with nested namespaces)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pydantic import ValidationError
from pyiceberg.catalog.sql import SqlCatalog

from floe.api.inheritance import SettingsLayer, effective_spec, own_settings
from floe.api.meta import DNS1123_SUBDOMAIN
from floe.api.models import resource_from_dict
from floe.api.table import OptimizedTableSpec
from floe.api.table_set import TABLE_SET_LABEL, OptimizedTableSet
from floe.controller.quiet_listing import FULL_LISTING_INTERVAL_S, QuietListing
from floe.controller.table_sets import owner_reference, plan_table_set
from floe.local.run import ManifestWatcher
from floe.tables.selection import TableSelector, list_table_identifiers, table_resource_name

UID = "0b9e2a4c-set"
IDENTIFIERS = [
    "sales.orders",
    "sales.tmp_orders",
    "sales.eu.orders",
    "sales.eu.fr.returns",
    "raw.events",
    "raw.event2",
    "Finance.Ledger",
]


def _table_set(**spec: Any) -> OptimizedTableSet:
    document = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTableSet",
        "metadata": {"name": "lake", "namespace": "analytics"},
        "spec": {"catalog": {"name": "demo", "secretRef": "demo-catalog"}, "include": ["**"], **spec},
    }
    table_set = resource_from_dict(document)
    assert isinstance(table_set, OptimizedTableSet)
    return table_set


@pytest.mark.parametrize(
    ("include", "exclude", "expected"),
    [
        (["sales.*"], [], ["sales.orders", "sales.tmp_orders"]),
        (["sales.**"], ["*.tmp_*"], ["sales.eu.fr.returns", "sales.eu.orders", "sales.orders"]),
        (["sales.*.*"], [], ["sales.eu.orders"]),
        (["raw.event?"], [], ["raw.event2", "raw.events"]),
        (["raw.event[!2]", "raw.events"], [], ["raw.events"]),
        (["raw.event[0-9]"], [], ["raw.event2"]),
        (["raw.event[-s]"], [], ["raw.events"]),  # a '-' first or last is itself
        (["**"], ["sales.**", "raw.*"], ["Finance.Ledger"]),
        (["finance.*"], [], []),  # identifiers are case-sensitive, as catalogs keep them
        (["**.orders"], [], ["sales.eu.orders", "sales.orders"]),
    ],
)
def test_patterns_select_as_documented(include: list[str], exclude: list[str], expected: list[str]) -> None:
    assert TableSelector(include, exclude).select(IDENTIFIERS) == expected


@pytest.mark.parametrize(
    "pattern", ["sales..orders", ".sales", "sales.[x", "sales.x]", "a b", "sales.[]", ""]
)
def test_bad_patterns_are_refused_naming_the_field(pattern: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _table_set(include=["sales.*", pattern])
    assert caught.value.errors()[0]["loc"] == ("spec", "include", 1)


def test_a_template_takes_the_bounds_of_the_table_it_becomes() -> None:
    with pytest.raises(ValidationError) as caught:
        _table_set(template={"quota": 0})
    assert caught.value.errors()[0]["loc"] == ("spec", "template", "quota")
    with pytest.raises(ValidationError):
        _table_set(template={"table": "a.b"})  # the set names its tables itself
    with pytest.raises(ValidationError):
        _table_set(listInterval="0s")
    table_set = _table_set(group="etl", template={"quota": 2.0, "minor": {"triggerFileCount": 4}})
    table = table_set.spec.table_spec("sales.orders")
    assert (table.table, table.group, table.catalog.secret_ref) == ("sales.orders", "etl", "demo-catalog")
    # The template is inherited, not copied: the table's own spec sets nothing else.
    assert own_settings(table) == {}
    template = SettingsLayer.of("OptimizedTableSet/lake", table_set.spec.template)
    effective = effective_spec(table, [template]).spec
    assert (effective.quota, effective.minor.trigger_file_count) == (2.0, 4)
    # Unset template fields are floe's defaults, not copies of some value.
    assert effective.major == OptimizedTableSpec.model_fields["major"].get_default(call_default_factory=True)


def test_table_names_are_the_identifier_or_a_distinct_readable_form() -> None:
    assert table_resource_name("sales.orders") == "sales.orders"
    names = {table_resource_name(i) for i in ("Sales.Orders", "sales.Orders", "db.my_table", "db.my-table_")}
    assert len(names) == 4
    long = table_resource_name("n" * 200 + "." + "T" * 255)
    for name in (*names, long):
        assert len(name) <= 253 and re.fullmatch(DNS1123_SUBDOMAIN, name), name
    assert table_resource_name("db.my_table").startswith("db.my-table-")


@pytest.fixture
def nested_catalog(tmp_path: Path) -> SqlCatalog:
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    for namespace in (("sales",), ("sales", "eu"), ("sales", "eu", "fr"), ("raw",), ("empty",)):
        catalog.create_namespace(namespace)
    for identifier in ("sales.orders", "sales.eu.orders", "sales.eu.fr.returns", "raw.events"):
        catalog.create_table(identifier, pa.schema([("id", pa.int64())]))
    return catalog


def test_listing_walks_nested_namespaces(nested_catalog: SqlCatalog) -> None:
    assert list_table_identifiers(nested_catalog) == [
        "raw.events",
        "sales.eu.fr.returns",
        "sales.eu.orders",
        "sales.orders",
    ]


def _owned(name: str, identifier: str, spec: OptimizedTableSpec) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "ownerReferences": [owner_reference("lake", UID)]},
        # As the API server returns it: the group's default filled in.
        "spec": {"group": "default", **spec.model_dump(mode="json", by_alias=True, exclude_unset=True)},
    }


def test_plan_creates_one_owned_table_per_selected_table() -> None:
    table_set = _table_set(include=["sales.**"], template={"quota": 2.0})
    plan = plan_table_set(table_set, UID, ["sales.orders", "sales.eu.orders"], [])
    assert [m["metadata"]["name"] for m in plan.create] == ["sales.orders", "sales.eu.orders"]
    created = plan.create[0]
    assert created["metadata"]["ownerReferences"] == [owner_reference("lake", UID)]
    assert created["metadata"]["labels"] == {TABLE_SET_LABEL: "lake"}
    assert created["metadata"]["namespace"] == "analytics"
    # The template is inherited (floe.api.inheritance), not copied into the table's spec.
    assert created["spec"] == {
        "table": "sales.orders",
        "catalog": {"name": "demo", "secretRef": "demo-catalog"},
    }
    assert (plan.update, plan.delete, plan.claimed, plan.managed) == ({}, [], [], 2)


def test_plan_follows_the_catalog_and_group_and_leaves_the_tables_own_settings() -> None:
    before = _table_set(template={"quota": 2.0})
    orders = _owned("sales.orders", "sales.orders", before.spec.table_spec("sales.orders"))
    orders["spec"]["minor"] = {"triggerInterval": "2h"}  # the user's own setting on the set's table
    existing = [orders, _owned("raw.events", "raw.events", before.spec.table_spec("raw.events"))]
    unchanged = plan_table_set(before, UID, ["raw.events", "sales.orders"], existing)
    assert (unchanged.create, unchanged.update, unchanged.delete) == ([], {}, [])
    # A template change needs no write: the tables inherit it.
    retemplated = _table_set(template={"quota": 1.0})
    assert plan_table_set(retemplated, UID, ["raw.events", "sales.orders"], existing).update == {}
    after = _table_set(template={"quota": 1.0}, group="etl", catalog={"name": "demo", "secretRef": "other"})
    plan = plan_table_set(after, UID, ["sales.orders"], existing)  # raw.events was dropped
    # Only the set's own fields are written: the table's minor setting stays its own.
    assert plan.update == {
        "sales.orders": {"catalog": {"name": "demo", "secretRef": "other"}, "group": "etl"}
    }
    assert plan.delete == ["raw.events"]


def test_a_renamed_table_is_followed_by_its_uuid() -> None:
    table_set = _table_set()
    orders = _owned("sales.orders", "sales.orders", table_set.spec.table_spec("sales.orders"))
    orders["status"] = {"tableUuid": "uuid-orders"}
    orders["spec"]["quota"] = 0.25  # a setting of the table's own, which the rename keeps
    events = _owned("raw.events", "raw.events", table_set.spec.table_spec("raw.events"))
    events["status"] = {"tableUuid": "uuid-events"}
    uuids = {"sales.orders_v2": "uuid-orders", "raw.clicks": "uuid-clicks"}
    loaded: list[str] = []

    def table_uuid(identifier: str) -> str | None:
        loaded.append(identifier)
        return uuids.get(identifier)

    selected = ["raw.clicks", "sales.orders_v2"]  # sales.orders renamed, raw.events dropped
    plan = plan_table_set(table_set, UID, selected, [orders, events], table_uuid)
    assert plan.renamed == {"sales.orders": "sales.orders_v2"}
    assert [m["spec"]["table"] for m in plan.create] == ["raw.clicks"]
    assert (plan.delete, plan.update, plan.managed) == (["raw.events"], {}, 2)
    assert sorted(loaded) == ["raw.clicks", "sales.orders_v2"]

    # Followed: the OptimizedTable keeps its name and serves the new identifier from now on.
    orders["spec"]["table"] = "sales.orders_v2"
    loaded.clear()
    steady = plan_table_set(table_set, UID, selected, [orders], table_uuid)
    assert (steady.renamed, steady.update, steady.delete) == ({}, {}, [])
    assert [m["spec"]["table"] for m in steady.create] == ["raw.clicks"]
    assert loaded == []  # nothing went: no table is loaded for its UUID
    # A new table under the old name gets the distinct form of it: the old one is held.
    again = plan_table_set(table_set, UID, [*selected, "sales.orders"], [orders], table_uuid)
    created = {m["spec"]["table"]: m["metadata"]["name"] for m in again.create}
    assert created["sales.orders"].startswith("sales.orders-") and again.delete == []


def test_a_table_whose_uuid_is_unknown_or_different_is_dropped_and_the_new_one_made() -> None:
    table_set = _table_set()
    orders = _owned("sales.orders", "sales.orders", table_set.spec.table_spec("sales.orders"))
    plan = plan_table_set(table_set, UID, ["sales.orders_v2"], [orders], lambda i: "uuid-orders")
    assert (plan.renamed, plan.delete) == ({}, ["sales.orders"])  # its UUID was never recorded
    orders["status"] = {"tableUuid": "uuid-orders"}
    plan = plan_table_set(table_set, UID, ["sales.orders_v2"], [orders], lambda i: "uuid-other")
    assert (plan.renamed, plan.delete) == ({}, ["sales.orders"])
    assert [m["spec"]["table"] for m in plan.create] == ["sales.orders_v2"]


def test_a_table_served_by_another_optimized_table_is_left_to_it() -> None:
    table_set = _table_set()
    theirs = {
        "metadata": {"name": "orders-by-hand"},
        "spec": {"table": "sales.orders", "catalog": {"name": "demo"}, "quota": 4.0},
    }
    # Same name as the set would give, another table: the name is taken.
    clash = {"metadata": {"name": "raw.events"}, "spec": {"table": "raw.other", "catalog": {"name": "demo"}}}
    mine = _owned("sales.orders", "sales.orders", table_set.spec.table_spec("sales.orders"))
    plan = plan_table_set(table_set, UID, ["raw.events", "sales.orders"], [theirs, clash, mine])
    assert plan.claimed == ["raw.events", "sales.orders"]
    assert plan.create == [] and plan.delete == ["sales.orders"] and plan.managed == 0
    # The same table in another catalog is another table.
    elsewhere = {**theirs, "spec": {**theirs["spec"], "catalog": {"name": "other"}}}
    assert [
        m["spec"]["table"] for m in plan_table_set(table_set, UID, ["sales.orders"], [elsewhere]).create
    ] == ["sales.orders"]
    # One being deleted no longer serves it.
    going = {**theirs, "metadata": {**theirs["metadata"], "deletionTimestamp": "2026-11-26T00:00:00Z"}}
    assert plan_table_set(table_set, UID, ["sales.orders"], [going]).claimed == []


def _write(path: Path, documents: list[dict[str, Any]]) -> None:
    path.write_text(yaml.safe_dump_all(documents))


def test_floe_run_expands_a_set_and_a_hand_written_table_wins(
    nested_catalog: SqlCatalog, tmp_path: Path
) -> None:
    properties = {"type": "sql", **{k: str(v) for k, v in nested_catalog.properties.items()}}
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    table_set = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTableSet",
        "metadata": {"name": "lake"},
        "spec": {
            "catalog": {"name": "lake", "properties": properties},
            "include": ["sales.**", "raw.*"],
            "exclude": ["sales.eu.fr.*"],
            "template": {"quota": 2.0, "minor": {"triggerInterval": "2h"}},
            "listInterval": "1h",
        },
    }
    group = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizerGroup",
        "metadata": {"name": "default"},
        "spec": {"tableDefaults": {"quota": 3.0, "fragmentRatio": 4, "minor": {"triggerFileCount": 6}}},
    }
    by_hand = {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTable",
        "metadata": {"name": "events"},
        "spec": {"table": "raw.events", "catalog": {"name": "lake", "properties": properties}, "quota": 0.25},
    }
    _write(manifests / "lake.yaml", [table_set, by_hand, group])
    watcher = ManifestWatcher(manifests, None)
    assert watcher.changed()
    _, tables = watcher.load()
    by_table = {t.spec.table: t for t in tables}
    assert sorted(by_table) == ["raw.events", "sales.eu.orders", "sales.orders"]
    assert by_table["sales.orders"].metadata.labels == {TABLE_SET_LABEL: "lake"}
    # Each setting from the closest level that sets it: the table, its set, its group, floe.
    events, orders = by_table["raw.events"].spec, by_table["sales.orders"].spec
    assert by_table["raw.events"].metadata.name == "events"
    assert (events.quota, events.fragment_ratio, events.minor.trigger_interval) == (0.25, 4, 3600.0)
    assert (orders.quota, orders.fragment_ratio, orders.minor.trigger_interval) == (2.0, 4, 7200.0)
    assert orders.minor.trigger_file_count == events.minor.trigger_file_count == 6
    assert orders.min_target_size_ratio == 0.75
    assert not watcher.changed()  # nothing edited, the listing not due for an hour

    # An edited group default reaches the tables at the next load.
    group["spec"]["tableDefaults"]["fragmentRatio"] = 16
    _write(manifests / "lake.yaml", [table_set, by_hand, group])
    assert watcher.changed()
    _, tables = watcher.load()
    assert {t.spec.fragment_ratio for t in tables} == {16}

    # A catalog that cannot be listed keeps the tables as last listed, and says why.
    nested_catalog.create_table("sales.returns", pa.schema([("id", pa.int64())]))
    table_set["spec"]["catalog"]["properties"] = {**properties, "uri": f"sqlite:///{tmp_path}/gone/x.db"}
    table_set["spec"]["listInterval"] = "1s"
    _write(manifests / "lake.yaml", [table_set, by_hand, group])
    assert watcher.changed()
    _, tables = watcher.load()
    assert sorted(t.spec.table for t in tables) == ["raw.events", "sales.eu.orders", "sales.orders"]
    assert "cannot list catalog 'lake'" in watcher.problems["default/lake"]
    # Listed again once reachable: the new table joins.
    table_set["spec"]["catalog"]["properties"] = properties
    _write(manifests / "lake.yaml", [table_set, by_hand, group])
    assert watcher.changed()
    _, tables = watcher.load()
    assert "sales.returns" in {t.spec.table for t in tables} and not watcher.problems


def test_a_quiet_listing_holds_while_the_set_its_tables_and_the_catalog_stay_as_they_were() -> None:
    listing = QuietListing(3, frozenset({"sales.orders", "raw.events"}), table_changes=10, listed_s=1000.0)
    assert listing.still_holds(3, ["raw.events", "sales.orders"], 10, 1000.0 + 600)
    assert not listing.still_holds(4, ["raw.events", "sales.orders"], 10, 1600.0)  # the set changed
    assert not listing.still_holds(3, ["sales.orders"], 10, 1600.0)  # the catalog lists other tables
    assert not listing.still_holds(3, ["raw.events", "sales.orders"], 11, 1600.0)  # a table changed
    assert not listing.still_holds(3, ["raw.events", "sales.orders"], 10, 1000.0 + FULL_LISTING_INTERVAL_S)
