"""The operator process: kopf running floe's handlers beside the controller's engine.

Importing `floe.controller.groups` and `floe.controller.tables` here registers their kopf
handlers; `floe.controller.controller`, which they import for the `Controller`, never imports
them back.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from typing import Any

import kopf

from floe.controller import groups, table_sets, tables
from floe.controller.config import OperatorConfig
from floe.controller.controller import Controller
from floe.controller.diffbase import CredentialFreeDiffBase
from floe.controller.kube import Kube, load_config
from floe.kit.redaction import install_redaction

# Their handlers are registered with kopf by importing them.
HANDLER_MODULES = (groups, tables, table_sets)


def kopf_settings(config: OperatorConfig) -> dict[str, Any]:
    """Keyword arguments of `kopf.operator` / `kopf.run` for this configuration.

    Standalone, kopf gets no peering name: kopf takes a peering name as "peering is
    mandatory", and with peering off (standalone) it then finds no peering resource to watch
    and pauses every handler for good, waiting for a peering that never comes: a standalone
    operator reconciled nothing.
    """
    settings: dict[str, Any] = {
        "liveness_endpoint": config.liveness_endpoint,
        "standalone": config.standalone,
        "identity": config.identity,
        "clusterwide": not config.namespaces,
        "namespaces": config.namespaces,
    }
    if not config.standalone:
        settings.update(priority=config.priority, peering_name=config.peering_name)
    return settings


@kopf.on.startup()
def _configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Handler progress goes into annotations: floe's status schema has no place for kopf's.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="floe.dev")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 60
    controller: Controller | None = getattr(memo, "controller", None)
    if controller is not None:
        settings.peering.lifetime = controller.config.peering_lifetime_s
    # kopf's record of the last handled spec, with digests where the spec has credentials, keyed
    # by the token every replica shares (a process without one keys them by a secret of its own).
    token = controller.config.registration_token if controller is not None else secrets.token_urlsafe(32)
    settings.persistence.diffbase_storage = CredentialFreeDiffBase(prefix="floe.dev", secret=token.encode())


@kopf.on.probe(id="engine")
def _engine_alive(memo: kopf.Memo, **_: Any) -> dict[str, float]:
    """Part of the liveness endpoint: fails (500) when the engine loop has stalled.

    kopf serves the endpoint from its own event loop, so an answer also shows that kopf's
    loop runs; the task service's ``/healthz`` (readiness) shows that the service answers.
    """
    controller: Controller = memo.controller
    idle = time.monotonic() - controller.loop_seen
    if idle > controller.config.engine_stall_s:
        raise kopf.PermanentError(f"the engine loop has not come round for {idle:.0f} s")
    return {"engine_idle_s": round(idle, 1), "rounds": float(controller.rounds)}


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
