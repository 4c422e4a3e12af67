"""Optimistic commits on main: decide on the current head, commit, and redo on a conflict."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from floe.commit.snapshot import CommitStateUnknown, SnapshotDraft

log = logging.getLogger(__name__)

T = TypeVar("T")


def on_fresh_head(table: Table, attempt: Callable[[SnapshotDraft], T], max_attempts: int) -> T:
    """Run `attempt` on a draft of main's current head, redoing it when main moved meanwhile.

    `attempt` reads what it needs from the draft's metadata and may commit the draft
    (``assert-ref-snapshot-id`` on main); when that commit conflicts, the table is reloaded
    and `attempt` runs again on the new head, so its decisions are always made on the
    snapshot it replaces. Metadata files of a failed attempt are deleted.

    A commit whose outcome is unknown (`CommitStateUnknown`) is redone the same way, its
    files kept: on the reloaded head `attempt` sees whether it landed. The assertion on
    main's head lets at most one of the two land. When every attempt's outcome was unknown,
    the last CommitStateUnknown is raised; errors reading the table propagate.
    """
    last_error: CommitFailedException | CommitStateUnknown | None = None
    for number in range(1, max_attempts + 1):
        table.refresh()
        draft = SnapshotDraft(table=table, metadata=table.metadata)
        try:
            result = attempt(draft)
        except CommitFailedException as exc:
            draft.discard()
            last_error = exc
            log.info("attempt %d on %s hit a concurrent commit: %s", number, table.name(), exc)
            time.sleep(min(0.1 * 2**number, 2.0))
            continue
        except CommitStateUnknown as exc:
            last_error = exc
            log.warning("attempt %d on %s may or may not have committed: %s", number, table.name(), exc)
            time.sleep(min(0.1 * 2**number, 2.0))
            continue
        except BaseException:
            draft.discard()
            raise
        table.refresh()
        return result
    if isinstance(last_error, CommitStateUnknown):
        raise last_error
    raise CommitFailedException(
        f"{table.name()}: main moved during each of {max_attempts} attempts; last: {last_error}"
    )
