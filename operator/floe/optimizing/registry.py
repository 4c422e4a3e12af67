"""What the engine's collaborators share: the tables and groups it knows, the one lock that
guards them, and the sink of what users should hear about (`EngineEvent`).

The refresher, the maintenance runner and the process runner each take a `TableRegistry` and
work under its lock; none of them holds state of another.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from floe.api.group import OptimizerGroup
from floe.api.history import RunRecord
from floe.optimizing.evaluation import Evaluation
from floe.optimizing.history_sink import RunHistorySink
from floe.optimizing.table_state import TableRuntime
from floe.optimizing.wakeups import TableWakeups
from floe.scheduling.group_scheduler import GroupScheduler
from floe.service.task_service import TaskService

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class EngineEvent:
    """Something a user should hear about: a Kubernetes Event from the operator, a line in `floe run`."""

    table_id: str
    kind: str  # "Normal" or "Warning"
    reason: str
    message: str


class TableRegistry:
    """The engine's tables (`runtimes`) and groups, under `lock` (re-entrant: a collaborator
    holding it may call another's method that takes it)."""

    def __init__(
        self,
        service: TaskService,
        clock: Callable[[], float],
        namespaced_groups: bool,
        history: RunHistorySink | None = None,
    ) -> None:
        self.service = service
        self.clock = clock
        self.namespaced_groups = namespaced_groups
        self.lock = threading.RLock()
        self.runtimes: dict[str, TableRuntime] = {}
        self.groups: dict[str, OptimizerGroup] = {}
        """Groups by `group_key`."""
        self.evaluations: dict[str, Evaluation] = {}
        """Per table: its last refresh's scan and plan (the refresher's), which planning takes
        while they are fresh, and whose scan it reuses while the snapshot is the same. A commit
        (the process's or a maintenance job's), a refusal or the table's removal drops it."""
        self.secret_properties: dict[str, dict[str, str]] = {}
        """Per table: the properties its catalog Secret holds, whose storage credentials tasks
        leave to the optimizer's mounted copy of the Secret (Kubernetes)."""
        self.wakeups = TableWakeups()
        self.by_identifier: dict[str, set[str]] = {}
        """Table ids by the catalog identifier they name (``db.orders``): what a change notice
        finds its tables in, without a walk over every table."""
        self.looked_at: set[str] = set()
        """Tables a round looked at, or that something touched, since the status flush last
        took them (`OptimizingEngine.take_looked_at`): the only ones whose status can have
        changed, but for their quota occupation."""
        self.wanting: set[str] = set()
        """Tables PENDING or PLANNING when a round last looked at them: with the tables that have a
        process, all that a group's demand for executors counts (`views.group_demands`)."""
        self.marked_pending: set[str] = set()
        """Tables the engine last told their group's scheduler may be planned (`update_pending`)."""
        self._listeners: list[Callable[[EngineEvent], None]] = []
        self._run_listeners: list[Callable[[RunRecord], None]] = []
        self._history = history

    def subscribe(self, listener: Callable[[EngineEvent], None]) -> None:
        """Receive every EngineEvent."""
        self._listeners.append(listener)

    def subscribe_runs(self, listener: Callable[[RunRecord], None]) -> None:
        """Receive every run that ends, under the lock: `listener` must only take note."""
        self._run_listeners.append(listener)

    def emit(self, table_id: str, kind: str, reason: str, message: str) -> None:
        """Tell the listeners (call without the lock: a listener may post to Kubernetes)."""
        event = EngineEvent(table_id, kind, reason, message)
        log.info("%s %s %s: %s", kind, table_id, reason, message)
        for listener in self._listeners:
            listener(event)

    def group_key(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> str:
        """The group's name in the TaskService, which its optimizers register with."""
        return _group_key(name, namespace, self.namespaced_groups)

    def table_group_key(self, runtime: TableRuntime) -> str:
        """`group_key` of the group serving the table: the one of that name in the table's namespace."""
        return _table_group_key(runtime.table_id, runtime.group, self.namespaced_groups)

    def index(self, table_id: str, old_identifier: str | None, identifier: str | None) -> None:
        """The table names `identifier` now (None: it is removed), `old_identifier` before (hold the lock)."""
        if old_identifier == identifier:
            return
        if old_identifier is not None:
            ids = self.by_identifier.get(old_identifier, set())
            ids.discard(table_id)
            if not ids:
                self.by_identifier.pop(old_identifier, None)
        if identifier is not None:
            self.by_identifier.setdefault(identifier, set()).add(table_id)

    def touch(self, table_id: str) -> None:
        """Something happened to the table: the next round looks at it (hold the lock)."""
        self.wakeups.wake_at(table_id, -math.inf)
        self.looked_at.add(table_id)

    def register_in_group(self, runtime: TableRuntime, left_group: str | None = None) -> None:
        """Tell the table's group scheduler its quota and last optimizing (hold the lock)."""
        group = self.table_group_key(runtime)
        if left_group is not None and left_group != group and left_group in self.groups:
            self.service.group(left_group).remove_table(runtime.table_id)
        if group in self.groups:
            self.service.group(group).upsert_table(
                runtime.table_id, runtime.spec.quota, runtime.last_optimized_s
            )

    def record_run(self, runtime: TableRuntime, run: RunRecord, group: str) -> None:
        """Keep a run that ended in the table's history, and count its executor time for the
        group (`group_key`) whose executors ran it (hold the lock)."""
        runtime.runs.record(run)
        if self._history is not None:
            self._history.put(run)
        for listener in self._run_listeners:
            listener(run)
        if run.executor_seconds > 0:
            self.service.metrics.executor_seconds.labels(group, run.kind).inc(run.executor_seconds)

    def current(self, group_name: str, scheduler: GroupScheduler) -> bool:
        """Whether ``scheduler`` is still the group's (not deleted, nor deleted and created again)."""
        return group_name in self.groups and self.service.group(group_name) is scheduler


@functools.lru_cache(maxsize=1 << 16)
def _group_key(name: str, namespace: str, namespaced: bool) -> str:
    return f"{namespace}/{name}" if namespaced else name


@functools.lru_cache(maxsize=1 << 16)
def _table_group_key(table_id: str, group: str, namespaced: bool) -> str:
    """Asked of every table by each status flush and group demand: kept, not worked out again."""
    namespace = table_id.split("/", 1)[0] if "/" in table_id else DEFAULT_NAMESPACE
    return _group_key(group, namespace, namespaced)
