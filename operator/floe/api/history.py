"""What floe did to a table, one run at a time: an optimizing process or a maintenance job.

A `RunRecord` is the same record everywhere it is kept: the last few in an OptimizedTable's
status (`kubectl get ot NAME -o yaml`), every one in the history table a user names (one row
each), and what `floe history` prints.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, ValidationError

from floe.api.meta import MAX_TABLE_IDENTIFIER_LENGTH, MAX_TIME_LENGTH, WireModel

RunKind = Literal["minor", "major", "full", "expire", "orphans", "manifests", "dangling-deletes", "retention"]
"""What a run is: an optimizing type, or a maintenance job."""
Outcome = Literal["committed", "failed", "done", "refused"]
"""How a run ended: an optimizing process committed or failed; a maintenance job was done,
failed or was refused (its error names why)."""
STATUS_HISTORY = 5
"""Runs an OptimizedTable's status keeps: enough to see a pattern, little enough that 10,000
tables' statuses stay small."""

MAX_RUN_TEXT = 1024
"""A run's trigger and error are clipped to this: a status holds several runs."""

Text = Annotated[str, StringConstraints(max_length=MAX_RUN_TEXT)]
Time = Annotated[str, StringConstraints(max_length=MAX_TIME_LENGTH)]


class RunPhases(WireModel):
    """Seconds a run spent in each phase; a phase it did not go through is 0."""

    queued: float = Field(default=0.0, ge=0, description="due, waiting to be planned (its group's queue)")
    planning: float = Field(default=0.0, ge=0, description="loading, scanning and planning the table")
    waiting: float = Field(default=0.0, ge=0, description="planned, waiting for a free executor")
    running: float = Field(default=0.0, ge=0, description="from its first task's start to its last's end")
    committing: float = Field(default=0.0, ge=0, description="committing, retries and delays included")


class RunRecord(WireModel):
    """One run of an optimizing process or a maintenance job on one table."""

    table: str = Field(
        max_length=MAX_TABLE_IDENTIFIER_LENGTH,
        description="the OptimizedTable as NAMESPACE/NAME, or the table's name embedded (floe run)",
    )
    run_id: str = Field(
        max_length=MAX_TABLE_IDENTIFIER_LENGTH + 32,
        description="the process's id (the table's name, a time and a tag: its files' names start with "
        "it), or the maintenance job's run",
    )
    kind: RunKind = Field(description="minor, major or full optimizing, or the maintenance job")
    trigger: Text = Field(default="", description="why it ran: the triggers that fired, with their values")
    started: Time = Field(description="when the table became due (optimizing) or the job started (RFC 3339)")
    finished: Time = Field(description="when it committed, failed or ended (RFC 3339)")
    outcome: Outcome = Field(
        description="committed or failed (an optimizing process); done, failed or refused (a job)"
    )
    error: Text = Field(default="", description="why it failed or was refused")
    snapshot_id: int | None = Field(default=None, description="the snapshot its commit made")
    files_in: int = Field(default=0, ge=0, description="data and delete files it read to rewrite or convert")
    bytes_in: int = Field(default=0, ge=0, description="bytes of those files")
    rows_in: int = Field(default=0, ge=0, description="rows its tasks read")
    files_out: int = Field(
        default=0, ge=0, description="files it wrote (optimizing) or removed (maintenance)"
    )
    bytes_out: int = Field(default=0, ge=0, description="bytes of those files")
    rows_out: int = Field(default=0, ge=0, description="rows it wrote")
    delete_files_retired: int = Field(default=0, ge=0, description="delete files its commit removed")
    phases: RunPhases = Field(default_factory=RunPhases, description="seconds it spent in each phase")
    executor_seconds: float = Field(
        default=0.0,
        ge=0,
        description="executor core-seconds its tasks took: each task holds one core while it runs, "
        "retried attempts included; 0 for a job the operator ran itself",
    )
    task_attempts: int = Field(default=0, ge=0, description="task attempts, retries included")
    commit_attempts: int = Field(
        default=0, ge=0, description="commit attempts; more than one after conflicts"
    )


def status_runs(status: Mapping[str, Any]) -> list[RunRecord]:
    """The runs an OptimizedTable's status records, oldest first; a record this version cannot
    read (a later version's, a hand edit) is left out."""
    recorded = status.get("history")
    runs = []
    for item in recorded if isinstance(recorded, list) else []:
        try:
            runs.append(RunRecord.model_validate(item))
        except ValidationError:
            continue
    return runs[-STATUS_HISTORY:]


class RunLog:
    """A table's last `STATUS_HISTORY` runs, oldest first, as its status shows them."""

    def __init__(self) -> None:
        self._runs: deque[RunRecord] = deque(maxlen=STATUS_HISTORY)

    def __iter__(self) -> Iterator[RunRecord]:
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def record(self, run: RunRecord) -> None:
        """A run ended: the oldest run kept gives way."""
        self._runs.append(run)

    def restore(self, runs: Collection[RunRecord]) -> None:
        """Runs recorded before a restart (in status), unless runs were recorded since."""
        if not self._runs:
            self._runs.extend(runs)
