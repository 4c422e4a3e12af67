"""Catalog Secrets "mounted" for the tests' optimizers, as kubelet mounts them in a group's pods.

Importing this module points ``FLOE_CATALOG_SECRETS_DIR`` at a fresh directory; the tests'
conftest imports it before any Spark starts, so that Spark's Python workers inherit it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from floe.protocol.storage import CATALOG_SECRETS_DIR_ENV

ROOT = Path(tempfile.mkdtemp(prefix="floe-catalog-secrets-"))
os.environ[CATALOG_SECRETS_DIR_ENV] = str(ROOT)


def mount_catalog_secret(name: str, properties: dict[str, str]) -> Path:
    """Lay a catalog Secret out as a mounted volume: one file per key."""
    directory = ROOT / name
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in properties.items():
        (directory / key).write_text(value)
    return directory
