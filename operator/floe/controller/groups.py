"""kopf handlers of OptimizerGroup: driver pod, Service, ConfigMaps, scaling, status and Events.

A spec change that needs a new driver (image, cores, memory, executor template) replaces
the driver pod; a change of ``spec.executors`` (an edit, ``kubectl scale``, an HPA) only
rewrites the scale ConfigMap, which the running driver follows (`floe_optimizer.driver`).

The engine knows a group as ``namespace/name`` (`OptimizingEngine.group_key`), so groups of
the same name in two namespaces are two groups, and a table uses the one of its own
namespace. Deleting a group removes it from the engine before the group goes (kopf's
finalizer, which the status timer needs anyway): its processes are cancelled uncommitted,
and its tables wait as PENDING with "group ... does not exist".

The driver pods run as the namespace's driver ServiceAccount, which the Helm chart makes
(`OperatorConfig.driver_service_account`). Where it is missing, the API server refuses the
pod: the group says so (a Warning Event and its Degraded condition) and the pod is tried
again every `SERVICE_ACCOUNT_RETRY_S`. A driver running as another account (one made per
group by floe before the chart made them) is replaced by one running as the configured one.
"""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from floe.api.group import OptimizerGroup, OptimizerGroupSpec
from floe.api.models import API_GROUP, API_VERSION, GROUP_PLURAL, VERSION
from floe.controller.controller import Controller
from floe.controller.events import InvolvedObject, post_event
from floe.controller.objects import (
    CONFIG_HASH_ANNOTATION,
    EXECUTORS_KEY,
    GroupRef,
    config_hash,
    driver_pod,
    driver_service,
    registration_field_manager,
    registration_secret,
    scale_config_map,
    spark_config_map,
)
from floe.controller.pod_health import PodProblem, pod_problems
from floe.controller.scaling import ScaleFigures, core_seconds_due
from floe.controller.spark_conf import GROUP_LABEL, ROLE_LABEL, executor_selector
from floe.controller.status import condition, with_transition_times
from floe.protocol.errors import UnknownGroup

STATUS_INTERVAL_S = 5.0
RESTART_DELAY_S = 5.0
SERVICE_ACCOUNT_RETRY_S = 30.0
MISSING_SERVICE_ACCOUNT = "error looking up service account"
"""How the API server's ServiceAccount admission refuses a pod whose account does not exist."""


class DriverServiceAccountMissing(kopf.TemporaryError):
    """The API server refused the driver pod: its ServiceAccount is not in the group's namespace."""


def group_model(body: kopf.Body) -> OptimizerGroup:
    """The resource as floe's model; spec fields this version does not know are left out."""
    known = {f.alias or n for n, f in OptimizerGroupSpec.model_fields.items()} | set(
        OptimizerGroupSpec.model_fields
    )
    spec = {k: v for k, v in dict(body.get("spec") or {}).items() if k in known}
    meta = body.metadata
    return OptimizerGroup.model_validate(
        {
            "apiVersion": body.get("apiVersion"),
            "kind": "OptimizerGroup",
            "metadata": {"name": meta.name, "namespace": meta.namespace},
            "spec": spec,
        }
    )


def executor_template_of(body: kopf.Body) -> dict[str, Any] | None:
    """``spec.executorTemplate`` (tolerations, nodeSelector, affinity), if any."""
    template = (body.get("spec") or {}).get("executorTemplate")
    return dict(template) if template else None


