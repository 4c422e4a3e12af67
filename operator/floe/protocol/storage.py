"""Storage credentials reach a task's executor through a mounted Secret, never through the task.

On Kubernetes a table's catalog properties come from the Secret its ``spec.catalog.secretRef``
names. The storage credentials among them (S3, GCS, ADLS keys) are left out of the task's
``io_properties``; the task names the Secret instead (``storage_secret``), and the optimizer's
driver and executor pods have it mounted at ``$FLOE_CATALOG_SECRETS_DIR/<name>/``, one file per
key, where the rewrite reads them. Credentials a REST catalog vends for the table (short-lived,
table-scoped, not in the Secret) and those written inline in a manifest travel with the task.
The catalog's own authentication (``token``, ``credential``) never does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from floe.kit.redaction import is_credential_key, without_catalog_credentials

CATALOG_SECRETS_DIR_ENV = "FLOE_CATALOG_SECRETS_DIR"
DEFAULT_CATALOG_SECRETS_DIR = "/etc/floe/catalog-secrets"


class TaskStorage(Protocol):
    """What a task says of its storage: a rewrite task, or a maintenance job's file task."""

    @property
    def io_properties(self) -> dict[str, str]: ...

    @property
    def storage_secret(self) -> str | None: ...


class StorageCredentialsMissing(RuntimeError):
    """The task names a catalog Secret that is not mounted where the optimizer looks."""


def task_io_properties(
    properties: Mapping[str, str], secret: str | None, secret_properties: Mapping[str, str]
) -> tuple[dict[str, str], str | None]:
    """A task's ``io_properties`` and ``storage_secret`` for a table whose FileIO has `properties`.

    Without a `secret`, the storage credentials travel in the task. With one, those whose
    value is the Secret's (`secret_properties`) stay behind and the task names the Secret.
    """
    io = {key: str(value) for key, value in without_catalog_credentials(properties).items()}
    if secret is None:
        return io, None
    from_secret = {
        key for key, value in io.items() if is_credential_key(key) and secret_properties.get(key) == value
    }
    return {
        key: value for key, value in io.items() if key not in from_secret
    }, secret if from_secret else None


def executor_io_properties(spec: TaskStorage, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The FileIO properties a task runs with: its own, plus the storage credentials of the
    catalog Secret it names, read from the files of the mounted Secret."""
    if spec.storage_secret is None:
        return dict(spec.io_properties)
    root = Path(environ.get(CATALOG_SECRETS_DIR_ENV, DEFAULT_CATALOG_SECRETS_DIR))
    directory = root / spec.storage_secret
    if not directory.is_dir():
        raise StorageCredentialsMissing(
            f"the storage credentials of catalog Secret {spec.storage_secret!r} are not mounted at "
            f"{directory}: the optimizer's pods mount the Secrets of their group's tables (set "
            f"{CATALOG_SECRETS_DIR_ENV} where they are elsewhere)"
        )
    # A mounted Secret holds its keys as files, beside kubelet's ``..data`` bookkeeping.
    mounted = {
        entry.name: entry.read_text()
        for entry in directory.iterdir()
        if not entry.name.startswith(".") and entry.is_file()
    }
    storage = {
        key: value for key, value in without_catalog_credentials(mounted).items() if is_credential_key(key)
    }
    return {**spec.io_properties, **storage}
