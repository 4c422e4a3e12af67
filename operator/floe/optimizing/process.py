"""One optimizing process of one table, from its tasks' results to its commit.

The process owns what its tasks produced, the commit of it with the one retry policy
(`CommitPolicy`), and the one cleanup rule: what it wrote and no commit references is deleted
(its own file names, in its own output directories), unless a commit attempt may have landed
unseen, when the files are left to orphan cleanup, which keeps what a snapshot references.
The engine (`ProcessRunner`) and `floe optimize` drive the same object; the engine retries a
commit the catalog could not take, `floe optimize` fails at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pyiceberg.table import Table

from floe.commit.request import CommitFailed, CommitPending
from floe.commit.rewrite import CommitHistory, RewriteCommitResult, commit_rewrite
from floe.kit.files import delete_paths
from floe.optimizing.commit_request import ProcessFailed, commit_request
from floe.optimizing.leftovers import remove_uncommitted_outputs
from floe.optimizing.specs import PlannedProcess
from floe.planning.plan import OptimizingType
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.rewrite.result_check import check_result, own_files
from floe.scheduling.records import ProcessWork
from floe.tables.support import UnsupportedTableError

log = logging.getLogger(__name__)


class ProcessState(StrEnum):
    """Where a process is; COMMITTED and FAILED are final."""

    RUNNING = "running"
    COMMIT_DELAYED = "commit-delayed"
    """The catalog could not take the commit (`CommitPending`): the files are kept and the
    commit is tried again at `retry_at`."""
    COMMITTED = "committed"
    FAILED = "failed"


@dataclass(frozen=True)
class CommitPolicy:
    """How a commit the catalog could not take is retried: after `first_delay_s`, then twice as
    long each time, up to `max_delay_s`; with `retry_pending` off (``floe optimize``: nothing
    retries it later) the process fails at once."""

    first_delay_s: float = 5.0
    max_delay_s: float = 300.0
    retry_pending: bool = True

    def next_delay_s(self, previous_s: float | None) -> float:
        """The delay before the next attempt, after one of `previous_s` (None: the first)."""
        return self.first_delay_s if previous_s is None else min(previous_s * 2, self.max_delay_s)


@dataclass(frozen=True)
class ProcessTimeline:
    """When the engine took a process's steps before its tasks ran (its clock's seconds)."""

    pending_since_s: float
    """When the table became due."""
    planning_started_s: float
    planned_s: float


@dataclass(frozen=True)
class CommitStep:
    """What one `OptimizingProcess.commit` did."""

    state: ProcessState
    result: RewriteCommitResult | None = None
    error: Exception | None = None
    delay_s: float | None = None
    """COMMIT_DELAYED: how long until the next attempt."""
    first_delay: bool = False
    """COMMIT_DELAYED: whether this is the process's first delay (users hear of it once)."""


