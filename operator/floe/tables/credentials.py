"""Which catalog and FileIO properties are credentials, and hiding them wherever floe writes text.

A property is a credential by its key, never by its value: ``token``, ``credential``, anything
naming a secret, password, private or access key, session or SAS token (pyiceberg's S3, GCS and
ADLS properties among them). The user-info part of any URI (``https://user:pass@host``) and a
``password=`` query parameter are credentials wherever they appear. Ordinary values (``rest``,
a warehouse path) stay readable, so that messages still say which catalog failed.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping

MASK = "***"

STORAGE_SECRET_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""What a task's ``storage_secret`` (a catalog Secret's name) may be; at most `MAX_SECRET_NAME` long."""
MAX_SECRET_NAME = 253

_SECRET_KEY = re.compile(
    r"(^|[.\-_])(token|credential|credentials|secret|password|passwd|private[.\-_]?key|"
    r"access[.\-_]?key|account[.\-_]?key|sas[.\-_]?token|session[.\-_]?token|api[.\-_]?key)($|[.\-_])",
    re.IGNORECASE,
)
_URI_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^/@\s?#]+)@")
_QUERY_SECRET = re.compile(
    r"(?P<key>[?&;](?:password|passwd|pwd|token|sig|signature)=)[^&;#\s]+", re.IGNORECASE
)

CATALOG_ONLY_KEYS = frozenset(
    {
        "token",
        "credential",
        "scope",
        "audience",
        "resource",
        "oauth2-server-uri",
        "rest.sigv4-enabled",
        "rest.signing-region",
        "rest.signing-name",
        "rest.authorization-url",
    }
)
"""Catalog authentication: the operator's, which commits; never an optimizer's."""


def is_credential_key(key: str) -> bool:
    """Whether a property of this name holds a credential."""
    return _SECRET_KEY.search(key) is not None or key.startswith("header.")


def credential_values(properties: Mapping[str, str]) -> set[str]:
    """The values of the credential properties, and the user-info of URI values."""
    values = {value for key, value in properties.items() if is_credential_key(key) and value}
    for value in properties.values():
        for match in _URI_USERINFO.finditer(value):
            values.add(match.group("userinfo"))
    return values


def mask_credentials(text: str, values: Iterable[str] = ()) -> str:
    """`text` with `values` (longest first), URI user-info and secret query parameters masked."""
    for value in sorted(set(values), key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    text = _URI_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m.group('key')}{MASK}", text)


def without_catalog_credentials(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties a FileIO may get: the catalog's own authentication taken out."""
    return {
        key: value
        for key, value in properties.items()
        if key not in CATALOG_ONLY_KEYS and not key.startswith(("header.", "rest."))
    }


class Redactor:
    """Masks credentials in a text: the values of the credential properties it was told about
    (`floe.tables.credentials`: by key, never ordinary values), and URI user-info and secret query
    parameters wherever they appear."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()

    def add(self, properties: dict[str, str]) -> None:
        """Remember the credentials among these catalog properties."""
        with self._lock:
            self._values.update(credential_values(properties))

    def __len__(self) -> int:
        """How many credential values it masks: a new one can change texts masked before."""
        with self._lock:
            return len(self._values)

    def __call__(self, text: str) -> str:
        """``text`` with every credential replaced by ``***``."""
        with self._lock:
            values = set(self._values)
        return mask_credentials(text, values)


class RedactingFilter(logging.Filter):
    """A log-handler filter that masks secret values in the formatted message."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        """Replace the record's message by its redacted rendering; never drops a record."""
        message = record.getMessage()
        redacted = self.redactor(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True
