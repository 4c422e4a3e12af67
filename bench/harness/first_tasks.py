"""An optimizer in the benchmark's process, registered with the operator like a driver pod's: floe's
`Optimizer` running its tasks as Spark jobs (local mode), noting when each table's first task started."""

from __future__ import annotations

import time
from typing import Any


class FirstTasks:
    """The optimizer's task runner, wrapped: when each table's first task started running."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.started: dict[str, float] = {}

    def run(self, spec: Any) -> Any:
        """Note the start of the table's first task (``time.monotonic()``), then run the task."""
        # The table's directory in the warehouse: .../db.db/t00042/data is db.t00042.
        *_, namespace, table, _ = spec.output_dir.rstrip("/").split("/")
        self.started.setdefault(f"{namespace.removesuffix('.db')}.{table}", time.monotonic())
        return self.runner.run(spec)

    def cancel(self) -> None:
        """Cancel the running task."""
        self.runner.cancel()


def bench_optimizer(spark: Any, port: int, group: str, token: str) -> tuple[Any, FirstTasks]:
    """An optimizer of 2 threads for ``group`` of the operator's task service on ``port``, not started yet,
    and its `FirstTasks`."""
    from floe_optimizer.app import Optimizer
    from floe_optimizer.runner import SparkTaskRunner

    first_tasks = FirstTasks(SparkTaskRunner(spark))
    optimizer = Optimizer(
        f"http://127.0.0.1:{port}",
        group=group,
        threads=2,
        runner=first_tasks,
        name="bench",
        registration_token=token,
    )
    return optimizer, first_tasks
