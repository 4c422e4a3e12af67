"""One optimizing process over one table, run on a local Spark: refresh, plan, rewrite, commit."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyiceberg.table import Table
from pyspark.sql import SparkSession

from floe.api.table import ClusteringSpec
from floe.commit.rewrite import RewriteCommitResult
from floe.local.interrupt import Interrupted, deferred_interrupts
from floe.local.process_tasks import TaskRun, run_process_tasks
from floe.optimizing.process import CommitPolicy, OptimizingProcess, ProcessState
from floe.optimizing.specs import DEFAULT_DELETE_MEMORY_LIMIT, build_process
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingPlan, OptimizingType
from floe.planning.planner import plan_optimizing
from floe.protocol.rewrite_task import RewriteTaskResult
from floe.tables.history import optimizing_history
from floe.tables.scan import ScannedTable
from floe.tables.support import scan_supported
from floe_optimizer.spark_runner import TaskOutcome


@dataclass
class OptimizeResult:
    """What one `optimize_once` call did."""

    table_name: str
    plan: OptimizingPlan
    scanned: ScannedTable
    commit: RewriteCommitResult | None = None
    task_results: list[RewriteTaskResult] = field(default_factory=list)
    task_errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    check_seconds: float = 0.0
    """Time spent checking the tasks' results (`check_result`), footers read included."""

    @property
    def bytes_read(self) -> int:
        """Input bytes of the tasks that succeeded."""
        return sum(r.bytes_read for r in self.task_results)


def plan_table(
    table: Table,
    config: OptimizingConfig,
    forced: OptimizingType | None = None,
    now_s: float | None = None,
    max_tasks: int | None = None,
) -> tuple[ScannedTable, OptimizingPlan]:
    """Scan the current snapshot and plan it, with interval triggers read from history; a table
    floe cannot handle is refused (`UnsupportedTableError`) before anything is planned."""
    scanned = scan_supported(".".join(table.name()), table)
    history = optimizing_history(table.metadata)
    plan = plan_optimizing(
        scanned.files,
        config,
        now_s=time.time() if now_s is None else now_s,
        last_minor_s=history.last_minor_s,
        last_full_s=history.last_full_s,
        forced=forced,
        max_tasks=max_tasks,
    )
    return scanned, plan


def optimize_once(
    table: Table,
    table_name: str,
    config: OptimizingConfig,
    spark: Callable[[], SparkSession],
    forced: OptimizingType | None = None,
    num_retries: int = 5,
    allow_partial_commit: bool = False,
    delete_memory_limit: int = DEFAULT_DELETE_MEMORY_LIMIT,
    on_plan: Callable[[OptimizingPlan], None] | None = None,
    on_task_done: Callable[[TaskOutcome], None] | None = None,
    clustering: ClusteringSpec | None = None,
) -> OptimizeResult:
    """Plan the table and, if there is work, rewrite on Spark and commit one replace snapshot.

    The tasks run as the engine's do (`run_process_tasks`): a failed attempt is retried up to
    `num_retries` times; a task out of retries ends the process, cancelling the others, which
    then fails (ProcessFailed) unless partial commit is allowed, when what succeeded until then
    is committed. A commit that cannot be made (the catalog or the storage failing) is
    ProcessFailed too, its files deleted, unless it may have landed: then CommitPending, and the
    files stay for orphan cleanup. The commit and the cleanup are the engine's
    (`OptimizingProcess`), with one policy difference: nothing retries a commit here later.
    Spark is only started when the plan has tasks. Rows are z-ordered by `clustering` when set,
    else written in the table's sort order, if it has one.
    """
    started = time.monotonic()
    scanned, plan = plan_table(table, config, forced)
    result = OptimizeResult(table_name=table_name, plan=plan, scanned=scanned)
    if on_plan is not None:
        on_plan(plan)
    if plan.is_empty or plan.optimizing_type is None:
        result.seconds = time.monotonic() - started
        return result
    process = OptimizingProcess(
        build_process(table, table_name, scanned, plan, config, delete_memory_limit, clustering=clustering),
        table,
        plan.optimizing_type,
        policy=CommitPolicy(retry_pending=False),
    )
    session = spark()
    run = TaskRun()
    try:
        outcome = run_process_tasks(process, session, num_retries, allow_partial_commit, run, on_task_done)
    except Interrupted as stop:
        # The jobs are cancelled and the executors idle: nothing of the process stays.
        process.tasks_ended(run.accepted, {}, allow_partial_commit=False)
        removed = process.discard()
        stop.outcome = (
            f"optimizing of {table_name} abandoned, nothing committed; {len(removed)} files it wrote deleted"
        )
        raise
    result.task_results = list(outcome.results)
    result.task_errors = dict(outcome.failures)
    result.check_seconds = run.check_seconds
    process.tasks_ended(outcome.results, outcome.failures, outcome.allow_partial_commit, outcome.succeeded)
    try:
        # A signal now waits for the commit's end: it is never cut in half.
        with deferred_interrupts():
            step = process.commit(time.time())
            if step.state != ProcessState.COMMITTED:
                assert step.error is not None  # a failed step carries its error
                raise step.error
            result.commit = step.result
    except Interrupted as stop:
        # Raised only once the commit is done: a failed commit raises its own error instead.
        committed = result.commit.snapshot_id if result.commit else "?"
        stop.outcome = f"stopped after committing snapshot {committed} to {table_name}"
        raise
    result.seconds = time.monotonic() - started
    return result
