"""The one way floe deletes files: a file already gone counts as deleted.

Every cleanup (a refused result's files, an aborted writer's files, orphans, expired files) is a
loop of delete, maybe warn, go on; `delete_paths` is that loop, so the policy lives in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from pyiceberg.io import FileIO

log = logging.getLogger(__name__)

OnError = Literal["log", "raise"] | Callable[[str, Exception], None]


def delete_quietly(io: FileIO, path: str) -> None:
    """Delete a file, ignoring one that is already gone."""
    try:
        io.delete(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if "not found" not in str(exc).lower() and "no such file" not in str(exc).lower():
            raise


def delete_paths(
    io: FileIO, paths: Iterable[str], *, workers: int = 1, on_error: OnError = "log"
) -> list[str]:
    """Delete `paths` (one already gone counts as deleted); returns those deleted, in the given order.

    `on_error` says what a failed deletion does: ``"raise"`` raises the first error, in the given
    order; ``"log"`` warns of an `OSError` (any other error is raised) and leaves the file for
    orphan cleanup; a callable gets ``(path, error)`` for any `Exception`, for a
    caller that must never raise (a writer aborting while another error is on its way out).
    `workers` > 1 deletes in parallel, as object stores answer one request at a time slowly.
    """

    def delete(path: str) -> str | None:
        try:
            delete_quietly(io, path)
        except Exception as exc:
            if callable(on_error):
                on_error(path, exc)
            elif on_error == "log" and isinstance(exc, OSError):
                log.warning("could not delete %s (left for orphan cleanup): %s", path, exc)
            else:
                raise
            return None
        return path

    if workers <= 1:
        outcomes = [delete(path) for path in paths]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(delete, paths))
    return [path for path in outcomes if path is not None]
