"""What is wrong with a group's driver or executor pod, read from the pod's status alone.

Users meet these before anything else goes wrong: an image that cannot be pulled, a container
killed for memory, a container that keeps crashing, a pod the node evicted. Each becomes a
`PodProblem` whose reason names the role and the cause (``ExecutorOOMKilled``,
``DriverImagePullFailed``), so the group's Events and its Degraded condition say what happened
without anyone reading pod YAML. Pure: a pod manifest in, problems out.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from floe.controller.spark_conf import GROUP_LABEL, ROLE_LABEL

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"})
START_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
RECENT_S = 600.0
"""How long a problem of a pod that is gone (Spark deletes a dead executor at once) keeps its
group Degraded."""


@dataclass(frozen=True)
class PodProblem:
    """One thing wrong with one pod, worded for an Event."""

    group: str
    pod: str
    pod_uid: str
    reason: str
    message: str
    restarts: int

    @property
    def key(self) -> tuple[str, str, int]:
        """Identity for reporting once: the same pod, cause and restart count is the same problem."""
        return (self.pod_uid, self.reason, self.restarts)


def pod_problems(pod: dict[str, Any]) -> list[PodProblem]:
    """The problems of a floe driver or executor pod; empty for a healthy pod or another pod."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    group, role = labels.get(GROUP_LABEL), labels.get(ROLE_LABEL)
    if not group or role not in ("driver", "executor"):
        return []
    name, uid = str(metadata.get("name", "")), str(metadata.get("uid", ""))
    prefix = role.capitalize()
    status = pod.get("status") or {}
    problems: list[PodProblem] = []

    def add(cause: str, message: str, restarts: int = 0) -> None:
        problems.append(
            PodProblem(group, name, uid, prefix + cause, f"{role} pod {name}: {message}", restarts)
        )

    if status.get("reason") == "Evicted":
        add("Evicted", f"evicted by the node: {status.get('message', '')}".rstrip(": "))
    for container in status.get("containerStatuses") or []:
        restarts = int(container.get("restartCount") or 0)
        image = container.get("image", "")
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        waiting_reason = waiting.get("reason", "")
        detail = waiting.get("message", "")
        if waiting_reason in IMAGE_PULL_REASONS:
            add(
                "ImagePullFailed", f"image {image} cannot be pulled ({waiting_reason}): {detail}".rstrip(": ")
            )
        elif waiting_reason in START_REASONS:
            add("StartFailed", f"container cannot start ({waiting_reason}): {detail}".rstrip(": "))
        elif waiting_reason == "CrashLoopBackOff":
            add(
                "CrashLooping",
                f"container keeps exiting ({restarts} restarts): {detail}".rstrip(": "),
                restarts,
            )
        for terminated in (
            state.get("terminated") or {},
            (container.get("lastState") or {}).get("terminated") or {},
        ):
            if terminated.get("reason") == "OOMKilled":
                limit = _memory_limit(pod, str(container.get("name", "")))
                hint = "; raise spec.executorMemory" if role == "executor" else ""
                add(
                    "OOMKilled",
                    f"container killed for using more than its memory limit {limit} "
                    f"(exit code {terminated.get('exitCode')}){hint}",
                    restarts,
                )
                break
    return problems


def _memory_limit(pod: dict[str, Any], container: str) -> str:
    for spec in (pod.get("spec") or {}).get("containers") or []:
        if spec.get("name") == container:
            return str(((spec.get("resources") or {}).get("limits") or {}).get("memory", "(none)"))
    return "(unknown)"


class PodProblemLog:
    """The problems already reported, and each group's latest, shared by the pod watch and the
    group status timer (kopf runs them on different threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reported: set[tuple[str, str, int]] = set()
        self._latest: dict[tuple[str, str], tuple[float, PodProblem]] = {}

    def record(self, namespace: str, problems: list[PodProblem], now: float) -> list[PodProblem]:
        """Remember ``problems``; return those not reported before (to post as Events)."""
        with self._lock:
            new = [p for p in problems if p.key not in self._reported]
            for problem in problems:
                self._reported.add(problem.key)
                self._latest[(namespace, problem.group)] = (now, problem)
            return new

    def latest(self, namespace: str, group: str, now: float) -> PodProblem | None:
        """The group's most recent problem, if it was seen in the last `RECENT_S` seconds."""
        with self._lock:
            seen = self._latest.get((namespace, group))
        return seen[1] if seen is not None and now - seen[0] <= RECENT_S else None

    def forget_group(self, namespace: str, group: str) -> None:
        """Drop a deleted group's latest problem."""
        with self._lock:
            self._latest.pop((namespace, group), None)
