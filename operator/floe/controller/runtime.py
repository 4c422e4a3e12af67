"""The operator process: kopf, the task service and the engine, in one process.

kopf runs the handlers of `floe.controller.groups` and `floe.controller.tables` on its
event loop in the main thread (or a thread of the caller's choosing: see `run_kopf`). The
task service answers the optimizer drivers on ``0.0.0.0:PORT`` from its own thread. The
engine ticks, and table status is flushed, from a third thread, and only while this
replica is the leader (see `floe.controller.leader`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from floe.controller.kube import Kube, load_config
from floe.controller.leader import Leadership, random_priority
from floe.controller.secrets import RedactingFilter, Redactor
from floe.controller.status import TableStatusFlusher
from floe.service.engine import EngineEvent, OptimizingEngine
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "ghcr.io/floe-dev/floe-optimizer:0.1.0"
PEERING_NAME = "floe"


@dataclass
class OperatorConfig:
    """How ``floe operator`` runs; the environment fills what the command line does not."""

    namespaces: list[str] = field(default_factory=list)
    service_port: int = 7070
    service_url: str = ""
    default_image: str = ""
    standalone: bool = False
    peering_name: str = PEERING_NAME
    priority: int = field(default_factory=random_priority)
    identity: str = ""
    tick_interval_s: float = 1.0
    status_interval_s: float = 5.0
    refresh_interval_s: float = 10.0

    def __post_init__(self) -> None:
        namespace = os.environ.get("POD_NAMESPACE", "default")
        self.service_url = self.service_url or os.environ.get(
            "FLOE_SERVICE_URL", f"http://floe-operator.{namespace}.svc:{self.service_port}"
        )
        self.default_image = self.default_image or os.environ.get("FLOE_OPTIMIZER_IMAGE", DEFAULT_IMAGE)
        self.identity = self.identity or os.environ.get("POD_NAME") or f"floe-{os.getpid()}-{self.priority}"


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


class Controller:
    """The state kopf's handlers share: engine, task service, Kubernetes API, redaction."""

    def __init__(self, config: OperatorConfig, kube: Kube) -> None:
        self.config = config
        self.kube = kube
        self.service = TaskService(clock=time.time)
        self.engine = OptimizingEngine(self.service, refresh_interval_s=config.refresh_interval_s)
        self.server = TaskServiceServer(self.service, host="0.0.0.0", port=config.service_port)
        self.redact = Redactor()
        self.flusher = TableStatusFlusher(kube, self.engine, self.redact, time.time)
        self.leadership = Leadership(
            None if config.standalone else kube,
            config.identity,
            config.priority,
            config.peering_name,
            config.namespaces,
        )
        self.tables: dict[str, InvolvedObject] = {}
        self.warned_groups: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.engine.subscribe(self.on_engine_event)

    def start(self) -> None:
        """Serve the task service and start ticking (as leader) in the background."""
        self.leadership.ensure_peering_objects()
        self.server.start()
        self._thread = threading.Thread(target=self._loop, name="floe-engine", daemon=True)
        self._thread.start()
        log.info(
            "task service on port %d, advertised to drivers as %s",
            self.config.service_port,
            self.config.service_url,
        )

    def stop(self) -> None:
        """Stop ticking, flush status one last time, stop serving."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.server.stop()
        self.engine.close()

    def _loop(self) -> None:
        last_flush = 0.0
        while not self._stop.is_set():
            try:
                if self.leadership.is_leader():
                    self.engine.tick()
                    if time.monotonic() - last_flush >= self.config.status_interval_s:
                        last_flush = time.monotonic()
                        self.flusher.flush()
            except Exception:
                log.exception("engine round failed")
            self._stop.wait(self.config.tick_interval_s)
        if self.leadership.is_leader():
            self.flusher.flush()

    def on_engine_event(self, event: EngineEvent) -> None:
        """An engine event becomes a Kubernetes Event on its OptimizedTable (redacted)."""
        involved = self.tables.get(event.table_id)
        if involved is not None:
            self.kube.event(involved.as_dict(), event.kind, event.reason, self.redact(event.message))


def post_event(controller: Controller, body: kopf.Body, kind: str, reason: str, message: str) -> None:
    """An Event on one of floe's resources, posted now (kopf's own posting is left for its errors)."""
    meta = body.metadata
    involved = InvolvedObject(
        str(body.get("apiVersion")),
        str(body.get("kind")),
        meta.name or "",
        meta.namespace or "",
        meta.uid or "",
    )
    controller.kube.event(involved.as_dict(), kind, reason, controller.redact(message))


def install_redaction(redactor: Redactor) -> None:
    """Mask secret values in every record the root logger's handlers write."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter(redactor))


def kopf_settings(config: OperatorConfig) -> dict[str, Any]:
    """Keyword arguments of `kopf.operator` / `kopf.run` for this configuration."""
    return {
        "standalone": config.standalone,
        "priority": config.priority,
        "peering_name": config.peering_name,
        "identity": config.identity,
        "clusterwide": not config.namespaces,
        "namespaces": config.namespaces,
    }


@kopf.on.startup()
def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Handler progress goes into annotations: floe's status schema has no place for kopf's.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="floe.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="floe.dev")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 60


@kopf.on.login()
def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    # kopf's own loaders read the service account or KUBECONFIG at login time, like `load_config`.
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def run_kopf(
    controller: Controller,
    stop_flag: threading.Event | None = None,
    ready_flag: threading.Event | None = None,
) -> None:
    """Run kopf until ``stop_flag`` is set (or forever); blocks. Safe to call from any thread."""
    from floe.controller import groups, tables  # noqa: F401  (registers the handlers)

    asyncio.run(
        kopf.operator(
            memo=kopf.Memo(controller=controller),
            stop_flag=stop_flag,
            ready_flag=ready_flag,
            **kopf_settings(controller.config),
        )
    )


def run_operator(config: OperatorConfig, stop_flag: threading.Event | None = None) -> int:
    """``floe operator``: serve until interrupted (or ``stop_flag``); returns the exit code."""
    load_config()
    controller = Controller(config, Kube())
    install_redaction(controller.redact)
    controller.start()
    try:
        run_kopf(controller, stop_flag)
    except KeyboardInterrupt:
        pass
    finally:
        controller.stop()
    return 0


def operator_namespaces(values: Sequence[str] | None) -> list[str]:
    """``--namespace`` values, comma lists allowed; empty means the whole cluster."""
    return [ns for value in values or () for ns in value.split(",") if ns]
