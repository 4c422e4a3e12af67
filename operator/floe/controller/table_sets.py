"""kopf handlers of OptimizedTableSet: one OptimizedTable per catalog table the set selects.

At creation, at every change of the set (its spec, labels or annotations: annotating it is how
a user asks for a listing now) and every ``spec.listInterval`` (checked by a timer), the operator
lists the set's catalog and makes the set's OptimizedTables agree with it:

* a selected table without one gets one, named after the table (`table_resource_name`), owned
  by the set (deleting the set deletes them: Kubernetes' garbage collector) and labelled
  ``floe.dev/table-set=<set>``; its spec holds the table and the set's catalog and group, which
  the set keeps as its own. The table inherits the set's template (`floe.api.inheritance`): what
  its own spec sets wins, and a changed template reaches it at once, without a rewrite;
* a selected table that another OptimizedTable already serves (the same catalog and table,
  written by hand or by another set) is left to that one: the closest definition wins. If the set
  had made one before, the set's goes;
* the set's OptimizedTable of a table no longer selected, or dropped from the catalog, goes,
  with a ``TableRemoved`` Event on the set.

A periodic listing whose last one changed nothing reads the catalog only, while no OptimizedTable
changed since (`floe.controller.quiet_listing`): at 10,000 tables, reading them all every
``listInterval`` was a fifth of the idle operator's time.

A catalog that cannot be listed (its Secret unreadable, the catalog down) changes nothing: the
set's ``CatalogReady`` condition turns False with the reason, and a ``ListFailed`` Warning Event
is posted when that reason first appears. A table renamed in the catalog is followed when a
listing finds the table UUID of one of the set's tables (recorded in its status by the engine)
under a new identifier: its OptimizedTable keeps its name, status and own settings and takes the
new identifier, with a ``TableRenamed`` Event; a catalog whose renames cannot be seen that way
(the table gone before its UUID was recorded) shows one table dropped and another selected.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import kopf
from pyiceberg.catalog import Catalog

from floe.api.meta import clip
from floe.api.models import API_GROUP, API_VERSION, TABLE_PLURAL, TABLE_SET_PLURAL, VERSION
from floe.api.table import SET_OWN_FIELDS, OptimizedTableSpec
from floe.api.table_set import OptimizedTableSet
from floe.controller.controller import Controller
from floe.controller.kube import Manifest
from floe.controller.quiet_listing import QuietListing
from floe.controller.secrets import CatalogSecretError, read_catalog_properties
from floe.controller.status import condition, epoch, timestamp, with_transition_times
from floe.controller.tables import resource_model
from floe.tables.catalog import open_catalog
from floe.tables.selection import (
    TableSelector,
    claim_tables,
    list_table_identifiers,
    set_table_manifest,
    table_resource_name,
)

log = logging.getLogger(__name__)

RELIST_CHECK_S = 10.0
"""How often the timer asks whether a set's listInterval has passed since its last listing."""


@dataclass
class SetPlan:
    """What to change so that a set's OptimizedTables agree with its selected tables."""

    create: list[Manifest] = field(default_factory=list)
    update: dict[str, Manifest] = field(default_factory=dict)
    """The set's existing OptimizedTables whose table, catalog or group is not the set's, by name:
    those fields, as the set gives them."""
    delete: list[str] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)
    """Selected tables another OptimizedTable serves."""
    renamed: dict[str, str] = field(default_factory=dict)
    """The set's OptimizedTables whose table was renamed, by name: the table's new identifier."""
    managed: int = 0


