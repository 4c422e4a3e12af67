"""Sample run records for the run history tests: a committed minor with every figure, a
maintenance job, a failed major of another table and a committed full."""

from __future__ import annotations

from floe.api.history import RunPhases, RunRecord


def run(table: str, run_id: str, finished: str, **fields: object) -> RunRecord:
    """A run record that started when it finished, with ``fields`` (camelCase) set."""
    return RunRecord.model_validate(
        {"table": table, "runId": run_id, "started": finished, "finished": finished, **fields}
    )


MINOR = run(
    "analytics/orders",
    "db.orders-20261128T100000-a1b2c3",
    "2026-11-28T10:00:00Z",
    kind="minor",
    outcome="committed",
    trigger="14 fragments + 0 eq-deletes >= 12",
    snapshotId=4242,
    filesIn=14,
    bytesIn=3 << 20,
    rowsIn=1000,
    filesOut=1,
    bytesOut=5 << 19,
    rowsOut=990,
    deleteFilesRetired=2,
    phases=RunPhases(queued=4.5, planning=0.25, waiting=1.0, running=30.0, committing=0.5),
    executorSeconds=40.5,
    taskAttempts=3,
    commitAttempts=1,
)
RUNS = [
    MINOR,
    run(
        "analytics/orders",
        "expire-0f0f0f0f",
        "2026-11-29T10:00:00Z",
        kind="expire",
        outcome="done",
        filesOut=3,
    ),
    run(
        "analytics/events",
        "db.events-20261129T110000-d4e5f6",
        "2026-11-29T11:00:00Z",
        kind="major",
        outcome="failed",
        error="disk full on executor 1",
        filesIn=4,
        executorSeconds=2.0,
    ),
    run(
        "analytics/orders",
        "db.orders-20261130T090000-0a0b0c",
        "2026-11-30T09:00:00Z",
        kind="full",
        outcome="committed",
        snapshotId=7,
    ),
]
"""Oldest first: two tables' runs, three of analytics/orders."""
