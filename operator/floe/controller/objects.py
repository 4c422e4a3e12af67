"""The Kubernetes objects of an OptimizerGroup, as plain manifests (no API calls here).

Per group NAME: the driver Pod ``floe-NAME-driver``, a headless Service of the same name
(``spark.driver.host``, so executors reach the driver), a ConfigMap ``floe-NAME-spark``
(Spark properties and the executor pod template) and a ConfigMap ``floe-NAME-scale`` (the
desired executor count, which the driver follows without restarting). All are owned by
the group, so deleting it garbage-collects them; the executor pods are owned by the driver.

The driver pods run as one ServiceAccount per namespace (``--driver-service-account``,
``floe-driver`` by default), whose Role lets Spark manage its executor pods. The Helm chart
renders it, with its Role and RoleBinding, in every namespace the operator serves: the
operator itself creates no ServiceAccount, Role or RoleBinding, so it holds no permission
to write RBAC, nor every permission a driver Role grants (which Kubernetes would demand of
whoever creates that Role).

Per namespace, the Secret ``floe-registration`` holds the task service's registration token,
which the driver pods mount. It is one Secret per namespace with a fixed name, owned by
every group there (GC deletes it with the last one), rather than a Secret per group: a
fixed name lets the operator's RBAC limit ``patch`` to that one Secret, so it can change
no other Secret (``create`` cannot be limited by name, but adds nothing to what creating
pods allows). A ``secretKeyRef`` to the chart's own Secret is impossible: pods can only
refer to Secrets of their own namespace."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from floe.api.group import OptimizerGroupSpec
from floe.api.models import API_VERSION
from floe.api.units import format_quantity
from floe.controller.spark_conf import (
    BLOCK_MANAGER_PORT,
    DRIVER_PORT,
    GROUP_LABEL,
    IN_CLUSTER_MASTER,
    ROLE_LABEL,
    spark_properties,
)
from floe.protocol.spark_properties import render_properties
from floe.protocol.storage import DEFAULT_CATALOG_SECRETS_DIR as CATALOG_SECRETS_DIR

SPARK_DIR = "/etc/floe/spark"
SCALE_DIR = "/etc/floe/scale"
PROPERTIES_KEY = "spark.properties"
TEMPLATE_KEY = "executor-template.yaml"
EXECUTORS_KEY = "executors"
CONFIG_HASH_ANNOTATION = "floe.dev/spark-config-hash"
MANAGED_BY = {"app.kubernetes.io/managed-by": "floe"}
DRIVER_MEMORY = "1Gi"
DRIVER_CPU = "250m"  # the driver schedules and polls; the executors do the work
TEMPLATE_FIELDS = ("tolerations", "nodeSelector", "affinity")
REGISTRATION_SECRET = "floe-registration"
DRIVER_SERVICE_ACCOUNT = "floe-driver"
"""The driver pods' ServiceAccount when ``floe operator`` is given none: the chart's name for
release ``floe``."""
REGISTRATION_KEY = "token"
REGISTRATION_DIR = "/etc/floe/registration"
OPTIMIZER_GID = 185
"""The optimizer image's group (Spark's images use 185 too): the registration token file is
readable by this group only, which ``fsGroup`` adds to whatever user an image runs as."""
POD_SECURITY_CONTEXT: Manifest = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY_CONTEXT: Manifest = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
EXECUTOR_CONTAINER = "executor"

Manifest = dict[str, Any]


@dataclass(frozen=True)
class GroupRef:
    """The owning OptimizerGroup: what ownerReferences and names need."""

    name: str
    namespace: str
    uid: str
    api_version: str = API_VERSION
    kind: str = "OptimizerGroup"

    @property
    def driver_name(self) -> str:
        """Name of the driver pod and its Service."""
        return f"floe-{self.name}-driver"

    @property
    def spark_config_name(self) -> str:
        """ConfigMap with the Spark properties and the executor pod template."""
        return f"floe-{self.name}-spark"

    @property
    def scale_config_name(self) -> str:
        """ConfigMap with the desired executor count."""
        return f"floe-{self.name}-scale"

    @property
    def service_group(self) -> str:
        """The group's name in the task service (``namespace/name``), which its driver registers with."""
        return f"{self.namespace}/{self.name}"

    @property
    def driver_host(self) -> str:
        """DNS name of the headless Service in front of the driver."""
        return f"{self.driver_name}.{self.namespace}.svc"

    def labels(self, role: str) -> dict[str, str]:
        """Labels of every object of the group."""
        return {**MANAGED_BY, GROUP_LABEL: self.name, ROLE_LABEL: role}

    def metadata(self, name: str, role: str) -> Manifest:
        """Metadata with labels and the controller owner reference to the group."""
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": self.labels(role),
            "ownerReferences": [
                {
                    "apiVersion": self.api_version,
                    "kind": self.kind,
                    "name": self.name,
                    "uid": self.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }


def scheduling_fields(template: dict[str, Any] | None) -> Manifest:
    """The scheduling fields of ``spec.executorTemplate`` (tolerations, nodeSelector, affinity)."""
    return {k: v for k, v in (template or {}).items() if k in TEMPLATE_FIELDS and v}


def storage_secret_mounts(secrets: Sequence[str]) -> tuple[list[Manifest], list[Manifest]]:
    """Volumes and mounts of the catalog Secrets whose storage credentials the group's tasks
    leave out: each at ``CATALOG_SECRETS_DIR/<name>``, readable by the optimizer's group only,
    optional, so that a Secret created later (or deleted) never keeps a pod from starting."""
    volumes = [
        {
            "name": f"catalog-secret-{i}",
            "secret": {"secretName": name, "optional": True, "defaultMode": 0o440},
        }
        for i, name in enumerate(secrets)
    ]
    mounts = [
        {"name": f"catalog-secret-{i}", "mountPath": f"{CATALOG_SECRETS_DIR}/{name}", "readOnly": True}
        for i, name in enumerate(secrets)
    ]
    return volumes, mounts


def executor_template(template: dict[str, Any] | None, storage_secrets: Sequence[str] = ()) -> Manifest:
    """The executor pod template: the group's scheduling fields, the security contexts and the
    catalog Secrets the rewrites read their storage credentials from.

    Spark builds the executor container on the template's first container, keeping what it
    does not set itself (the security context and volume mounts among them). Executors never
    call the Kubernetes API (the driver manages them), so they get no ServiceAccount token:
    code running in a rewrite cannot use the namespace's default ServiceAccount.
    """
    volumes, mounts = storage_secret_mounts(storage_secrets)
    container: Manifest = {"name": EXECUTOR_CONTAINER, "securityContext": CONTAINER_SECURITY_CONTEXT}
    if mounts:
        container["volumeMounts"] = mounts
    spec = {
        **scheduling_fields(template),
        "automountServiceAccountToken": False,
        "securityContext": {**POD_SECURITY_CONTEXT, "fsGroup": OPTIMIZER_GID},
        "containers": [container],
        **({"volumes": volumes} if volumes else {}),
    }
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec}


