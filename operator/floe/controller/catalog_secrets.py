"""The catalog Secrets tables refer to: read again by the leader, their tables applied or re-applied.

Also what the groups' pods mount: the Secrets of each group's tables (`storage_secrets_of`), and
which of them its pods mount now (`mounted_secrets`), so a table's tasks leave out the storage
credentials its group's pods already have.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from floe.api.models import OptimizedTable
from floe.controller.events import ControllerEvents, InvolvedObject
from floe.controller.kube import Kube
from floe.controller.secrets import (
    CatalogProblem,
    CatalogProblems,
    CatalogSecretError,
    read_catalog_properties,
    with_catalog_properties,
)
from floe.kit.redaction import Redactor
from floe.optimizing.engine import OptimizingEngine

log = logging.getLogger(__name__)

Register = Callable[[str, OptimizedTable, Mapping[str, Any], dict[str, str]], None]
"""Apply a table to the engine: its id, resource, last status and its Secret's properties."""


class CatalogSecretRefresher:
    """Reads the tables' catalog Secrets; a table's CatalogReady problem and its Events follow.

    `resources`, `tables` and `awaiting_secret` are the controller's maps (each table as applied,
    its Event target, and the tables waiting for their Secret); `apply_lock` is held while a
    table's spec is applied; `register` and `resolved` are the controller's (apply a table, and a
    table with the settings it inherits); `table_changes` counts the tables applied or removed.
    """

    def __init__(
        self,
        kube: Kube,
        engine: OptimizingEngine,
        redact: Redactor,
        events: ControllerEvents,
        *,
        resources: Mapping[str, OptimizedTable],
        tables: Mapping[str, InvolvedObject],
        awaiting_secret: Mapping[str, Mapping[str, Any]],
        apply_lock: threading.RLock,
        register: Register,
        resolved: Callable[[str, OptimizedTable], OptimizedTable],
        table_changes: Callable[[], int],
    ) -> None:
        self.kube = kube
        self.engine = engine
        self.redact = redact
        self.events = events
        self.resources = resources
        self.tables = tables
        self.awaiting_secret = awaiting_secret
        self.apply_lock = apply_lock
        self.register = register
        self.resolved = resolved
        self.table_changes = table_changes
        self.problems = CatalogProblems()
        """Tables whose catalog Secret cannot be read now (their CatalogReady condition)."""
        self.mounted_secrets: dict[str, frozenset[str]] = {}
        """Per group (namespace/name): the catalog Secrets its driver and executors mount. Tasks
        of a table whose Secret is among them leave its storage credentials out."""
        self.remounted = threading.Event()
        """Set when a group's pods mount other Secrets: the next round re-applies the tables'
        catalog properties at once, rather than at the next Secret refresh."""
        self._group_secrets: dict[tuple[str, str], tuple[int, list[str]]] = {}
        """`storage_secrets_of` each group, with the `table_changes` it was worked out at."""
        self._secret_users: tuple[int, dict[tuple[str, str], list[str]]] = (-1, {})
        """`_users`, with the `table_changes` it was worked out at."""
        self._secret_errors: dict[tuple[str, str], str] = {}
        self._group_locks: dict[str, threading.Lock] = {}
        self._group_locks_lock = threading.Lock()

    def failed(self, table_id: str, problem: CatalogProblem) -> None:
        """Record the problem; a new one (or a changed one) gets a Warning Event on the table."""
        if not self.problems.record(table_id, problem):
            return
        involved = self.tables.get(table_id)
        if involved is not None:
            self.events.post(involved.as_dict(), "Warning", problem.reason, problem.message)

    def read(self, table_id: str) -> None:
        """The table's Secret was read: a problem it had is over, and a Normal Event says so."""
        problem = self.problems.clear(table_id)
        involved = self.tables.get(table_id)
        if problem is not None and involved is not None:
            message = f"catalog Secret {problem.secret!r} in namespace {involved.namespace!r} is readable"
            self.events.post(involved.as_dict(), "Normal", "SecretReadable", message)

    def refresh(self) -> int:
        """Re-read each Secret a table's catalog refers to; apply the tables waiting for it, and re-apply
        the tables whose properties changed.

        One GET per Secret, however many tables use it. A Secret that cannot be read is a
        CatalogReady problem of each of its tables (an Event when it starts or changes; logged
        once per failure, reason only); the tables the engine has keep their properties.
        Returns how many tables were applied.
        """
        applied = 0
        for (namespace, name), table_ids in self._users().items():
            try:
                properties = read_catalog_properties(self.kube, name, namespace)
            except CatalogSecretError as exc:
                if self._secret_errors.get((namespace, name)) != exc.problem.message:
                    log.warning("%s", exc.problem.message)
                self._secret_errors[(namespace, name)] = exc.problem.message
                for table_id in table_ids:
                    self.failed(table_id, exc.problem)
                continue
            self._secret_errors.pop((namespace, name), None)
            self.redact.add(properties)
            for table_id in table_ids:
                self.read(table_id)
                applied += self._apply_catalog_properties(table_id, name, properties)
        return applied

    def _users(self) -> dict[tuple[str, str], list[str]]:
        """The tables naming each Secret (namespace, name); worked out again only when a table was
        applied or removed since, not every refresh (thousands of tables may name none)."""
        changes = self.table_changes()
        if self._secret_users[0] != changes:
            users: dict[tuple[str, str], list[str]] = {}
            for table_id, resource in list(self.resources.items()):
                secret = resource.spec.catalog.secret_ref
                if secret:
                    users.setdefault((resource.metadata.namespace, secret), []).append(table_id)
            self._secret_users = (changes, users)
        return self._secret_users[1]

    def group_lock(self, group: str) -> threading.Lock:
        """The lock that serializes changes to one group's Kubernetes objects (namespace/name)."""
        with self._group_locks_lock:
            return self._group_locks.setdefault(group, threading.Lock())

    def storage_secrets_of(self, namespace: str, group: str) -> list[str]:
        """The catalog Secrets the tables of a group name, which its pods mount; worked out again
        only when a table was applied or removed since (the group's status asks every few seconds)."""
        changes = self.table_changes()
        cached = self._group_secrets.get((namespace, group))
        if cached is not None and cached[0] == changes:
            return cached[1]
        secrets = sorted(
            {
                resource.spec.catalog.secret_ref
                for resource in list(self.resources.values())
                if resource.metadata.namespace == namespace
                and resource.spec.group == group
                and resource.spec.catalog.secret_ref
            }
        )
        self._group_secrets[(namespace, group)] = (changes, secrets)
        return secrets

    def mounted_secret_properties(
        self, resource: OptimizedTable, properties: dict[str, str]
    ) -> dict[str, str] | None:
        """`properties` (the table's Secret's) when its group's pods mount that Secret, else None:
        until they do, the table's tasks carry the storage credentials themselves."""
        group = self.engine.group_key(resource.spec.group, resource.metadata.namespace)
        secret = resource.spec.catalog.secret_ref
        return properties if secret and secret in self.mounted_secrets.get(group, frozenset()) else None

    def _apply_catalog_properties(self, table_id: str, secret: str, properties: dict[str, str]) -> int:
        with self.apply_lock:
            base = self.resources.get(table_id)
            if base is None or base.spec.catalog.secret_ref != secret:
                return 0
            resource = with_catalog_properties(base, properties)
            waiting = self.awaiting_secret.get(table_id)
            if waiting is not None:
                self.register(table_id, resource, waiting, properties)
                log.info("catalog Secret of %s is readable: applied", table_id)
                return 1
            runtime = self.engine.runtimes.get(table_id)
            if runtime is None:
                return 0
            mounted = self.mounted_secret_properties(base, properties)
            unchanged = resource.spec.catalog.properties == runtime.spec.catalog.properties
            if unchanged and self.engine.uses_mounted_secret(table_id) == (mounted is not None):
                return 0
            self.engine.apply_table(self.resolved(table_id, resource), secret_properties=mounted)
            if unchanged:
                log.info("%s: its tasks now read storage credentials from the mounted Secret", table_id)
                return 1
        involved = self.tables.get(table_id)
        if involved is not None:
            message = f"catalog Secret {secret!r} changed: the table is read with its new properties"
            self.events.post(involved.as_dict(), "Normal", "CatalogSecretChanged", message)
        log.info("catalog Secret of %s changed: re-applied", table_id)
        return 1
