"""Run records (`floe.api.history.RunRecord`) of what the engine did: one per optimizing process
that committed or failed, one per maintenance job run. Pure: built from what the process, its
tasks and its commit already hold, and the clock's time."""

from __future__ import annotations

from collections import Counter
from typing import cast

from floe.api.history import MAX_RUN_TEXT, Outcome, RunKind, RunPhases, RunRecord
from floe.api.meta import clip, rfc3339
from floe.maintenance.job import MaintenanceJob
from floe.optimizing.process import CommitStep, OptimizingProcess, ProcessState
from floe.planning.plan import OptimizingPlan


def plan_trigger(plan: OptimizingPlan) -> str:
    """Why a plan was made, in its evaluator's words with the values that fired each trigger:
    each distinct reason once, with how many partitions it fired in when more than one."""
    reasons = Counter(p.reason for p in plan.partitions if p.needs_optimizing)
    return "; ".join(f"{reason} ({n} partitions)" if n > 1 else reason for reason, n in reasons.items())


def process_run(table: str, process: OptimizingProcess, step: CommitStep, now_s: float) -> RunRecord:
    """The record of a process whose commit ended (`step`: COMMITTED or FAILED) at ``now_s``."""
    plan = process.planned.plan
    tasks = plan.tasks
    inputs = {f.path: f.size_bytes for task in tasks for f in (*task.data_files, *task.delete_files)}
    results = process.results
    work = process.work
    timeline = process.timeline
    planned_s = timeline.planned_s if timeline is not None else process.planned.started_at
    phases = RunPhases()
    if timeline is not None:
        first_started = work.first_started_s if work is not None else None
        tasks_ended = work.finished_s if work is not None else now_s
        phases = RunPhases(
            queued=_span(timeline.pending_since_s, timeline.planning_started_s),
            planning=_span(timeline.planning_started_s, timeline.planned_s),
            waiting=_span(timeline.planned_s, first_started if first_started is not None else tasks_ended),
            running=_span(first_started, tasks_ended) if first_started is not None else 0.0,
            committing=_span(tasks_ended, now_s),
        )
    committed = step.result if step.state == ProcessState.COMMITTED else None
    # What a failed process wrote was deleted: only a commit's files count as written.
    written = [f for result in results for f in result.files] if committed is not None else []
    assert plan.optimizing_type is not None, "a process is planned with a type"
    return RunRecord(
        table=table,
        run_id=process.process_id,
        kind=cast(RunKind, plan.optimizing_type.label),
        trigger=clip(plan_trigger(plan), MAX_RUN_TEXT),
        started=rfc3339(timeline.pending_since_s if timeline is not None else planned_s),
        finished=rfc3339(now_s),
        outcome="committed" if committed is not None else "failed",
        error=clip(str(step.error), MAX_RUN_TEXT) if committed is None and step.error is not None else "",
        snapshot_id=committed.snapshot_id if committed is not None else None,
        files_in=len(inputs),
        bytes_in=sum(inputs.values()),
        rows_in=sum(result.rows_read for result in results),
        files_out=len(written),
        bytes_out=sum(f.size_bytes for f in written),
        rows_out=sum(f.record_count for f in written if f.content == 0),
        delete_files_retired=committed.removed_delete_files if committed is not None else 0,
        phases=phases,
        executor_seconds=work.task_seconds if work is not None else 0.0,
        task_attempts=work.attempts if work is not None else 0,
        commit_attempts=process.history.attempts,
    )


def maintenance_run(
    table: str,
    run_id: str,
    job: MaintenanceJob,
    started_s: float,
    now_s: float,
    outcome: Outcome,
    error: str = "",
    files_removed: int = 0,
    bytes_removed: int = 0,
    snapshot_id: int | None = None,
    executor_seconds: float = 0.0,
    trigger: str = "",
) -> RunRecord:
    """The record of a maintenance job run that ended at ``now_s`` (``outcome``: done, failed or
    refused); its files out are those it removed."""
    return RunRecord(
        table=table,
        run_id=run_id,
        kind=job.value,
        trigger=clip(trigger, MAX_RUN_TEXT),
        started=rfc3339(started_s),
        finished=rfc3339(now_s),
        outcome=outcome,
        error=clip(error, MAX_RUN_TEXT),
        snapshot_id=snapshot_id,
        files_out=files_removed,
        bytes_out=bytes_removed,
        phases=RunPhases(running=_span(started_s, now_s)),
        executor_seconds=executor_seconds,
    )


def _span(start_s: float, end_s: float) -> float:
    return max(0.0, end_s - start_s)
