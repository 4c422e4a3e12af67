"""kopf handlers of OptimizedTable: register with the engine, catalog Secrets, finalizer.

Status is not written here but by the batched flush (`floe.controller.status`); the
engine's events become Events through `Controller.on_engine_event`.

Restarts: on resume (a new operator process, or a follower that just became the leader)
the table's last minor/major/full optimizing times come back from its status, so interval
triggers and the balanced policy carry on as before. A process in flight at the restart is
abandoned: the new engine has no record of it, nothing of it is committed, a late
completion from its optimizer is refused (its token belongs to the old task service), and
the table is evaluated and planned afresh from the table's current snapshot.

Catalog Secrets: the properties in ``spec.catalog.secretRef`` are read when the table is
reconciled, and re-read by the leader every ``OperatorConfig.secret_interval_s``
(`Controller.refresh_catalog_secrets`: one GET per referenced Secret, whatever the number of
tables using it; no list or watch on Secrets, which the operator is not granted). A table
whose catalog properties changed is re-applied. Fixing a wrong Secret therefore heals its
tables without touching them; meanwhile their Degraded condition says what failed
(reason ``TableUnavailable``), with secret values masked.
"""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from floe.api.models import API_GROUP, OptimizedTable
from floe.controller.runtime import Controller, InvolvedObject, post_event
from floe.controller.secrets import with_catalog_properties
from floe.controller.status import epoch, restore_maintenance

VERSION = "v1alpha1"
PLURAL = "optimizedtables"
SECRET_RETRY_S = 15.0


def table_model(body: kopf.Body) -> OptimizedTable:
    """The resource as floe's model (status is the operator's own and is not validated)."""
    meta = body.metadata
    return OptimizedTable.model_validate(
        {
            "apiVersion": body.get("apiVersion"),
            "kind": "OptimizedTable",
            "metadata": {"name": meta.name, "namespace": meta.namespace},
            "spec": dict(body.get("spec") or {}),
        }
    )


@kopf.on.resume(API_GROUP, VERSION, PLURAL)
@kopf.on.create(API_GROUP, VERSION, PLURAL)
@kopf.on.update(API_GROUP, VERSION, PLURAL)
def reconcile_table(body: kopf.Body, status: kopf.Status, memo: kopf.Memo, **_: Any) -> None:
    """Create or update the table's runtime, catalog properties read from its Secret."""
    controller: Controller = memo.controller
    resource = table_model(body)
    meta = resource.metadata
    table_id = f"{meta.namespace}/{meta.name}"
    controller.tables[table_id] = InvolvedObject(
        str(body.get("apiVersion")), "OptimizedTable", meta.name, meta.namespace, body.metadata.uid or ""
    )
    secret = resource.spec.catalog.secret_ref
    mounted: dict[str, str] | None = None
    if secret:
        try:
            properties = controller.kube.read_secret(secret, meta.namespace)
        except ApiException as exc:
            message = f"catalog Secret {secret!r}: {exc.reason}"
            post_event(controller, body, "Warning", reason="CatalogSecretUnavailable", message=message)
            raise kopf.TemporaryError(message, delay=SECRET_RETRY_S) from None
        controller.redact.add(properties)
        mounted = controller.mounted_secret_properties(resource, properties)
        resource = with_catalog_properties(resource, properties)
    controller.redact.add(resource.spec.catalog.properties)  # inline credentials too
    with controller.apply_lock:  # against a concurrent Secret refresh applying an older spec
        controller.resources[table_id] = table_model(body)
        known = table_id in controller.engine.runtimes
        runtime = controller.engine.apply_table(resource, secret_properties=mounted)
        if not known and status:
            controller.flusher.seed(table_id, status)
            runtime.last_minor_s = runtime.last_minor_s or epoch(status.get("lastMinorOptimizing"))
            runtime.last_major_s = runtime.last_major_s or epoch(status.get("lastMajorOptimizing"))
            runtime.last_full_s = runtime.last_full_s or epoch(status.get("lastFullOptimizing"))
            restore_maintenance(runtime, status)
            # Re-applying hands the restored last-optimized time to the group's scheduler.
            controller.engine.apply_table(resource)


@kopf.on.delete(API_GROUP, VERSION, PLURAL)
def remove_table(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """The finalizer: the engine forgets the table (an in-flight process is cancelled uncommitted)."""
    controller: Controller = memo.controller
    table_id = f"{body.metadata.namespace}/{body.metadata.name}"
    with controller.apply_lock:
        controller.resources.pop(table_id, None)
        controller.engine.remove_table(table_id)
    controller.flusher.forget(table_id)
    controller.tables.pop(table_id, None)
