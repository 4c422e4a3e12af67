"""What an optimizing process asks a rewrite commit for, and the ways such a commit fails.

Shared by the commit (`floe.commit.rewrite`) and its conflict checks (`floe.commit.validation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.manifest import DataFile


class CommitFailed(RuntimeError):
    """Nothing was committed, and this request never will be.

    ``outcome_unknown``: an earlier attempt's catalog call failed after it may have been
    applied, and was not found since; a catalog that applies requests late could still land
    it, so the process's files stay for orphan cleanup (which keeps what a snapshot references)
    instead of being deleted."""

    outcome_unknown: bool = False


class CommitConflict(CommitFailed):
    """A concurrent commit makes this process's result unsafe; nothing was committed."""


class CommitAbandoned(CommitFailed):
    """The commit could not be made after all retries; nothing was committed."""


class CommitPending(RuntimeError):
    """The commit could not be finished now (the catalog or the storage did not answer, or
    answered so that whether the snapshot landed is unknown): commit the same request again
    later, which finds the snapshot if it landed. Every file the process wrote is kept.

    ``outcome_unknown`` says whether a catalog call may have applied the commit; when it is
    False, nothing was committed, and a caller that gives up may delete the files."""

    def __init__(self, message: str, outcome_unknown: bool) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


@dataclass(frozen=True)
class RewriteRequest:
    """What an optimizing process wants to swap in."""

    process_id: str
    optimizing_type: str
    starting_snapshot_id: int
    starting_sequence_number: int
    rewritten_data_paths: frozenset[str]
    candidate_delete_paths: frozenset[str]
    added_files: tuple[DataFile, ...]
    """New data files, and the position-delete files of converted data files."""
    format_version: int
    """The table's format version at planning: the files were written for it."""
    deferred_partitions: int = 0
    converted_data_paths: frozenset[str] = frozenset()
    """Data files kept, whose deletes the added position-delete files hold."""
    planned_first_row_ids: Mapping[str, int | None] = field(default_factory=dict)
    """The ``first_row_id`` each rewritten or converted data file had at planning (None, or no
    entry: it had none), which the rows the tasks wrote inherit."""
