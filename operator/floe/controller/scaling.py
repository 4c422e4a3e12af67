"""The executor count of each group, fixed (``spec.executors``) or decided from its demand
(``spec.autoscaling``), and the figures the metrics show of it.

The count a driver follows lives in the group's scale ConfigMap, so an operator that restarts
goes on from the count the driver has, not from the minimum. Each count is also published to
the task service (`publish`), which drivers long-poll: a ConfigMap reaches a pod's mounted
file only at the kubelet's next sync, up to about a minute later.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from floe.api.group import OptimizerGroupSpec
from floe.controller.objects import GroupRef
from floe.scheduling.autoscale import ExecutorAutoscaler, ScaleDecision


@dataclass(frozen=True)
class ScaleFigures:
    """A group's executors wanted and ready, and its demand (tasks), as last seen."""

    desired: int
    ready: int
    demand: int


@dataclass
class ExecutorTime:
    """Executor core-seconds a group held (its ready executors' cores over time), and what a group
    fixed at its peak (an autoscaled group's ``maxExecutors``, a fixed group's count) would have
    held over the same time: what autoscaling saves."""

    held_s: float = 0.0
    static_s: float = 0.0
    _at: float | None = None
    _held_cores: int = 0
    _static_cores: int = 0

    def add(self, now_s: float, held_cores: int, static_cores: int) -> None:
        """From `now_s` on the group holds `held_cores` cores, and a static one `static_cores`;
        the time since the last call counts at the last call's figures."""
        if self._at is not None and now_s > self._at:
            elapsed = now_s - self._at
            self.held_s += elapsed * self._held_cores
            self.static_s += elapsed * self._static_cores
        self._at, self._held_cores, self._static_cores = now_s, held_cores, static_cores


@dataclass(frozen=True)
class ScaleSample:
    """A group's figures for the metrics."""

    group: str
    desired: int
    ready: int
    demand: int
    held_core_s: float
    static_core_s: float


class GroupScaling:
    """Per group (namespace/name): its autoscaler, the count its driver follows (as its scale
    ConfigMap last said, or as floe last wrote it), when it woke from zero, its last figures."""

    def __init__(self, publish: Callable[[str, int], None] | None = None) -> None:
        """`publish(group, executors)` is told every count a group's driver is to follow."""
        self._publish = publish
        self._lock = threading.Lock()
        self._autoscalers: dict[str, ExecutorAutoscaler] = {}
        self._followed: dict[str, tuple[GroupRef, int]] = {}
        self._last_scale: dict[str, str] = {}
        self._woken_at: dict[str, float] = {}
        self._figures: dict[str, ScaleFigures] = {}
        self._time: dict[str, ExecutorTime] = {}

    def note_followed(self, group: str, ref: GroupRef, executors: int) -> None:
        """The count the group's scale ConfigMap holds (read, or just written)."""
        with self._lock:
            self._followed[group] = (ref, executors)
        if self._publish is not None:
            self._publish(group, executors)

    def followed(self, group: str) -> tuple[GroupRef, int] | None:
        """The group's objects and the count its driver follows, once known."""
        with self._lock:
            return self._followed.get(group)

    def note_scaled(self, group: str, message: str) -> None:
        """The last decision that changed the count, as status shows it."""
        with self._lock:
            self._last_scale[group] = message

    def last_scale(self, group: str) -> str | None:
        """The last decision that changed the group's count, if any since the operator started."""
        with self._lock:
            return self._last_scale.get(group)

    def decide(
        self, group: str, spec: OptimizerGroupSpec, demand: int, current: int, now_s: float
    ) -> ScaleDecision:
        """The count `group` follows from now: its fixed one, or its autoscaler's for `demand`."""
        with self._lock:
            if spec.autoscaling is None:
                self._autoscalers.pop(group, None)
                fixed = spec.initial_executors
                return ScaleDecision(fixed, "spec.executors", fixed != current)
            autoscaler = self._autoscalers.setdefault(group, ExecutorAutoscaler())
            decision = autoscaler.decide(spec.autoscaling, spec.executor_cores, demand, current, now_s)
            if decision.changed and current == 0 and decision.executors > 0:
                self._woken_at[group] = now_s
            elif decision.changed and decision.executors == 0:
                self._woken_at.pop(group, None)
            return decision

    def first_task_after_waking(
        self, group: str, first_start_since: Callable[[float], float | None]
    ) -> float | None:
        """Seconds from the scale-up from zero to the first task handed out after it (acked by
        an optimizer thread, which then hands it to Spark; `first_start_since(t)`: the group's
        first ack at or after t), once, when one has."""
        with self._lock:
            woken_at = self._woken_at.get(group)
            if woken_at is None:
                return None
            started = first_start_since(woken_at)
            if started is None:
                return None
            del self._woken_at[group]
            return started - woken_at

    def record(
        self, group: str, figures: ScaleFigures, now_s: float, cores: int, static_executors: int
    ) -> ExecutorTime:
        """The group's figures for the metrics, and its executor time: `figures.ready` executors
        of `cores` cores each from `now_s` on, against `static_executors` of a static group."""
        with self._lock:
            self._figures[group] = figures
            meter = self._time.setdefault(group, ExecutorTime())
            meter.add(now_s, figures.ready * cores, static_executors * cores)
            return meter

    def resume_time(self, group: str, held_s: float, static_s: float) -> None:
        """Core-seconds a group's status kept from before a restart, counted on from here."""
        with self._lock:
            if group not in self._time:
                self._time[group] = ExecutorTime(held_s, static_s)

    def forget(self, group: str) -> None:
        """The group was deleted."""
        with self._lock:
            states = (
                self._autoscalers,
                self._followed,
                self._last_scale,
                self._woken_at,
                self._figures,
                self._time,
            )
            for state in states:
                state.pop(group, None)

    def samples(self) -> Iterator[ScaleSample]:
        """Per group: its figures and executor core-seconds (for `ServiceMetrics`)."""
        with self._lock:
            figures = dict(self._figures)
            held = {g: (t.held_s, t.static_s) for g, t in self._time.items()}
        for group, f in sorted(figures.items()):
            held_s, static_s = held.get(group, (0.0, 0.0))
            yield ScaleSample(group, f.desired, f.ready, f.demand, held_s, static_s)


def core_seconds_due(written: Mapping[str, Any], counted: Mapping[str, int], peak_cores: int) -> bool:
    """Whether a status that changed in nothing else is patched for its executor core-seconds:
    when a counter leaves zero or has grown by a minute of the group's peak cores. A static
    group's count grows every round: written every 5 s, it would have the API server store and
    every watcher receive the group 720 times an hour for that alone (an operator that restarts
    goes on from the last written, at most a minute behind)."""
    if not written:
        return True
    step = 60 * max(peak_cores, 1)
    return any(
        (not written.get(key) and counted[key]) or counted[key] - int(written.get(key, 0)) >= step
        for key in counted
    )
