"""The optimizing process object: its commit policy's backoff, its states through a commit the
catalog cannot take, and its one cleanup rule, on a real SQL-catalog table (no Spark: the
process's own files stand in for what its tasks wrote)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from test_correctness import CONFIG, SCHEMA, Writer

from floe.commit.request import CommitPending
from floe.local.optimize import plan_table
from floe.optimizing import process as process_module
from floe.optimizing.commit_request import ProcessFailed
from floe.optimizing.process import CommitPolicy, OptimizingProcess, ProcessState
from floe.optimizing.specs import build_process
from floe.planning.plan import OptimizingType
from floe.tables.writer import conform


def test_the_commit_backoff_doubles_up_to_five_minutes() -> None:
    policy = CommitPolicy()
    delays: list[float] = []
    previous = None
    for _ in range(9):
        previous = policy.next_delay_s(previous)
        delays.append(previous)
    assert delays == [5, 10, 20, 40, 80, 160, 300, 300, 300]


@pytest.fixture
def small_process(tmp_path: Path) -> tuple[OptimizingProcess, Path]:
    """A planned full optimizing of a small table, and a file the process 'wrote' in its output dir."""
    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", SCHEMA)
    writer = Writer(table)
    for _ in range(3):
        table.append(conform(table, writer.rows(5)))
    scanned, plan = plan_table(table, CONFIG, OptimizingType.FULL)
    assert plan.optimizing_type is not None
    planned = build_process(table, "db.t", scanned, plan, CONFIG)
    spec = planned.specs[0]
    written = Path(spec.output_dir.removeprefix("file://")) / f"{spec.file_name_prefix}-00000.parquet"
    written.parent.mkdir(parents=True, exist_ok=True)
    written.write_bytes(b"not committed")
    return OptimizingProcess(planned, table, plan.optimizing_type), written


def _pending_commits(monkeypatch: pytest.MonkeyPatch, process: OptimizingProcess, unknown: bool) -> None:
    """The catalog cannot take the commit (and with `unknown`, an attempt may have landed)."""

    def pending(*_: object, **__: object) -> None:
        process.history.outcome_unknown = unknown
        raise CommitPending("the catalog is unreachable", outcome_unknown=unknown)

    monkeypatch.setattr(process_module, "commit_request", lambda *_: object())
    monkeypatch.setattr(process_module, "commit_rewrite", pending)


def test_a_pending_commit_is_delayed_by_the_policy_and_keeps_the_files(
    small_process: tuple[OptimizingProcess, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    process, written = small_process
    _pending_commits(monkeypatch, process, unknown=False)
    process.tasks_ended([], {}, allow_partial_commit=False)

    first = process.commit(now=100.0)
    assert (first.state, first.delay_s, first.first_delay) == (ProcessState.COMMIT_DELAYED, 5.0, True)
    assert not process.retry_due(104.9) and process.retry_due(105.0)
    second = process.commit(now=105.0)
    assert (second.delay_s, second.first_delay, process.retry_at) == (10.0, False, 115.0)
    assert written.exists()  # a delayed commit's files stay


def test_floe_optimizes_one_shot_policy_fails_and_cleans_up(
    small_process: tuple[OptimizingProcess, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    process, written = small_process
    process.policy = CommitPolicy(retry_pending=False)
    _pending_commits(monkeypatch, process, unknown=False)
    process.tasks_ended([], {}, allow_partial_commit=False)

    step = process.commit(now=0.0)

    assert step.state == ProcessState.FAILED and isinstance(step.error, ProcessFailed)
    assert "the commit failed" in str(step.error)
    assert not written.exists()


def test_nothing_is_deleted_while_a_commit_may_have_landed(
    small_process: tuple[OptimizingProcess, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    process, written = small_process
    process.policy = CommitPolicy(retry_pending=False)
    _pending_commits(monkeypatch, process, unknown=True)
    process.tasks_ended([], {}, allow_partial_commit=False)

    step = process.commit(now=0.0)

    assert step.state == ProcessState.FAILED and isinstance(step.error, CommitPending)
    assert written.exists() and process.discard() == []


def test_a_failed_process_is_not_committed_and_its_files_go(
    small_process: tuple[OptimizingProcess, Path],
) -> None:
    process, written = small_process
    process.tasks_ended([], {"x-t0000": "boom"}, allow_partial_commit=False)

    step = process.commit(now=0.0)

    assert step.state == ProcessState.FAILED and "partial commit is not allowed" in str(step.error)
    assert not written.exists()
    assert process.table.current_snapshot() is not None and len(process.table.snapshots()) == 3
