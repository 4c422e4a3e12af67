"""Pod problems of a group's driver and executors, from pod status alone (no cluster needed)."""

from __future__ import annotations

from typing import Any

from floe.controller.pod_health import RECENT_S, PodProblemLog, pod_problems


def _pod(role: str | None, container_status: dict[str, Any], **status: Any) -> dict[str, Any]:
    labels = {"floe.dev/group": "g"} | ({"floe.dev/role": role} if role else {})
    return {
        "metadata": {"name": f"p-{role}", "uid": "u1", "labels": labels},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "1Gi"}}}]},
        "status": {"containerStatuses": [{"name": "c", "image": "img:1", **container_status}], **status},
    }


def test_image_that_cannot_be_pulled_names_the_image_and_the_cause() -> None:
    pod = _pod("driver", {"state": {"waiting": {"reason": "ErrImageNeverPull", "message": "not present"}}})
    [problem] = pod_problems(pod)
    assert problem.reason == "DriverImagePullFailed"
    assert (
        "img:1" in problem.message
        and "ErrImageNeverPull" in problem.message
        and "p-driver" in problem.message
    )


def test_oom_kill_of_an_executor_is_seen_in_the_current_or_the_last_state() -> None:
    killed = {"reason": "OOMKilled", "exitCode": 137}
    for status in (
        {"state": {"terminated": killed}},
        {"lastState": {"terminated": killed}, "restartCount": 2},
    ):
        [problem] = pod_problems(_pod("executor", status))
        assert problem.reason == "ExecutorOOMKilled"
        assert "1Gi" in problem.message and "137" in problem.message and "executorMemory" in problem.message


def test_crash_loop_start_failure_and_eviction() -> None:
    crash = _pod("driver", {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 4})
    assert [p.reason for p in pod_problems(crash)] == ["DriverCrashLooping"]
    config = _pod(
        "executor", {"state": {"waiting": {"reason": "CreateContainerConfigError", "message": "no secret"}}}
    )
    assert [p.reason for p in pod_problems(config)] == ["ExecutorStartFailed"]
    evicted = _pod("executor", {"state": {}}, reason="Evicted", message="low on memory")
    assert [p.reason for p in pod_problems(evicted)] == ["ExecutorEvicted"]


def test_healthy_pods_and_pods_of_no_group_have_no_problems() -> None:
    assert pod_problems(_pod("executor", {"state": {"running": {}}})) == []
    assert pod_problems(_pod(None, {"state": {"waiting": {"reason": "ErrImagePull"}}})) == []


def test_log_reports_each_problem_once_and_forgets_it_after_a_while() -> None:
    log = PodProblemLog()
    killed = pod_problems(
        _pod("executor", {"state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}})
    )
    assert log.record("ns", killed, now=100.0) == killed
    assert log.record("ns", killed, now=105.0) == []
    assert log.latest("ns", "g", now=105.0) == killed[0]
    assert log.latest("ns", "g", now=105.0 + RECENT_S + 1) is None
    assert log.latest("other", "g", now=105.0) is None
    log.forget_group("ns", "g")
    assert log.latest("ns", "g", now=106.0) is None
