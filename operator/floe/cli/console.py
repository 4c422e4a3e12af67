"""What the ``floe`` command prints through: consoles that mask the credentials of the catalog
configs the command read."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

from floe.kit.redaction import Redactor

REDACT = Redactor()
"""Masks the credentials of the catalog configs this command read, in everything it prints."""


class _RedactingConsole(Console):
    """A console whose texts pass through `REDACT` before rich renders them (once rendered, a
    secret may be split by styles or wrapping); tables are redacted cell by cell where built."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """`Console.print`, credentials masked in every text."""
        super().print(*(REDACT(o) if isinstance(o, str) else o for o in objects), **kwargs)


def console(stderr: bool) -> Console:
    """A console that masks credentials, does not wrap messages, and prints wide tables when piped."""
    stream = sys.stderr if stderr else sys.stdout
    return _RedactingConsole(stderr=stderr, soft_wrap=True, width=None if stream.isatty() else 160)
