"""A REST catalog's HTTP calls, each within its catalog's `RequestBudget`.

The budget sits in the catalog's own ``requests`` session, as an adapter around the one the
session had (pyiceberg's SigV4 signing, or plain HTTP), so that every call pyiceberg makes for
floe (config, token, load, commit) counts, whatever made it. A 429 is retried after the pause
it asks for, whatever the method: the catalog did not act on the request. A 503 is retried only
for a GET or HEAD: a commit that met one may have landed, and the commit's own checks decide.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any

from pyiceberg.catalog.rest import RestCatalog
from requests import PreparedRequest, Response
from requests.adapters import BaseAdapter

from floe.tables.pyiceberg_compat import rest_session
from floe.tables.request_budget import BudgetExhausted, Priority, RequestBudget, current_priority

THROTTLED_RETRIES = 4
"""Further tries of a call the catalog answered 429 (or 503, for a read) before its answer is given."""
IDEMPOTENT = frozenset({"GET", "HEAD"})


class BudgetedAdapter(BaseAdapter):
    """Sends through `inner` within `budget`."""

    def __init__(self, inner: BaseAdapter, budget: RequestBudget) -> None:
        super().__init__()
        self.inner = inner
        self.budget = budget

    def send(self, request: PreparedRequest, **kwargs: Any) -> Response:  # type: ignore[override]
        """Send `request` when its catalog's budget allows, again after a 429 (or a read's 503)."""
        priority = current_priority()
        for attempt in range(THROTTLED_RETRIES + 1):
            self.budget.acquire(priority)
            try:
                response = self.inner.send(request, **kwargs)
            finally:
                self.budget.release()
            pause = self.budget.answered(response.status_code, retry_after_s(response.headers))
            if pause > 0.0 and priority == Priority.REFRESH:
                # A refresh never waits: the table stays due, and is asked after the pause.
                response.close()
                self.budget.held_back()
                raise BudgetExhausted(f"the catalog answered {response.status_code}: wait {pause:g}s")
            retry = response.status_code == 429 or request.method in IDEMPOTENT
            if pause == 0.0 or not retry or attempt == THROTTLED_RETRIES:
                return response
            response.close()
        raise AssertionError("unreachable: the last attempt returns")

    def close(self) -> None:
        """Close the adapter wrapped."""
        self.inner.close()


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """A ``Retry-After`` header's wait in seconds (a number or an HTTP date); None if absent or unreadable."""
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def budget_rest_catalog(catalog: RestCatalog, budget: RequestBudget) -> None:
    """Put every later call of `catalog` within `budget` (once: a budgeted catalog is left as it is)."""
    session = rest_session(catalog)
    uri = catalog.uri
    inner = session.get_adapter(uri)
    if not isinstance(inner, BudgetedAdapter):
        session.mount(uri, BudgetedAdapter(inner, budget))
