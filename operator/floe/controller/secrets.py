"""Catalog properties from Secrets, and keeping their values out of everything floe writes.

A table's ``spec.catalog.secretRef`` names a Secret in the table's namespace whose keys
are pyiceberg catalog properties. The values reach the engine only; every status field
and Event message passes through `Redactor`, and the operator's log handlers filter too,
because a catalog error can quote its URI, password included.
"""

from __future__ import annotations

import logging
import threading

from floe.api.models import OptimizedTable

MASK = "***"
MIN_SECRET_LENGTH = 4
"""Shorter values ("1", "true") would mask ordinary words; they are not secrets worth hiding."""


class Redactor:
    """Masks every secret value it was told about, wherever it appears in a text."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()

    def add(self, values: dict[str, str]) -> None:
        """Remember these values as secret."""
        with self._lock:
            self._values.update(v for v in values.values() if len(v) >= MIN_SECRET_LENGTH)

    def __call__(self, text: str) -> str:
        """``text`` with every secret value replaced by ``***`` (longest first, so overlaps mask fully)."""
        with self._lock:
            values = sorted(self._values, key=len, reverse=True)
        for value in values:
            text = text.replace(value, MASK)
        return text


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


def with_catalog_properties(resource: OptimizedTable, properties: dict[str, str]) -> OptimizedTable:
    """The table with the Secret's properties under its inline ones (inline wins: it is explicit)."""
    catalog = resource.spec.catalog
    merged = {**properties, **catalog.properties}
    spec = resource.spec.model_copy(update={"catalog": catalog.model_copy(update={"properties": merged})})
    return resource.model_copy(update={"spec": spec})
