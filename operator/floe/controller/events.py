"""Kubernetes Events on floe's resources: what they point at, and the engine's events posted as Events.

Every Event the controller posts goes through one `EventPoster`: the thread that raises it (the
engine's, a refresh or maintenance worker, the task service's, a kopf handler) only queues it,
and the poster's thread makes the API call, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import kopf

from floe.api.models import API_VERSION, OptimizedTable
from floe.controller.kube import Kube, Manifest
from floe.controller.pod_health import PodProblem, PodProblemLog
from floe.kit.posting import EventPoster
from floe.kit.redaction import Redactor
from floe.optimizing.registry import EngineEvent
from floe.protocol.rewrite_task import OUT_OF_MEMORY


@dataclass(frozen=True)
class InvolvedObject:
    """What an Event about a resource points at."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str

    def as_dict(self) -> dict[str, str]:
        """The ``involvedObject`` of a core/v1 Event."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
        }


@dataclass(frozen=True)
class _Event:
    """An Event waiting for the poster."""

    involved: Manifest
    kind: str
    reason: str
    message: str


class ControllerEvents:
    """Every Event the controller posts: its own, and the engine's on the tables they are about.

    `tables` and `resources` are the controller's own maps (table id to its Event target and to
    its resource as applied), read when an engine event comes.
    """

    def __init__(
        self,
        kube: Kube,
        redact: Redactor,
        tables: Mapping[str, InvolvedObject],
        resources: Mapping[str, OptimizedTable],
        pod_problems: PodProblemLog,
        clock: Callable[[], float],
    ) -> None:
        self.kube = kube
        self.redact = redact
        self.tables = tables
        self.resources = resources
        self.pod_problems = pod_problems
        self.clock = clock
        self.poster: EventPoster[_Event] = EventPoster(self._post_now, name="floe-events")

    def start(self) -> None:
        """Start posting (what was queued before first)."""
        self.poster.start()

    def drain(self, timeout_s: float) -> bool:
        """Wait until the Events queued so far are posted; False if they are not after `timeout_s`."""
        return self.poster.drain(timeout_s)

    def stop(self) -> None:
        """Post what is queued, then stop."""
        self.poster.stop()

    def post(self, involved: Manifest, kind: str, reason: str, message: str) -> None:
        """Queue an Event about ``involved`` (an ``involvedObject``), `message` as it is; the
        poster's thread posts it. Dropped, and counted, when the queue is full."""
        self.poster.submit(_Event(dict(involved), kind, reason, message))

    def _post_now(self, event: _Event) -> None:
        self.kube.event(event.involved, event.kind, event.reason, event.message)

    def on_engine_event(self, event: EngineEvent) -> None:
        """An engine event becomes a Kubernetes Event on its OptimizedTable (redacted), queued
        for the poster: the engine's threads never wait for the API server.

        A task lost to an executor's memory is the group's problem too: the Event goes to the
        group as well, and its Degraded condition names it (`PodProblemLog`).
        """
        involved = self.tables.get(event.table_id)
        if involved is None:
            return
        message = self.redact(event.message)
        self.post(involved.as_dict(), event.kind, event.reason, message)
        resource = self.resources.get(event.table_id)
        if event.reason == OUT_OF_MEMORY and resource is not None:
            group, namespace = resource.spec.group, involved.namespace
            problem = PodProblem(group, "", f"process:{message.split(':', 1)[0]}", OUT_OF_MEMORY, message, 0)
            self.pod_problems.record(namespace, [problem], self.clock())
            owner = InvolvedObject(API_VERSION, "OptimizerGroup", group, namespace, "")
            self.post(owner.as_dict(), event.kind, event.reason, f"table {involved.name}: {message}")


def post_event(events: ControllerEvents, body: kopf.Body, kind: str, reason: str, message: str) -> None:
    """An Event on one of floe's resources, queued for the poster (kopf's own posting is left for
    its errors)."""
    meta = body.metadata
    involved = InvolvedObject(
        str(body.get("apiVersion")),
        str(body.get("kind")),
        meta.name or "",
        meta.namespace or "",
        meta.uid or "",
    )
    events.post(involved.as_dict(), kind, reason, events.redact(message))
