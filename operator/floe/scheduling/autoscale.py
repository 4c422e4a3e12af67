"""Executors sized from a group's demand: how many tasks its tables want run now.

Demand is counted per table and capped by the table's quota (`quota_limit` of the group at its
largest): a table's running and queued tasks, or, before it is planned, the tasks its would-be
plan holds. The group wants as many executors as that demand fills, between the autoscaling
minimum and maximum.

Up is at once: a triggered table should not wait. Down is damped: demand must stay below the
current count for the whole scale-down delay, and the group then goes to the highest count
that delay's demand asked for, so a burst that ebbs and flows within the delay moves nothing.
Pure: the controller passes the demand, the count the driver follows and the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from floe.api.group import AutoscalingSpec
from floe.scheduling.occupation import quota_limit


def table_demand(tasks: int, quota: float, max_threads: int) -> int:
    """A table's share of the demand: its `tasks`, at most what its quota lets it run in a group
    of `max_threads` threads (at least 1, so a table with work always counts)."""
    cap = max(1, math.ceil(quota_limit(quota, max_threads)))
    return min(tasks, cap)


@dataclass(frozen=True)
class ScaleDecision:
    """The executor count to follow, and why; `changed` when it differs from the current one."""

    executors: int
    reason: str
    changed: bool


class ExecutorAutoscaler:
    """One autoscaled group's executor count, decided from its demand over time."""

    def __init__(self) -> None:
        self._low_since: float | None = None
        self._peak_while_low = 0

    def decide(
        self, spec: AutoscalingSpec, executor_cores: int, demand: int, current: int, now_s: float
    ) -> ScaleDecision:
        """The count to follow now, given the group's `demand` (tasks) and the `current` count."""
        wanted = spec.bounded(math.ceil(demand / executor_cores))
        bounded = spec.bounded(current)
        if bounded != current:
            self._reset()
            return ScaleDecision(bounded, f"{current} executors are outside {_bounds(spec)}", True)
        if wanted > current:
            self._reset()
            return ScaleDecision(wanted, f"demand of {demand} tasks wants {wanted} executors", True)
        if wanted == current:
            self._reset()
            return ScaleDecision(current, f"demand of {demand} tasks fits {current} executors", False)
        if self._low_since is None:
            self._low_since, self._peak_while_low = now_s, wanted
        self._peak_while_low = max(self._peak_while_low, wanted)
        if now_s - self._low_since < spec.scale_down_delay:
            return ScaleDecision(
                current,
                f"demand of {demand} tasks wants {wanted} executors; scaling down once it stays below "
                f"{current} for {_seconds(spec.scale_down_delay)}",
                False,
            )
        target = self._peak_while_low
        self._reset()
        return ScaleDecision(
            target,
            f"demand stayed at most {target} executors' worth for {_seconds(spec.scale_down_delay)} "
            f"(now {demand} tasks)",
            True,
        )

    def _reset(self) -> None:
        self._low_since, self._peak_while_low = None, 0


def _bounds(spec: AutoscalingSpec) -> str:
    return f"minExecutors {spec.min_executors} .. maxExecutors {spec.max_executors}"


def _seconds(value: float) -> str:
    return f"{value:g}s"
