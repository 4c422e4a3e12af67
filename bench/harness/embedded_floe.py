"""floe run in this process: task service, engine and one optimizer, composed as ``floe run`` composes them.

As `floe.local.run.run_engine` starts them, with the manifests a user would apply: one
OptimizerGroup and an OptimizedTable per table, on one catalog.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from pyiceberg.catalog.sql import SqlCatalog

from floe.api.group import OptimizerGroup
from floe.api.models import OptimizedTable, resource_from_dict
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.registry import EngineEvent
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe_optimizer.app import Optimizer
from floe_optimizer.runner import TaskRunner

GROUP = "bench"


class EmbeddedFloe:
    """floe keeping ``tables`` (name to identifier) of ``catalog`` optimized, its tasks run by ``runner``."""

    def __init__(
        self,
        catalog: SqlCatalog,
        properties: dict[str, str],
        tables: dict[str, str],
        runner: TaskRunner,
        *,
        refresh_interval_s: float,
        optimizer_threads: int,
        min_plan_interval_s: float,
    ) -> None:
        self.events: list[EngineEvent] = []
        self.service = TaskService(clock=time.time)
        self.engine = OptimizingEngine(self.service, refresh_interval_s=refresh_interval_s)
        self.engine.subscribe(self.events.append)
        self.server = TaskServiceServer(self.service)
        group = resource_from_dict(
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizerGroup",
                "metadata": {"name": GROUP},
                "spec": {"executors": 1, "executorCores": optimizer_threads, "executorMemory": "2Gi"},
            }
        )
        assert isinstance(group, OptimizerGroup)
        self.group = group
        self.tables: list[OptimizedTable] = []
        for name, identifier in tables.items():
            table = resource_from_dict(
                {
                    "apiVersion": "floe.dev/v1alpha1",
                    "kind": "OptimizedTable",
                    "metadata": {"name": name},
                    "spec": {
                        "table": identifier,
                        "catalog": {"name": catalog.name, "properties": properties},
                        "group": GROUP,
                        "minPlanInterval": f"{min_plan_interval_s:g}s",
                    },
                }
            )
            assert isinstance(table, OptimizedTable)
            self.tables.append(table)
        self.runner = runner
        self.optimizer: Optimizer | None = None
        self._stop = threading.Event()
        self._loop = threading.Thread(target=self.engine.run, args=(self._stop, 0.5), name="floe-engine")

    def start(self) -> None:
        """Serve, start the optimizer, wait for it to register, apply the tables, start ticking."""
        self.server.start()
        self.engine.apply_group(self.group)
        self.optimizer = Optimizer(
            self.server.url,
            group=GROUP,
            threads=self.group.spec.max_threads,
            runner=self.runner,
            memory_bytes=self.group.spec.executor_memory,
            name=f"embedded-{GROUP}",
        )
        self.optimizer.start()
        deadline = time.monotonic() + 30
        while self.optimizer.optimizer_id is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the embedded optimizer did not register within 30 s")
            time.sleep(0.05)
        for table in self.tables:
            self.engine.apply_table(table)
        self._loop.start()

    def stop(self) -> None:
        """Stop ticking, stop the optimizer (running tasks finish), the server and the engine."""
        self._stop.set()
        self._loop.join()
        if self.optimizer is not None:
            self.optimizer.stop(grace_s=60)
        self.server.stop()
        self.engine.close()

    def event_counts(self) -> dict[str, Counter[str]]:
        """Per table name: how many events of each reason (``Committed``, ``OptimizingFailed``, ...)."""
        counts: dict[str, Counter[str]] = {}
        for event in list(self.events):
            counts.setdefault(event.table_id.split("/", 1)[1], Counter())[event.reason] += 1
        return counts