def spark_config_map(
    ref: GroupRef,
    spec: OptimizerGroupSpec,
    image: str,
    template: dict[str, Any] | None,
    storage_secrets: Sequence[str] = (),
) -> Manifest:
    """ConfigMap ``floe-NAME-spark``: everything whose change needs a new driver, the catalog
    Secrets its pods mount among them."""
    properties = spark_properties(
        ref.name, ref.namespace, spec, image, driver_pod=ref.driver_name, driver_host=ref.driver_host
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": ref.metadata(ref.spark_config_name, "config"),
        "data": {
            PROPERTIES_KEY: render_properties(properties),
            TEMPLATE_KEY: yaml.safe_dump(executor_template(template, storage_secrets), sort_keys=True),
        },
    }


def scale_config_map(ref: GroupRef, executors: int) -> Manifest:
    """ConfigMap ``floe-NAME-scale``: the executor count the running driver follows."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": ref.metadata(ref.scale_config_name, "config"),
        "data": {EXECUTORS_KEY: str(executors)},
    }


def config_hash(spark_config: Manifest) -> str:
    """Digest of the Spark ConfigMap's data; a driver started with another one is replaced.

    ``spark.executor.instances`` is left out: the executor count changes without a restart.
    """
    data = dict(spark_config["data"])
    data[PROPERTIES_KEY] = "".join(
        line
        for line in data[PROPERTIES_KEY].splitlines(True)
        if not line.startswith("spark.executor.instances=")
    )
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def driver_pod(
    ref: GroupRef,
    spec: OptimizerGroupSpec,
    image: str,
    service_url: str,
    spark_hash: str,
    template: dict[str, Any] | None,
    service_account: str,
    storage_secrets: Sequence[str] = (),
) -> Manifest:
    """The driver pod: ``python -m floe_optimizer.driver`` in Spark client mode.

    The driver gets the group's scheduling fields too (a group pinned to some nodes runs its
    driver there), both ConfigMaps as volumes (the Spark one is read at start, the scale one
    is followed while it runs) and the registration token as a file, which the optimizer
    reads at each registration: a changed token reaches it without a restart. It runs as
    ``service_account``, the namespace's driver ServiceAccount, whose token Spark uses to
    create, watch and delete the executor pods. It mounts `storage_secrets` as the executors
    do: it deletes the files of a result the task service refused.
    """
    secret_volumes, secret_mounts = storage_secret_mounts(storage_secrets)
    command = [
        "python",
        "-m",
        "floe_optimizer.driver",
        "--master",
        IN_CLUSTER_MASTER,
        "--properties-file",
        f"{SPARK_DIR}/{PROPERTIES_KEY}",
        "--scale-file",
        f"{SCALE_DIR}/{EXECUTORS_KEY}",
        "--service",
        service_url,
        "--group",
        ref.service_group,
        "--executor-cores",
        str(spec.executor_cores),
        "--executor-memory",
        format_quantity(spec.executor_memory),
        "--name",
        "$(POD_NAME)",
    ]
    metadata = ref.metadata(ref.driver_name, "driver")
    metadata["annotations"] = {CONFIG_HASH_ANNOTATION: spark_hash}
    pod_spec: Manifest = {
        "serviceAccountName": service_account,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": int(spec.heartbeat_timeout),
        "containers": [
            {
                "name": "driver",
                "image": image,
                "command": command,
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "FLOE_SERVICE_URL", "value": service_url},
                    {
                        "name": "FLOE_REGISTRATION_TOKEN_FILE",
                        "value": f"{REGISTRATION_DIR}/{REGISTRATION_KEY}",
                    },
                ],
                "ports": [
                    {"name": "driver", "containerPort": DRIVER_PORT},
                    {"name": "blockmanager", "containerPort": BLOCK_MANAGER_PORT},
                ],
                "resources": {
                    "requests": {"cpu": DRIVER_CPU, "memory": DRIVER_MEMORY},
                    "limits": {"memory": DRIVER_MEMORY},
                },
                "securityContext": CONTAINER_SECURITY_CONTEXT,
                "volumeMounts": [
                    {"name": "spark-config", "mountPath": SPARK_DIR, "readOnly": True},
                    {"name": "scale", "mountPath": SCALE_DIR, "readOnly": True},
                    {"name": "registration", "mountPath": REGISTRATION_DIR, "readOnly": True},
                    *secret_mounts,
                ],
            }
        ],
        "securityContext": {**POD_SECURITY_CONTEXT, "fsGroup": OPTIMIZER_GID},
        "volumes": [
            {"name": "spark-config", "configMap": {"name": ref.spark_config_name}},
            {"name": "scale", "configMap": {"name": ref.scale_config_name}},
            {
                "name": "registration",
                "secret": {
                    "secretName": REGISTRATION_SECRET,
                    "items": [{"key": REGISTRATION_KEY, "path": REGISTRATION_KEY}],
                    "defaultMode": 0o440,
                },
            },
            *secret_volumes,
        ],
        **scheduling_fields(template),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def registration_secret(ref: GroupRef, token: str) -> Manifest:
    """The namespace's Secret ``floe-registration``, as this group applies it (server-side apply).

    The group's owner reference is not the controller one: every group of the namespace
    adds its own (server-side apply merges ownerReferences by uid, one field manager per
    group), and the garbage collector deletes the Secret once the last of them is gone.
    """
    owner = ref.metadata(REGISTRATION_SECRET, "registration")["ownerReferences"][0]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": REGISTRATION_SECRET,
            "namespace": ref.namespace,
            "labels": {**MANAGED_BY, ROLE_LABEL: "registration"},
            "ownerReferences": [{**owner, "controller": False}],
        },
        "type": "Opaque",
        "data": {REGISTRATION_KEY: base64.b64encode(token.encode()).decode()},
    }


def registration_field_manager(ref: GroupRef) -> str:
    """The server-side apply field manager of this group's part of the registration Secret."""
    return f"floe-group-{ref.name}"


def driver_service(ref: GroupRef) -> Manifest:
    """Headless Service selecting the driver pod: a stable DNS name for ``spark.driver.host``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": ref.metadata(ref.driver_name, "driver"),
        "spec": {
            "clusterIP": "None",
            "selector": {GROUP_LABEL: ref.name, ROLE_LABEL: "driver"},
            "ports": [
                {"name": "driver", "port": DRIVER_PORT, "targetPort": DRIVER_PORT},
                {"name": "blockmanager", "port": BLOCK_MANAGER_PORT, "targetPort": BLOCK_MANAGER_PORT},
            ],
            "publishNotReadyAddresses": True,
        },
    }
