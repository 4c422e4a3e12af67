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
from floe.optimizing.process import CommitPolicy, OptimizingProcess, ProcessState
from floe.optimizing.specs import DEFAULT_DELETE_MEMORY_LIMIT, build_process
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingPlan, OptimizingType
from floe.planning.planner import plan_optimizing
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.rewrite.result_check import ResultCheckFailed
from floe.tables.history import optimizing_history
from floe.tables.scan import ScannedTable
from floe.tables.support import scan_supported
from floe_optimizer.spark_runner import TaskOutcome, run_tasks_on_spark, wait_for_idle_executors


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

    Failed tasks are retried up to `num_retries` times each; then the process fails
    (ProcessFailed) unless partial commit is allowed. A commit that cannot be made (the
    catalog or the storage failing) is ProcessFailed too, its files deleted, unless it may
    have landed: then CommitPending, and the files stay for orphan cleanup. The commit and the
    cleanup are the engine's (`OptimizingProcess`), with one policy difference: nothing retries
    a commit here later. Spark is only started when the plan has tasks. Rows are z-ordered by
    `clustering` when set, else written in the table's sort order, if it has one.
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
    pending = list(process.planned.specs)
    specs = {spec.task_id: spec for spec in pending}
    session = spark()
    try:
        _run_tasks(table, process, session, num_retries, result, specs, pending, on_task_done)
    except Interrupted as stop:
        # The jobs are cancelled; once their tasks stopped writing, nothing of the process stays.
        wait_for_idle_executors(session)
        process.tasks_ended(result.task_results, {}, allow_partial_commit=False)
        removed = process.discard()
        stop.outcome = (
            f"optimizing of {table_name} abandoned, nothing committed; {len(removed)} files it wrote deleted"
        )
        raise
    process.tasks_ended(result.task_results, result.task_errors, allow_partial_commit)
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


def _run_tasks(
    table: Table,
    process: OptimizingProcess,
    session: SparkSession,
    num_retries: int,
    result: OptimizeResult,
    specs: dict[str, RewriteTaskSpec],
    pending: list[RewriteTaskSpec],
    on_task_done: Callable[[TaskOutcome], None] | None,
) -> None:
    """Run the tasks, retrying failed ones; results and errors land in `result`."""
    for attempt in range(num_retries + 1):
        outcomes = run_tasks_on_spark(session, pending, on_done=on_task_done)
        failed_ids = set()
        for outcome in outcomes:
            error = outcome.error
            if isinstance(outcome.result, RewriteTaskResult):
                # Held to the same checks as a remote optimizer's result.
                checking = time.perf_counter()
                try:
                    process.check(specs[outcome.task_id], outcome.result)
                except ResultCheckFailed as exc:
                    # The retry writes the same names: the refused files go now, and no others.
                    process.delete_refused(specs[outcome.task_id], outcome.result)
                    error = f"result refused ({exc.check}): {exc}"
                else:
                    result.check_seconds += time.perf_counter() - checking
                    result.task_results.append(outcome.result)
                    result.task_errors.pop(outcome.task_id, None)
                    continue
            failed_ids.add(outcome.task_id)
            result.task_errors[outcome.task_id] = f"attempt {attempt + 1}: {error}"
        pending = [s for s in pending if s.task_id in failed_ids]
        if not pending:
            break
