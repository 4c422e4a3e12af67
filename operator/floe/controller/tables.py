"""kopf handlers of OptimizedTable: register with the engine, catalog Secrets, finalizer.

Status is not written here but by the batched flush (`floe.controller.status`); the
engine's events become Events through `ControllerEvents.on_engine_event`.

Restarts: on resume (a new operator process, or a follower that just became the leader)
the table's last minor/major/full optimizing times come back from its status, so interval
triggers and the balanced policy carry on as before. A process in flight at the restart is
abandoned: the new engine has no record of it, nothing of it is committed, a late
completion from its optimizer is refused (its token belongs to the old task service), and
the table is evaluated and planned afresh from the table's current snapshot.

Catalog Secrets: the properties in ``spec.catalog.secretRef`` are read when the table is
reconciled, and re-read by the leader every ``OperatorConfig.secret_interval_s``
(`CatalogSecretRefresher.refresh`: one GET per referenced Secret, whatever the number of
tables using it; no list or watch on Secrets, which the operator is not granted). A table
whose catalog properties changed is re-applied. Fixing a wrong Secret therefore heals its
tables without touching them; meanwhile their Degraded condition says what failed
(reason ``TableUnavailable``), with secret values masked. A Secret that is missing or cannot
be read is the table's ``CatalogReady`` condition (``SecretNotFound``, ``SecretUnreadable``),
written even for a table that never reached the engine, with a Warning Event naming it; the
table is applied as soon as the refresh can read it (`floe.controller.status` has the rule).
"""

from __future__ import annotations

from typing import Any, TypeVar

import kopf

from floe.api.models import API_GROUP, TABLE_PLURAL, VERSION, OptimizedTable
from floe.api.table_set import OptimizedTableSet
from floe.controller.controller import Controller
from floe.controller.events import InvolvedObject
from floe.controller.settings import owning_set

Model = TypeVar("Model", OptimizedTable, OptimizedTableSet)


def resource_model(body: kopf.Body, model: type[Model]) -> Model:
    """The resource as floe's model of its kind (status is the operator's own and is not validated)."""
    meta = body.metadata
    return model.model_validate(
        {
            "apiVersion": body.get("apiVersion"),
            "kind": model.__name__,
            "metadata": {"name": meta.name, "namespace": meta.namespace},
            "spec": dict(body.get("spec") or {}),
        }
    )


@kopf.on.resume(API_GROUP, VERSION, TABLE_PLURAL)
@kopf.on.create(API_GROUP, VERSION, TABLE_PLURAL)
@kopf.on.update(API_GROUP, VERSION, TABLE_PLURAL)
def reconcile_table(body: kopf.Body, status: kopf.Status, memo: kopf.Memo, **_: Any) -> None:
    """Create or update the table's runtime, catalog properties read from its Secret, settings
    inherited from the OptimizedTableSet that made it (if one did) and its group.

    A Secret that cannot be read does not fail the handler (kopf would post an Event at every
    retry): the controller records it as the table's CatalogReady condition and retries it
    itself (`Controller.reconcile_table`).
    """
    controller: Controller = memo.controller
    resource = resource_model(body, OptimizedTable)
    meta = resource.metadata
    involved = InvolvedObject(
        str(body.get("apiVersion")), "OptimizedTable", meta.name, meta.namespace, body.metadata.uid or ""
    )
    table_set = owning_set(body.metadata.get("ownerReferences"))
    controller.reconcile_table(
        f"{meta.namespace}/{meta.name}", involved, resource, dict(status or {}), table_set
    )


@kopf.on.delete(API_GROUP, VERSION, TABLE_PLURAL)
def remove_table(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """The finalizer: the engine forgets the table (an in-flight process is cancelled uncommitted)."""
    controller: Controller = memo.controller
    controller.forget_table(f"{body.metadata.namespace}/{body.metadata.name}")
