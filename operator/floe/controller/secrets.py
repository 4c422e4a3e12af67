"""Catalog properties from Secrets.

A table's ``spec.catalog.secretRef`` names a Secret in the table's namespace whose keys
are pyiceberg catalog properties. The values reach the engine only; every status field
and Event message passes through a `floe.kit.redaction.Redactor`, and the operator's
log handlers filter too, because a catalog error can quote its URI, password included.

A Secret that cannot be read is a `CatalogProblem` of each table naming it: the table's
``CatalogReady`` condition turns False with its reason (``SecretNotFound`` or
``SecretUnreadable``) and a message that names the Secret and its namespace, never its data.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from floe.api.models import OptimizedTable
from floe.controller.kube import Kube

SECRET_NOT_FOUND = "SecretNotFound"
SECRET_UNREADABLE = "SecretUnreadable"


def with_catalog_properties(resource: OptimizedTable, properties: dict[str, str]) -> OptimizedTable:
    """The table with the Secret's properties under its inline ones (inline wins: it is explicit)."""
    spec = resource.spec.model_copy(
        update={"catalog": resource.spec.catalog.with_properties_under(properties)}
    )
    return resource.model_copy(update={"spec": spec})


@dataclass(frozen=True)
class CatalogProblem:
    """Why a table's catalog Secret cannot be read: a condition reason and a message naming it."""

    secret: str
    reason: str
    message: str


class CatalogSecretError(Exception):
    """A catalog Secret that cannot be read."""

    def __init__(self, problem: CatalogProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def read_catalog_properties(kube: Kube, name: str, namespace: str) -> dict[str, str]:
    """The catalog properties in Secret ``namespace/name``.

    Raises `CatalogSecretError`: ``SecretNotFound`` when there is no such Secret,
    ``SecretUnreadable`` when the operator may not read it (403) or the API server fails otherwise,
    or a value is not text. Failures that are not the API server's answer (it cannot be reached)
    propagate as they are.
    """
    where = f"catalog Secret {name!r} in namespace {namespace!r}"
    try:
        return kube.read_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            problem = CatalogProblem(name, SECRET_NOT_FOUND, f"{where} not found")
        else:
            problem = CatalogProblem(
                name, SECRET_UNREADABLE, f"{where} cannot be read: {exc.reason} ({exc.status})"
            )
    except ValueError as exc:  # kube.read_secret's message names the key, never the value
        problem = CatalogProblem(name, SECRET_UNREADABLE, f"{where} cannot be read: {exc}")
    raise CatalogSecretError(problem)


class CatalogProblems:
    """The tables whose catalog Secret cannot be read now, shared by kopf's handlers, the Secret
    refresh and the status flush (each in its own thread)."""

    def __init__(self) -> None:
        self._by_table: dict[str, CatalogProblem] = {}
        self._cleared: set[str] = set()
        self._lock = threading.Lock()

    def record(self, table_id: str, problem: CatalogProblem) -> bool:
        """Remember the table's problem; True when it is new or differs from the one before."""
        with self._lock:
            before = self._by_table.get(table_id)
            self._by_table[table_id] = problem
            return before != problem

    def clear(self, table_id: str) -> CatalogProblem | None:
        """The table's Secret was read (or the table is gone); returns the problem it had, if any."""
        with self._lock:
            problem = self._by_table.pop(table_id, None)
            if problem is not None:
                self._cleared.add(table_id)
            return problem

    def take_cleared(self) -> set[str]:
        """The tables whose problem was cleared since the last call: their status changes."""
        with self._lock:
            cleared, self._cleared = self._cleared, set()
            return cleared

    def get(self, table_id: str) -> CatalogProblem | None:
        """The table's problem now, if any."""
        with self._lock:
            return self._by_table.get(table_id)

    def tables(self) -> list[str]:
        """Every table that has a problem now."""
        with self._lock:
            return list(self._by_table)