@kopf.on.resume(API_GROUP, VERSION, GROUP_PLURAL)
@kopf.on.create(API_GROUP, VERSION, GROUP_PLURAL)
@kopf.on.update(API_GROUP, VERSION, GROUP_PLURAL)
def reconcile_group(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Register the group with the engine and bring its Kubernetes objects to the spec; its
    tables take its tableDefaults at once."""
    controller: Controller = memo.controller
    group = group_model(body)
    controller.engine.apply_group(group)
    meta = group.metadata
    controller.reapply_settings(controller.tables_of_group(meta.namespace, meta.name))
    ensure_driver(controller, body, group)


@kopf.on.delete(API_GROUP, VERSION, GROUP_PLURAL)
def remove_group(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """The finalizer: the engine forgets the group; its objects go by garbage collection (owner refs)."""
    controller: Controller = memo.controller
    name, namespace = body.metadata.name or "", body.metadata.namespace or "default"
    controller.engine.remove_group(name, namespace)
    controller.warned_groups.discard(controller.engine.group_key(name, namespace))
    controller.refused_drivers.discard(GroupRef(name, namespace, "").service_group)
    controller.pod_problems.forget_group(namespace, name)
    controller.scaling.forget(controller.engine.group_key(name, namespace))


@kopf.on.event("", "v1", "pods", labels={GROUP_LABEL: kopf.PRESENT, ROLE_LABEL: kopf.PRESENT})
def watch_group_pod(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A driver or executor pod changed: post each new problem (OOM kill, image pull, crash loop,
    eviction) once, as a Warning Event on its group.

    A watch, not the status timer, because Spark deletes a dead executor pod within moments:
    the terminated state is seen only in the update that precedes the deletion.
    """
    controller: Controller = memo.controller
    pod = dict(body)
    namespace = body.metadata.namespace or "default"
    for problem in controller.pod_problems.record(namespace, pod_problems(pod), controller.engine.clock()):
        group = _group_object(pod, problem.group, namespace)
        controller.events.post(group.as_dict(), "Warning", problem.reason, controller.redact(problem.message))


def _group_object(pod: dict[str, Any], group: str, namespace: str) -> InvolvedObject:
    """The OptimizerGroup a pod belongs to; its uid from the driver pod's owner reference when at hand."""
    uid = ""
    for owner in pod.get("metadata", {}).get("ownerReferences") or []:
        if owner.get("kind") == "OptimizerGroup" and owner.get("name") == group:
            uid = str(owner.get("uid", ""))
    return InvolvedObject(API_VERSION, "OptimizerGroup", group, namespace, uid)


def ensure_driver(controller: Controller, body: kopf.Body, group: OptimizerGroup) -> None:
    """Apply ConfigMaps, Service and the registration Secret; create or replace the driver pod
    when needed. One group's at a time: its handlers and its status timer run in parallel."""
    meta = body.metadata
    ref = GroupRef(name=meta.name, namespace=meta.namespace or "default", uid=meta.uid or "")
    with controller.catalog_secrets.group_lock(ref.service_group):
        _ensure_driver(controller, body, group, ref)


def _ensure_driver(controller: Controller, body: kopf.Body, group: OptimizerGroup, ref: GroupRef) -> None:
    kube = controller.kube
    spec = group.spec
    image = spec.image or controller.config.default_image
    template = executor_template_of(body)
    secrets = controller.catalog_secrets.storage_secrets_of(ref.namespace, ref.name)
    spark_config = spark_config_map(ref, spec, image, template, secrets)

    before = _followed_executors(controller, ref)
    executors = _executors_to_follow(spec, before)
    for manifest in [driver_service(ref), spark_config, scale_config_map(ref, executors)]:
        kube.apply(manifest)
    controller.scaling.note_followed(ref.service_group, ref, executors)
    # Before the driver pod, which cannot start without it.
    kube.apply_secret(
        registration_secret(ref, controller.config.registration_token), registration_field_manager(ref)
    )
    if before is not None and before != executors:
        scaled = "Scaled" if spec.autoscaling is None else "ScaledDown" if executors < before else "ScaledUp"
        post_event(
            controller.events, body, "Normal", reason=scaled, message=f"executors {before} → {executors}"
        )

    digest = config_hash(spark_config)
    account = controller.config.driver_service_account
    pod = kube.read_pod(ref.driver_name, ref.namespace)
    if pod is not None and pod["metadata"].get("deletionTimestamp"):
        raise kopf.TemporaryError("the previous driver pod is still terminating", delay=RESTART_DELAY_S)
    reason = _replacement_reason(pod, digest, account) if pod is not None else None
    if reason is not None:
        controller.catalog_secrets.mounted_secrets.pop(ref.service_group, None)
        kube.delete_pod(ref.driver_name, ref.namespace)
        post_event(controller.events, body, "Normal", reason="DriverRestarting", message=reason)
        raise kopf.TemporaryError("waiting for the old driver pod to go", delay=RESTART_DELAY_S)
    if pod is None:
        manifest = driver_pod(
            ref, spec, image, controller.config.service_url, digest, template, account, secrets
        )
        _create_driver_pod(controller, body, ref, manifest)
        post_event(
            controller.events,
            body,
            "Normal",
            reason="DriverCreated",
            message=(
                f"driver pod {ref.driver_name}: {executors} executors of {spec.executor_cores} cores, "
                f"image {image}"
            ),
        )
    # The running (or new) driver and its executors mount these Secrets: their tables' tasks may
    # now leave the storage credentials to them (`CatalogSecretRefresher.mounted_secret_properties`).
    if controller.catalog_secrets.mounted_secrets.get(ref.service_group) != frozenset(secrets):
        controller.catalog_secrets.mounted_secrets[ref.service_group] = frozenset(secrets)
        controller.catalog_secrets.remounted.set()


def _followed_executors(controller: Controller, ref: GroupRef) -> int | None:
    """The executor count the group's scale ConfigMap holds (what its driver follows), if any."""
    data = controller.kube.read_config_map_data(ref.scale_config_name, ref.namespace)
    text = data.get(EXECUTORS_KEY) if data else None
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _executors_to_follow(spec: OptimizerGroupSpec, followed: int | None) -> int:
    """The fixed count; autoscaled, the count followed now kept within the new bounds (the
    operator's autoscaler moves it from there, `Controller.autoscale`), or the minimum for a new
    group."""
    if spec.autoscaling is None:
        return spec.initial_executors
    return spec.initial_executors if followed is None else spec.autoscaling.bounded(followed)


def _status_executors(controller: Controller, spec: OptimizerGroupSpec, ref: GroupRef, demand: int) -> int:
    """The count the group wants now, for status: the fixed one, or the autoscaler's after its
    decision for `demand`. The scale ConfigMap is read only while the operator does not know the count yet
    (after a restart): from then on it is the ConfigMap's only writer, and a read racing its
    write would be stale."""
    if spec.autoscaling is None:
        return spec.initial_executors
    if controller.scaling.followed(ref.service_group) is None:
        followed = _followed_executors(controller, ref)
        if followed is None:
            return spec.initial_executors  # its objects are not made yet (`ensure_driver` makes them)
        controller.scaling.note_followed(ref.service_group, ref, followed)
    return controller.autoscale(ref.service_group, spec, demand) or 0


def _replacement_reason(pod: dict[str, Any], digest: str, account: str) -> str | None:
    """Why the running driver pod must make way for a new one, or None if it may stay."""
    if pod["metadata"].get("annotations", {}).get(CONFIG_HASH_ANNOTATION) != digest:
        return "Spark settings changed: replacing the driver pod"
    if pod.get("spec", {}).get("serviceAccountName") != account:
        return f"the drivers' ServiceAccount is now {account}: replacing the driver pod"
    return None


def _create_driver_pod(
    controller: Controller, body: kopf.Body, ref: GroupRef, manifest: dict[str, Any]
) -> None:
    """Create the driver pod; a refusal for want of its ServiceAccount is said once, as a Warning."""
    try:
        controller.kube.create_pod(manifest)
    except ApiException as exc:
        if exc.status == 409:
            # Made meanwhile (a handler and the status timer both saw none): check it next round.
            raise kopf.TemporaryError("the driver pod was created meanwhile", delay=RESTART_DELAY_S) from exc
        if exc.status != 403 or MISSING_SERVICE_ACCOUNT not in str(exc.body):
            raise
        account = manifest["spec"]["serviceAccountName"]
        message = (
            f"the driver pod was refused: ServiceAccount {account} does not exist in namespace "
            f"{ref.namespace}. The Helm chart makes it in each namespace of watchNamespaces "
            "(run helm upgrade after adding one); without the chart, create it with a Role for "
            "Spark's executor pods"
        )
        if ref.service_group not in controller.refused_drivers:
            controller.refused_drivers.add(ref.service_group)
            post_event(
                controller.events, body, "Warning", reason="DriverServiceAccountMissing", message=message
            )
        raise DriverServiceAccountMissing(message, delay=SERVICE_ACCOUNT_RETRY_S) from exc
    controller.refused_drivers.discard(ref.service_group)


@kopf.timer(API_GROUP, VERSION, GROUP_PLURAL, interval=STATUS_INTERVAL_S, idle=0)
def group_status(body: kopf.Body, status: kopf.Status, memo: kopf.Memo, patch: kopf.Patch, **_: Any) -> None:
    """Refresh the group's status; recreate a driver pod that disappeared; warn about idle tables."""
    controller: Controller = memo.controller
    group = group_model(body)
    name, namespace = group.metadata.name, group.metadata.namespace
    ref = GroupRef(name=name, namespace=namespace, uid=body.metadata.uid or "")
    kube = controller.kube
    driver = kube.read_pod(ref.driver_name, namespace)
    refused: str | None = None
    service_group = controller.engine.group_key(name, namespace)
    # A driver that is gone, or whose tables name other catalog Secrets than its pods mount.
    secrets = frozenset(controller.catalog_secrets.storage_secrets_of(namespace, name))
    if driver is None or controller.catalog_secrets.mounted_secrets.get(service_group) != secrets:
        try:
            ensure_driver(controller, body, group)
        except DriverServiceAccountMissing as exc:
            refused = str(exc)
        except kopf.TemporaryError:
            pass  # the old driver is on its way out; the next round creates the new one
    executors = kube.list_pods(namespace, executor_selector(name))
    ready = sum(1 for pod in executors if _ready(pod))
    scheduler = None
    try:
        scheduler = controller.service.group(service_group)
        stats = scheduler.group_stats(controller.engine.clock())
        threads, tables, running, pending, pending_tables = (
            stats.threads,
            stats.tables,
            stats.running_tasks,
            stats.pending_tasks,
            stats.pending_tables,
        )
    except UnknownGroup:
        threads = tables = running = pending = pending_tables = 0
    now = controller.engine.clock()
    demand = controller.engine.group_demand(name, namespace)
    desired = _status_executors(controller, group.spec, ref, demand)
    held = status.get("executorCoreSeconds") or {}
    controller.scaling.resume_time(service_group, float(held.get("held", 0)), float(held.get("static", 0)))
    meter = controller.scaling.record(
        service_group, ScaleFigures(desired, ready, demand), now, group.spec.executor_cores, _peak(group.spec)
    )
    if scheduler is not None:
        woke = controller.scaling.first_task_after_waking(service_group, scheduler.first_start_since)
    else:
        woke = None
    if woke is not None:
        post_event(
            controller.events,
            body,
            "Normal",
            reason="FirstTaskHandedOut",
            # The ack comes as the driver hands the task to Spark, before an executor pod is up to
            # run it: the driver's log says how long the task then waited ("began on an executor").
            message=f"a task was handed to Spark {woke:.0f} s after the group scaled up from zero "
            "executors; it runs once an executor pod has started",
        )
    driver_phase = (driver or {}).get("status", {}).get("phase") or "Missing"
    pods = [driver, *executors] if driver is not None else executors
    current = [problem for pod in pods for problem in pod_problems(pod)]
    controller.pod_problems.record(namespace, current, now)
    # A live pod's problem, else a recent one of a pod that is gone (a dead executor Spark removed).
    live = {str(pod["metadata"].get("uid", "")) for pod in pods}
    latest = controller.pod_problems.latest(namespace, name, now)
    problem = (
        current[0] if current else (latest if latest is not None and latest.pod_uid not in live else None)
    )
    conditions = [
        _ready_condition(driver_phase, ready, desired),
        condition(
            "Progressing",
            ready != desired,
            "Scaling" if ready != desired else "Stable",
            f"{ready} of {desired} executors ready",
        ),
        _degraded_condition(driver_phase, problem, refused),
    ]
    if controller.history is not None:
        conditions.append(_history_condition(controller, body, service_group))
    conditions.append(_catalog_budget_condition(controller.engine.catalog_pressure(name, namespace)))
    core_seconds = {"held": round(meter.held_s), "static": round(meter.static_s)}
    new = {
        "desiredExecutors": desired,
        "readyExecutors": ready,
        "demand": demand,
        "threads": threads,
        "selector": executor_selector(name),
        "tables": tables,
        "runningTasks": running,
        "pendingTasks": pending,
        "executorCoreSeconds": core_seconds,
        "conditions": with_transition_times(conditions, status.get("conditions"), controller.engine.clock),
    }
    last_scale = controller.scaling.last_scale(service_group)
    if last_scale is not None:
        new["lastScale"] = last_scale
    changed = {key: value for key, value in new.items() if status.get(key) != value}
    if list(changed) == ["executorCoreSeconds"] and not core_seconds_due(
        held, core_seconds, group.spec.executor_cores * _peak(group.spec)
    ):
        changed = {}
    patch.status.update(changed)
    # An autoscaled group on its way up from zero is not a problem (its pods' problems are Events).
    scaling_up = group.spec.autoscaling is not None and desired > ready
    if pending_tables and ready == 0 and not scaling_up:
        if service_group not in controller.warned_groups:
            controller.warned_groups.add(service_group)
            post_event(
                controller.events,
                body,
                "Warning",
                reason="NoReadyExecutors",
                message=f"pending: group has no ready executors ({pending_tables} tables waiting)",
            )
    else:
        controller.warned_groups.discard(service_group)


def _ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _catalog_budget_condition(pressure: dict[str, str]) -> dict[str, str]:
    """``CatalogsWithinBudget``: False while a catalog of the group's tables holds floe's calls back
    (paused after a 429 or 503, or refreshes waiting for its request budget), naming each."""
    if not pressure:
        return condition(
            "CatalogsWithinBudget", True, "WithinBudget", "no catalog holds the tables' calls back"
        )
    message = "; ".join(f"catalog {name!r}: {words}" for name, words in pressure.items())
    return condition("CatalogsWithinBudget", False, "CatalogThrottled", message)


def _history_condition(controller: Controller, body: kopf.Body, group: str) -> dict[str, str]:
    """``HistoryWritten``: whether the run history table takes the runs (False with why while it
    does not: the runs wait in memory, and no commit waits for them). A ``HistoryNotWritten``
    Warning Event on each group says so once per problem."""
    problem = controller.history_problem
    if problem is None:
        controller.history_warned.pop(group, None)
        return condition("HistoryWritten", True, "Written", "runs are appended to the run history table")
    if controller.history_warned.get(group) != problem:
        controller.history_warned[group] = problem
        post_event(controller.events, body, "Warning", reason="HistoryNotWritten", message=problem)
    return condition("HistoryWritten", False, "HistoryNotWritten", problem)


def _degraded_condition(driver_phase: str, problem: PodProblem | None, refused: str | None) -> dict[str, str]:
    if refused is not None:
        return condition("Degraded", True, "DriverServiceAccountMissing", refused)
    if driver_phase in ("Failed", "Missing"):
        return condition("Degraded", True, "DriverFailed", f"driver pod is {driver_phase}")
    if problem is not None:
        return condition("Degraded", True, problem.reason, problem.message)
    return condition("Degraded", False, "Healthy", f"driver pod is {driver_phase}")


def _ready_condition(driver_phase: str, ready: int, desired: int) -> dict[str, str]:
    if driver_phase != "Running":
        return condition("Ready", False, "DriverNotRunning", f"driver pod is {driver_phase}")
    if desired == 0:
        return condition("Ready", True, "ScaledToZero", "no executors requested")
    if ready < desired:
        return condition("Ready", False, "ExecutorsNotReady", f"{ready} of {desired} executors ready")
    return condition("Ready", True, "ExecutorsReady", f"{ready} executors ready")


def _peak(spec: OptimizerGroupSpec) -> int:
    """The executors a static group would need for this group's peak: an autoscaled group's
    ``maxExecutors``, a fixed group's count."""
    return spec.autoscaling.max_executors if spec.autoscaling is not None else spec.initial_executors