class OptimizingProcess:
    """One process: its planned tasks, the table it rewrites, the check of its tasks' results,
    what they produced and its commit. One driver commits it at a time; results may be checked
    from any thread."""

    def __init__(
        self,
        planned: PlannedProcess,
        table: Table,
        optimizing_type: OptimizingType,
        group: str = "",
        table_id: str = "",
        policy: CommitPolicy | None = None,
        timeline: ProcessTimeline | None = None,
    ) -> None:
        self.planned = planned
        self.timeline = timeline
        """When it became due, was planned and was queued; None embedded (`floe optimize`)."""
        self.work: ProcessWork | None = None
        """When its tasks ran and what they took, once they ended."""
        self.table_id = table_id
        """The table's id in the engine; empty embedded."""
        self.table = table
        self.optimizing_type = optimizing_type
        self.group = group
        """The group whose executors run it (its key in the task service); empty embedded."""
        self.policy = policy or CommitPolicy()
        self.state = ProcessState.RUNNING
        self.history = CommitHistory()
        """Carried across commit attempts: whether one may have landed unseen."""
        self.retry_at: float | None = None
        self._delay_s: float | None = None
        self._results: list[RewriteTaskResult] = []
        self._failures: dict[str, str] = {}
        self._allow_partial_commit = False
        self._succeeded = True

    @property
    def process_id(self) -> str:
        """The process's id, which prefixes every file name it writes."""
        return self.planned.process_id

    @property
    def output_dirs(self) -> set[str]:
        """Where its tasks write."""
        return {spec.output_dir for spec in self.planned.specs}

    @property
    def results(self) -> tuple[RewriteTaskResult, ...]:
        """What its succeeded tasks returned (once they ended)."""
        return tuple(self._results)

    @property
    def outcome_unknown(self) -> bool:
        """Whether a commit attempt may have landed unseen: nothing of it may be deleted."""
        return self.history.outcome_unknown

    def tasks_ended(
        self,
        results: Sequence[RewriteTaskResult],
        failures: Mapping[str, str],
        allow_partial_commit: bool,
        succeeded: bool = True,
        work: ProcessWork | None = None,
    ) -> None:
        """Its tasks are done: `results` of those that succeeded, the last error of each that
        ran out of retries; `succeeded` False when the process failed (its other tasks were
        cancelled); `work` when they ran. The commit takes these."""
        self.work = work
        self._results = list(results)
        self._failures = dict(failures)
        self._allow_partial_commit = allow_partial_commit
        self._succeeded = succeeded

    def retry_due(self, now: float) -> bool:
        """Whether a delayed commit's next attempt is due."""
        return (
            self.state == ProcessState.COMMIT_DELAYED and self.retry_at is not None and self.retry_at <= now
        )

    def commit(self, now: float) -> CommitStep:
        """Commit what the tasks produced (with partial commit, the succeeded tasks' part).

        A failure deletes what the process wrote, unless a commit attempt may have landed; a
        commit the catalog could not take is delayed by the policy, or fails it.
        """
        try:
            if not self._succeeded and not self._allow_partial_commit and not self._failures:
                raise ProcessFailed("process failed")
            request = commit_request(self.planned, self._results, self._failures, self._allow_partial_commit)
            result = commit_rewrite(self.table, request, history=self.history)
        except CommitPending as exc:
            return self._pending(exc, now)
        except (ProcessFailed, CommitFailed, UnsupportedTableError) as exc:
            return self._fail(exc)
        self.discard(committed=frozenset(f.file_path for f in request.added_files))
        self.state = ProcessState.COMMITTED
        return CommitStep(ProcessState.COMMITTED, result=result)

    def _pending(self, exc: CommitPending, now: float) -> CommitStep:
        if self.policy.retry_pending:
            first = self._delay_s is None
            self._delay_s = self.policy.next_delay_s(self._delay_s)
            self.retry_at = now + self._delay_s
            self.state = ProcessState.COMMIT_DELAYED
            return CommitStep(
                ProcessState.COMMIT_DELAYED, error=exc, delay_s=self._delay_s, first_delay=first
            )
        if self.outcome_unknown:
            # It may have landed: the files stay for orphan cleanup and the caller hears so.
            self.state = ProcessState.FAILED
            return CommitStep(ProcessState.FAILED, error=exc)
        failed = ProcessFailed(f"the commit failed: {exc}")
        failed.__cause__ = exc
        return self._fail(failed)

    def _fail(self, exc: Exception) -> CommitStep:
        self.discard()
        self.state = ProcessState.FAILED
        return CommitStep(ProcessState.FAILED, error=exc)

    def discard(self, committed: frozenset[str] = frozenset()) -> list[str]:
        """Delete what the process wrote and `committed` does not hold, lost attempts' files too;
        nothing while a commit attempt may have landed unseen. Returns what was deleted."""
        if self.outcome_unknown:
            log.warning(
                "%s: a commit attempt may have landed; its files are kept for orphan cleanup", self.process_id
            )
            return []
        reported = [written.path for result in self._results for written in result.files]
        try:
            removed = remove_uncommitted_outputs(
                self.table.io, self.process_id, self.output_dirs, committed, reported
            )
        except OSError as exc:
            log.warning("%s: could not remove its uncommitted files: %s", self.process_id, exc)
            return []
        if removed:
            log.info("%s: removed %d files no commit references", self.process_id, len(removed))
        return removed

    def check(self, spec: RewriteTaskSpec, result: RewriteTaskResult) -> None:
        """Raise ResultCheckFailed unless `result` is what `spec`'s attempt may produce, read
        through the table's own FileIO (credentials a task does not carry included); OSError
        when the storage does not answer. Safe from any thread."""
        check_result(spec, result, self.table.io)

    def delete_refused(self, spec: RewriteTaskSpec, result: RewriteTaskResult) -> list[str]:
        """Delete the files a refused result names that are the process's own (its names in its
        output directories): the task's retry writes them again; no other task's are touched."""
        return delete_paths(self.table.io, own_files(spec, result))
