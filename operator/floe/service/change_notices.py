"""Change notices: a writer's pipeline or a catalog's event relay tells floe a table changed, and
the table is refreshed at the engine's next round instead of at its next scheduled check.

A notice is accepted only with the notice token (the operator's ``--notice-token-file``), a
secret apart from the optimizers' registration token: whoever may poke a refresh may not take
tasks. A notice costs one refresh of the tables it names, which a refresh would have made anyway;
it reads, changes or skips nothing else.
"""

from __future__ import annotations

import hmac
import re
import threading
from collections.abc import Callable

from floe.protocol.errors import Unauthorized

TableListener = Callable[[str, str | None], list[str]]
"""Given a table identifier (``namespace.table``) and a catalog name (None: any), refreshes the
tables it names and returns their ids (empty: floe has no such table)."""

NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-$]{0,254}$")
"""A namespace level or a table name, as floe takes them in a path: no dots, slashes or spaces."""


class UnknownTable(LookupError):
    """No table floe optimizes has that identifier (in that catalog)."""


class ChangeNotices:
    """Who may send notices, and where they go."""

    def __init__(self) -> None:
        self._token: str | None = None
        self._listener: TableListener | None = None
        self._lock = threading.Lock()
        self.accepted = 0
        """Notices that named a table floe optimizes."""

    def allow(self, token: str) -> None:
        """Accept notices that present `token` (non-empty)."""
        if not token:
            raise ValueError("the notice token must not be empty")
        self._token = token

    def listen(self, listener: TableListener) -> None:
        """Send every accepted notice to `listener` (the engine's)."""
        self._listener = listener

    def check_token(self, presented: str | None) -> None:
        """Unauthorized unless `presented` is the notice token (and notices are on at all)."""
        expected = self._token
        if expected is None:
            raise Unauthorized(
                "change notices are off: start the operator with --notice-token-file (the chart's "
                "changeNotices.existingSecret)"
            )
        if not presented:
            raise Unauthorized("missing notice token: send 'Authorization: Bearer <notice token>'")
        # Constant time: the comparison must not tell a caller how much of its guess was right.
        if not hmac.compare_digest(presented.encode(), expected.encode()):
            raise Unauthorized("wrong notice token: it is not the one floe was given")

    def table_changed(self, namespace: str, table: str, catalog: str | None = None) -> list[str]:
        """Refresh the tables named ``namespace.table`` (multi-level namespaces joined by dots or
        by the REST protocol's unit separator); returns their ids. ValueError for a malformed
        name, `UnknownTable` when floe optimizes no such table."""
        levels = namespace.replace("\x1f", ".").split(".")
        for part in (*levels, table):
            if not NAME.match(part):
                raise ValueError(f"{part!r} is not a namespace or table name (letters, digits, _, - and $)")
        identifier = ".".join((*levels, table))
        listener = self._listener
        found = listener(identifier, catalog) if listener is not None else []
        if not found:
            where = f" of catalog {catalog!r}" if catalog else ""
            raise UnknownTable(f"floe optimizes no table {identifier!r}{where}")
        with self._lock:
            self.accepted += 1
        return found
