"""The few Kubernetes API calls the controller makes, over the official ``kubernetes`` client.

The client is synchronous; kopf's handlers run it in their thread pool, and the status
flusher and the engine's event listener call it from their own threads.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import os
import uuid
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from floe.api.models import API_GROUP, VERSION

log = logging.getLogger(__name__)

Manifest = dict[str, Any]


def load_config() -> None:
    """In-cluster credentials when running in a pod, else the kubeconfig (``KUBECONFIG``)."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        # Read KUBECONFIG now: the client's default path was fixed when it was imported.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]


#: Event names are DNS subdomains too: the involved object's name, a dot and 12 hex digits.
_EVENT_SUFFIX_LENGTH = 1 + 12


def event_name(involved_name: str) -> str:
    """A unique Event name for an object: its name, cut so that the whole stays within 253 characters."""
    prefix = involved_name[: 253 - _EVENT_SUFFIX_LENGTH].rstrip("-.")
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


class Kube:
    """Typed wrappers over the core and custom-objects APIs."""

    def __init__(self, api_client: Any | None = None) -> None:
        self.api = api_client or client.ApiClient()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    # -- generic objects -----------------------------------------------------------------

    def apply(self, manifest: Manifest) -> None:
        """Create the object, or merge-patch it to the manifest when it exists (not for pods)."""
        kind, meta = manifest["kind"], manifest["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        create, patch = self._calls(kind)
        try:
            create(namespace, manifest)
        except ApiException as exc:
            if exc.status != 409:
                raise
            patch(name, namespace, manifest)

    def apply_secret(self, manifest: Manifest, field_manager: str) -> None:
        """Server-side apply a Secret as ``field_manager``, taking over fields others set.

        One call whether or not it exists (creating needs ``create`` on Secrets, changing it
        ``patch``, which RBAC can limit to its name), and each field manager keeps its own
        entries of lists merged by key, such as ownerReferences.
        """
        meta = manifest["metadata"]
        self.core.patch_namespaced_secret(
            meta["name"],
            meta["namespace"],
            manifest,
            field_manager=field_manager,
            force=True,
            _content_type="application/apply-patch+yaml",
        )

    def _calls(self, kind: str) -> tuple[Any, Any]:
        # ConfigMaps and Services only: the operator writes no RBAC objects (the chart renders the
        # driver's ServiceAccount, Role and RoleBinding), and may not.
        core = self.core
        calls = {
            "ConfigMap": (core.create_namespaced_config_map, core.patch_namespaced_config_map),
            "Service": (core.create_namespaced_service, core.patch_namespaced_service),
        }
        return calls[kind]

    def read_config_map_data(self, name: str, namespace: str) -> dict[str, str] | None:
        """A ConfigMap's data, or None if there is none (a ``get`` by name: no listing)."""
        try:
            config_map: Any = self.core.read_namespaced_config_map(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(config_map.data or {})

    # -- pods ----------------------------------------------------------------------------

    # Pods are read as the API server's JSON: the client's models, and turning them back into a
    # dict, cost more CPU than the request itself, and a group's status reads its pods every 5 s.

    def read_pod(self, name: str, namespace: str) -> Manifest | None:
        """The pod as a dict, or None if there is none."""
        try:
            response: Any = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        pod: Manifest = json.loads(response.data)
        return pod

    def create_pod(self, manifest: Manifest) -> None:
        """Create a pod."""
        self.core.create_namespaced_pod(manifest["metadata"]["namespace"], cast(Any, manifest))

    def delete_pod(self, name: str, namespace: str) -> None:
        """Delete a pod now; a missing pod is fine."""
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def list_pods(self, namespace: str, selector: str) -> list[Manifest]:
        """Pods matching the label selector, as dicts."""
        response: Any = self.core.list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
        pods: list[Manifest] = json.loads(response.data)["items"]
        return pods

    # -- secrets, status, events ---------------------------------------------------------

    def read_secret(self, name: str, namespace: str) -> dict[str, str]:
        """The Secret's data, decoded (kopf never sees it: it is read here, on demand).

        Raises ApiException when it cannot be fetched, and ValueError naming the key (never the
        value) when a value is not UTF-8 text.
        """
        secret: Any = self.core.read_namespaced_secret(name, namespace)
        data: dict[str, str] = {}
        for key, value in (secret.data or {}).items():
            try:
                data[key] = base64.b64decode(value).decode()
            except ValueError:  # binascii.Error, UnicodeDecodeError: their text would quote the value
                raise ValueError(f"the value of key {key!r} is not UTF-8 text") from None
        return data

    def list_custom(self, plural: str, namespace: str) -> list[Manifest]:
        """Every object of one of floe's kinds in `namespace`, as dicts."""
        listed: Any = self.custom.list_namespaced_custom_object(API_GROUP, VERSION, namespace, plural)
        return [dict(item) for item in listed.get("items", [])]

    def create_custom(self, plural: str, namespace: str, manifest: Manifest) -> None:
        """Create an object of one of floe's kinds; one that exists already is left as it is."""
        try:
            self.custom.create_namespaced_custom_object(API_GROUP, VERSION, namespace, plural, manifest)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def get_custom(self, plural: str, name: str, namespace: str) -> Manifest | None:
        """One of floe's objects as a dict; None when it does not exist."""
        try:
            found: Any = self.custom.get_namespaced_custom_object(API_GROUP, VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(found)

    def set_custom_spec_fields(self, plural: str, name: str, namespace: str, fields: Manifest) -> None:
        """Set top-level ``spec`` fields of one of floe's objects, each whole (a JSON patch: keys a
        new value leaves out go, which a merge patch would keep); the spec's other fields stay."""
        operations = [{"op": "add", "path": f"/spec/{key}", "value": value} for key, value in fields.items()]
        self.custom.patch_namespaced_custom_object(
            API_GROUP,
            VERSION,
            namespace,
            plural,
            name,
            operations,
            _content_type="application/json-patch+json",
        )

    def delete_custom(self, plural: str, name: str, namespace: str) -> None:
        """Delete one of floe's objects; one already gone is fine."""
        try:
            self.custom.delete_namespaced_custom_object(API_GROUP, VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def patch_status(self, plural: str, name: str, namespace: str, status: Manifest) -> None:
        """Merge-patch the ``status`` subresource of one of floe's resources."""
        self.custom.patch_namespaced_custom_object_status(
            API_GROUP, VERSION, namespace, plural, name, {"status": status}
        )

    def event(self, involved: Manifest, kind: str, reason: str, message: str) -> None:
        """Post a core/v1 Event about ``involved`` (apiVersion, kind, name, namespace, uid)."""
        now = datetime.datetime.now(datetime.UTC)
        namespace = involved["namespace"]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name(involved["name"]), "namespace": namespace},
            "involvedObject": involved,
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "floe-operator"},
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
            "reportingComponent": "floe-operator",
        }
        try:
            self.core.create_namespaced_event(namespace, cast(Any, body))
        except ApiException as exc:
            log.warning("could not post event %s on %s: %s", reason, involved.get("name"), exc.reason)
