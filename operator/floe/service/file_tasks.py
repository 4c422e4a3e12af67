"""Maintenance jobs hand their file tasks to a group's optimizers and wait for the outcome.

A job runs on a maintenance thread of the engine; its listing and deleting run on the
group's executors (`floe.maintenance.orphans_on_executors`). The thread queues the tasks
with the group's scheduler and sleeps until the scheduler changes, as pollers do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from floe.protocol.file_tasks import FileTaskResult, FileTaskSpec
from floe.scheduling.group_scheduler import GroupScheduler
from floe.scheduling.records import ProcessWork
from floe.service.task_service import TaskService

FILE_TASK_RETRIES = 2
"""Failed attempts each file task may retry: listing and deleting are idempotent."""
FILE_TASKS_WAIT_S = 3600.0
"""How long a job waits for its file tasks (a group scaled to zero wakes for them) before it
gives up and cancels them."""


class FileTasksFailed(RuntimeError):
    """File tasks ran out of retries, or were cancelled, or waited too long."""


class FileTaskDispatcher:
    """Runs file tasks on the optimizers of a group, one blocking call per batch."""

    def __init__(
        self, service: TaskService, clock: Callable[[], float], wait_s: float = FILE_TASKS_WAIT_S
    ) -> None:
        self.wait_s = wait_s
        self._metrics = service.metrics
        self._clock = clock
        self._changed = threading.Condition()
        self._closed = False
        service.subscribe(self._wake)

    def run(
        self,
        scheduler: GroupScheduler,
        table_id: str,
        process_id: str,
        specs: Sequence[FileTaskSpec],
        on_work: Callable[[ProcessWork], None] | None = None,
    ) -> list[FileTaskResult]:
        """Queue `specs` for `table_id` as process `process_id` and return their results in order;
        `on_work` hears what the tasks took once they ended, whether they succeeded or not.

        Raises FileTasksFailed when a task runs out of retries (with each one's last error),
        the table leaves the group, the wait passes `wait_s`, or the dispatcher closes; the
        tasks still queued are then cancelled.
        """
        scheduler.add_file_tasks(table_id, process_id, specs, max_retries=FILE_TASK_RETRIES)
        for spec in specs:
            self._metrics.maintenance_file_tasks.labels(scheduler.name, spec.kind).inc()
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                outcome = scheduler.file_tasks_outcome(process_id)
            except KeyError:
                raise FileTasksFailed(f"{process_id}: cancelled (the table left its group)") from None
            if outcome is not None:
                if on_work is not None and outcome.work is not None:
                    on_work(outcome.work)
                if not outcome.succeeded:
                    errors = "; ".join(f"{task}: {error}" for task, error in outcome.failures.items())
                    raise FileTasksFailed(f"{process_id}: {errors}")
                return outcome.results
            remaining = deadline - time.monotonic()
            if self._closed or remaining <= 0:
                scheduler.cancel_process(process_id, self._clock())
                reason = "the engine stops" if self._closed else f"no outcome within {self.wait_s:g} s"
                raise FileTasksFailed(f"{process_id}: cancelled, {reason}")
            with self._changed:
                # Bounded: a change between the check above and this wait is not missed for long.
                self._changed.wait(min(remaining, 1.0))

    def close(self) -> None:
        """Make every waiting `run` cancel its tasks and fail now."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
