"""Which catalog and FileIO properties are credentials, and hiding them wherever floe writes text.

A property is a credential by its key, never by its value: a key whose name suggests a secret
(`floe.kit.secret_names`: tokens, keys, signatures, credentials, passwords, secrets, sessions,
auth...; pyiceberg's S3, GCS and ADLS credential properties among them), a ``header.`` property,
or one the user marks secret (a catalog's ``secretProperties``). In any text, the user-info part
of a URI (``https://user:pass@host``), the value of a query parameter (``?X-Amz-Signature=...``,
``&client_secret=...``, also URL-encoded) and of a quoted mapping key (``'access_token': '...'``)
whose name suggests a secret are credentials too. Ordinary values (``rest``, a warehouse path)
stay readable, so that messages still say which catalog failed.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping

from floe.kit.secret_names import suggests_secret

MASK = "***"

STORAGE_SECRET_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""What a task's ``storage_secret`` (a catalog Secret's name) may be; at most `MAX_SECRET_NAME` long."""
MAX_SECRET_NAME = 253

_URI_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^/@\s?#]+)@")
_PARAMETER = re.compile(
    r"(?P<key>(?:^|[\s?&;,(\[{'\"]|%26|%3[fF])(?P<name>[A-Za-z][\w.\-]*)(?:=|%3[dD]))"
    r"(?P<value>(?:(?!%26)[^&;#\s'\",)\]}])+)"
)
"""``name=value`` in a query string, a SAS token or a message (``%3D``/``%26``: URL-encoded)."""
_QUOTED_ENTRY = re.compile(
    r"(?P<key>(?P<quote>['\"])(?P<name>[^'\"\s]{1,200})(?P=quote)\s*:\s*(?P<open>['\"]))"
    r"(?P<value>[^'\"]*)(?P=open)"
)
"""``'name': 'value'`` or ``"name": "value"``: a mapping printed by Python or as JSON."""

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


def is_credential_key(key: str, marked: Iterable[str] = ()) -> bool:
    """Whether a property of this name holds a credential: its name suggests a secret, it is an
    HTTP header, or it is among the names `marked` secret by the user."""
    return suggests_secret(key) or key.startswith("header.") or key in marked


def credential_values(properties: Mapping[str, str], marked: Iterable[str] = ()) -> set[str]:
    """The values of the credential properties (`marked`: names the user marks secret), and the
    user-info of URI values."""
    return _credential_values(properties.items(), frozenset(marked))


def _credential_values(properties: Iterable[tuple[str, str]], marked: frozenset[str]) -> set[str]:
    values: set[str] = set()
    for key, value in properties:
        if is_credential_key(key, marked) and value:
            values.add(value)
        values.update(match.group("userinfo") for match in _URI_USERINFO.finditer(value))
    return values


def _masked_if_secret(match: re.Match[str]) -> str:
    if suggests_secret(match.group("name")):
        return f"{match.group('key')}{MASK}"
    # An ordinary parameter's value may be a URL-encoded URL with secret parameters of its own.
    return match.group("key") + _PARAMETER.sub(_masked_if_secret, match.group("value"))


def _masked_entry(match: re.Match[str]) -> str:
    if not suggests_secret(match.group("name")):
        return match.group(0)
    return f"{match.group('key')}{MASK}{match.group('open')}"


def mask_credentials(text: str, values: Iterable[str] = ()) -> str:
    """`text` with `values` (longest first), URI user-info, and the values of query parameters and
    quoted mapping keys whose names suggest a secret masked."""
    for value in sorted(set(values), key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    text = _URI_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    text = _QUOTED_ENTRY.sub(_masked_entry, text)
    return _PARAMETER.sub(_masked_if_secret, text)


def without_catalog_credentials(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties a FileIO may get: the catalog's own authentication taken out."""
    return {
        key: value
        for key, value in properties.items()
        if key not in CATALOG_ONLY_KEYS and not key.startswith(("header.", "rest."))
    }


class Redactor:
    """Masks credentials in a text: the values of the credential properties it was told about
    (`floe.kit.redaction`: by key, never ordinary values), and URI user-info and secret query
    parameters wherever they appear."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._marked: set[str] = set()
        self._properties: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def add(self, properties: Mapping[str, str], marked: Iterable[str] = ()) -> None:
        """Remember the credentials among these catalog properties; `marked`: property names the
        user marks secret (a catalog's ``secretProperties``), for these properties and for any
        added before or after, so a Secret read before its table's spec is covered too."""
        with self._lock:
            self._properties.update(properties.items())
            self._marked.update(marked)
            self._values = _credential_values(self._properties, frozenset(self._marked))

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


def install_redaction(redactor: Redactor) -> None:
    """Mask secret values in every record the root logger's handlers write."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter(redactor))