def owner_reference(name: str, uid: str) -> Manifest:
    """The ownerReference that makes a set's OptimizedTables go with it."""
    return {
        "apiVersion": API_VERSION,
        "kind": "OptimizedTableSet",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _owned_by(resource: Manifest, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in resource.get("metadata", {}).get("ownerReferences") or [])


def plan_table_set(
    table_set: OptimizedTableSet,
    uid: str,
    selected: list[str],
    existing: list[Manifest],
    table_uuid: Callable[[str], str | None] = lambda identifier: None,
) -> SetPlan:
    """The changes that bring `existing` (the OptimizedTables of the set's namespace) to one
    OptimizedTable per `selected` table, each owned by the set unless another one serves it.

    A table of the set's that left the catalog while a new one appeared with its UUID
    (`table_uuid` of a new identifier; the old one's is in its status) was renamed: its
    OptimizedTable follows it, keeping its name, its history and the settings added to it.
    """
    owned = [r for r in existing if _owned_by(r, uid)]
    others = [r for r in existing if not _owned_by(r, uid) and not r["metadata"].get("deletionTimestamp")]
    served_elsewhere = {_catalog_table(r) for r in others}
    taken_names = {r["metadata"]["name"] for r in others}
    mine, claimed = claim_tables(table_set.spec.catalog.name, selected, served_elsewhere, taken_names)
    plan = SetPlan(claimed=claimed, managed=len(mine))
    serving = {str((r.get("spec") or {}).get("table")): r for r in owned}
    new = [identifier for identifier in mine.values() if identifier not in serving]
    gone = {r["metadata"]["name"]: r for table, r in serving.items() if table not in mine.values()}
    plan.renamed = _renamed(gone, new, table_uuid)
    for identifier in mine.values():
        current = serving.get(identifier)
        if current is not None and (
            changes := _identity_changes(current, table_set.spec.table_spec(identifier))
        ):
            plan.update[current["metadata"]["name"]] = changes
    held = {r["metadata"]["name"] for r in owned}
    for identifier in [i for i in new if i not in plan.renamed.values()]:
        # A name an OptimizedTable of the set holds for another table (one renamed away) stays
        # its own: the new table takes the distinct form of its name.
        name = table_resource_name(identifier, distinct=table_resource_name(identifier) in held)
        manifest = set_table_manifest(table_set, name, identifier)
        manifest["metadata"]["ownerReferences"] = [owner_reference(table_set.metadata.name, uid)]
        plan.create.append(manifest)
    plan.delete = sorted(set(gone) - set(plan.renamed))
    return plan


def _renamed(
    gone: Mapping[str, Manifest], new: list[str], table_uuid: Callable[[str], str | None]
) -> dict[str, str]:
    """Which OptimizedTables of `gone` (by name) serve a table now listed as one of `new`: the
    same table UUID. The new tables are loaded only when a table with a known UUID went."""
    by_uuid = {uuid: name for name, r in gone.items() if (uuid := (r.get("status") or {}).get("tableUuid"))}
    renamed: dict[str, str] = {}
    for identifier in new if by_uuid else []:
        name = by_uuid.pop(table_uuid(identifier) or "", None)
        if name is not None:
            renamed[name] = identifier
    return renamed


def _catalog_table(resource: Manifest) -> tuple[str | None, str | None]:
    spec = resource.get("spec") or {}
    return (spec.get("catalog") or {}).get("name"), spec.get("table")


def _identity_changes(resource: Manifest, desired: OptimizedTableSpec) -> Manifest:
    """The fields the set gives its OptimizedTable (table, catalog, group) where `resource` differs
    from `desired`; its other fields are the table's own settings, which the set leaves alone."""
    try:
        current: OptimizedTableSpec | None = OptimizedTableSpec.model_validate(resource.get("spec") or {})
    except ValueError:
        current = None
    wanted = {
        "table": desired.table,
        "catalog": desired.catalog.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        "group": desired.group,
    }
    return {
        key: wanted[key]
        for key in SET_OWN_FIELDS
        if current is None or getattr(current, key) != getattr(desired, key)
    }


def sync_table_set(
    controller: Controller, body: kopf.Body, status: Any, periodic: bool = False
) -> dict[str, Any]:
    """List the set's catalog and bring its OptimizedTables in line; what to merge into the set's
    status (a failed listing leaves the last listing's counts as they are). A `periodic` listing
    reads the OptimizedTables only when that may change something (`QuietListing`)."""
    table_set = resource_model(body, OptimizedTableSet)
    meta = table_set.metadata
    uid = body.metadata.uid or ""
    involved = {"apiVersion": API_VERSION, "kind": "OptimizedTableSet", "name": meta.name}
    involved |= {"namespace": meta.namespace, "uid": uid}
    previous = dict(status or {})
    now = time.time()
    counts: dict[str, int] = {}
    try:
        catalog = _open_catalog(controller, table_set)
        identifiers = list_table_identifiers(catalog)
    except Exception as exc:  # the Secret, the catalog: whatever fails, nothing is removed
        message = clip(controller.redact(f"cannot list catalog {table_set.spec.catalog.name!r}: {exc}"))
        reason = exc.problem.reason if isinstance(exc, CatalogSecretError) else "ListFailed"
        old = {c.get("type"): c for c in previous.get("conditions") or []}.get("CatalogReady") or {}
        if old.get("reason") != reason or old.get("status") != "False":
            controller.events.post(involved, "Warning", "ListFailed", message)
        log.warning("table set %s/%s: %s", meta.namespace, meta.name, message)
        ready = condition("CatalogReady", False, reason, message)
    else:
        selected = TableSelector(table_set.spec.include, table_set.spec.exclude).select(identifiers)
        quiet = controller.quiet_listings.get(uid) if periodic else None
        generation = body.metadata.get("generation")
        if quiet is not None and quiet.still_holds(generation, selected, controller.table_changes, now):
            counts, message = quiet.counts, quiet.message
        else:
            listed = QuietListing(generation, frozenset(selected), controller.table_changes, now)
            counts, message = _list_tables(controller, table_set, uid, catalog, selected, listed, involved)
        message = f"{len(selected)} tables selected of {len(identifiers)} listed; {message}"
        ready = condition("CatalogReady", True, "Listed", f"listed {len(identifiers)} tables")
    return {
        **counts,
        "observedGeneration": body.metadata.get("generation"),
        "lastListed": timestamp(now),
        "message": message,
        "conditions": with_transition_times([ready], previous.get("conditions"), lambda: now),
    }


def _list_tables(
    controller: Controller,
    table_set: OptimizedTableSet,
    uid: str,
    catalog: Catalog,
    selected: list[str],
    listing: QuietListing,
    involved: Manifest,
) -> tuple[dict[str, int], str]:
    """Read the OptimizedTables of the set's namespace and make those of the set agree with the
    `selected` tables; the set's counts and what serves its tables. If that changed nothing,
    `listing` (its `table_changes` read before: a table applied meanwhile makes the next listing
    a full one) is kept as the set's `QuietListing`."""
    existing = controller.kube.list_custom(TABLE_PLURAL, table_set.metadata.namespace)
    plan = plan_table_set(table_set, uid, selected, existing, lambda identifier: _uuid(catalog, identifier))
    _carry_out(controller, plan, table_set.metadata.namespace, involved)
    counts = {
        "matchedTables": len(selected),
        "managedTables": plan.managed,
        "claimedTables": len(plan.claimed),
    }
    message = f"{plan.managed} served by this set" + (
        f", {len(plan.claimed)} by other OptimizedTables" if plan.claimed else ""
    )
    if plan.create or plan.update or plan.delete or plan.renamed:
        controller.quiet_listings.pop(uid, None)
    else:
        controller.quiet_listings[uid] = replace(listing, counts=counts, message=message)
    return counts, message


def _carry_out(controller: Controller, plan: SetPlan, namespace: str, involved: Manifest) -> None:
    """Make the plan's changes to the set's OptimizedTables, with an Event per table followed to
    its new name and per table removed."""
    for name, identifier in plan.renamed.items():
        controller.kube.set_custom_spec_fields(TABLE_PLURAL, name, namespace, {"table": identifier})
        renamed = (
            f"OptimizedTable {name}: its table was renamed to {identifier} (the same table UUID): followed"
        )
        controller.events.post(involved, "Normal", "TableRenamed", renamed)
    for manifest in plan.create:
        controller.kube.create_custom(TABLE_PLURAL, namespace, manifest)
    for name, fields in plan.update.items():
        controller.kube.set_custom_spec_fields(TABLE_PLURAL, name, namespace, fields)
    for name in plan.delete:
        controller.kube.delete_custom(TABLE_PLURAL, name, namespace)
        removed = f"OptimizedTable {name}: its table is no longer selected or was dropped"
        controller.events.post(involved, "Normal", "TableRemoved", removed)


def _open_catalog(controller: Controller, table_set: OptimizedTableSet) -> Catalog:
    catalog = table_set.spec.catalog
    if catalog.secret_ref is not None:
        secret = read_catalog_properties(controller.kube, catalog.secret_ref, table_set.metadata.namespace)
        catalog = catalog.with_properties_under(secret)
    controller.redact.add(catalog.properties, catalog.secret_properties)
    return open_catalog(catalog)


def _uuid(catalog: Catalog, identifier: str) -> str | None:
    """The table's UUID; None when it cannot be loaded (it is then taken for a new table)."""
    try:
        return str(catalog.load_table(identifier).metadata.table_uuid)
    except Exception as exc:  # whatever the catalog says, the table is not followed
        log.warning("table %s not loaded to compare its UUID: %s", identifier, exc)
        return None


@kopf.on.resume(API_GROUP, VERSION, TABLE_SET_PLURAL)
@kopf.on.create(API_GROUP, VERSION, TABLE_SET_PLURAL)
@kopf.on.update(API_GROUP, VERSION, TABLE_SET_PLURAL)
def reconcile_table_set(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    """List the catalog now: the set is new, changed, or the operator (re)started; a changed
    template reaches the set's tables at once."""
    controller: Controller = memo.controller
    template = (body.get("spec") or {}).get("template")
    controller.apply_table_set(body.metadata.namespace or "default", body.metadata.name or "", template)
    patch.status.update(sync_table_set(controller, body, status))


@kopf.timer(API_GROUP, VERSION, TABLE_SET_PLURAL, interval=RELIST_CHECK_S, initial_delay=RELIST_CHECK_S)
def relist_table_set(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    """List the catalog again once the set's listInterval has passed since its last listing."""
    last = epoch(dict(status or {}).get("lastListed"))
    interval = resource_model(body, OptimizedTableSet).spec.list_interval
    if last is None or time.time() - last >= interval:
        patch.status.update(sync_table_set(memo.controller, body, status, periodic=True))
