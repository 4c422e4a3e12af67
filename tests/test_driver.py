"""The driver pod's entrypoint: its Spark session, and the executor count it follows (the task
service's, long-polled, with the scale file standing in).

A real TaskService behind a real HTTP server, with a registration token as on Kubernetes; the
scale file is a plain file, as the kubelet projects the ConfigMap; Spark is a real local one,
in a process of its own.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import floe_optimizer.driver as driver
from floe.protocol.client import TaskServiceClient
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe_optimizer.driver import DesiredExecutors, read_executors

GROUP = "ns/g"
TOKEN = "registration-token-for-the-driver-tests"


def eventually(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


@pytest.fixture
def service() -> TaskService:
    service = TaskService(clock=time.time, registration_token=TOKEN)
    service.add_group(GROUP)
    return service


@pytest.fixture
def scale_file(tmp_path: Path) -> Path:
    path = tmp_path / "executors"
    path.write_text("1\n")
    return path


def test_the_driver_starts_spark_for_a_group_at_zero_executors() -> None:
    """spark-submit refuses ``spark.executor.instances`` 0, which an autoscaled group starts at;
    the driver's session starts with it all the same (its own process: one JVM per process)."""
    code = (
        "from floe_optimizer.driver import start_session\n"
        "spark = start_session('local[1]', {'spark.executor.instances': '0', 'spark.app.name': 'zero',"
        " 'spark.ui.enabled': 'false'})\n"
        "print(spark.sparkContext.appName, spark.sparkContext.getConf().get('spark.executor.instances'),"
        " spark.range(5).count())\n"
        "spark.stop()\n"
    )
    started = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    assert started.stdout.split() == ["zero", "0", "5"]


def desired(url: str, scale_file: Path, token: str = TOKEN) -> DesiredExecutors:
    return DesiredExecutors(TaskServiceClient(url, registration_token=token), GROUP, scale_file, default=2)


def test_the_services_count_wins_over_the_scale_file_and_arrives_at_once(
    service: TaskService, scale_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "COUNT_RETRY_S", 0.05)
    with TaskServiceServer(service) as server:
        follower = desired(server.url, scale_file)
        follower.start()
        try:
            # The operator has not decided yet (it just started): the file stands in.
            time.sleep(0.2)
            assert follower.current() == 1 and not follower.changed.is_set()

            service.set_executors(GROUP, 3)
            assert follower.changed.wait(5), "the decision did not reach the driver"
            assert follower.current() == 3
            follower.changed.clear()

            # To zero and back, each heard while the driver's request waits.
            service.set_executors(GROUP, 0)
            assert follower.changed.wait(5)
            follower.changed.clear()
            assert follower.current() == 0
            service.set_executors(GROUP, 2)
            assert follower.changed.wait(5)
            assert follower.current() == 2
            assert read_executors(scale_file, 2) == 1, "the file, as the kubelet left it, is not the count"
        finally:
            follower.stop()


def test_the_scale_file_stands_in_while_the_service_cannot_answer(
    service: TaskService, scale_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "COUNT_RETRY_S", 0.05)
    service.set_executors(GROUP, 4)
    server = TaskServiceServer(service)
    server.start()
    follower = desired(server.url, scale_file)
    follower.start()
    try:
        eventually(lambda: follower.current() == 4)
        server.stop()  # the operator restarting
        eventually(lambda: follower.current() == 1)
        scale_file.write_text("5\n")
        assert follower.current() == 5
        scale_file.unlink()
        assert follower.current() == 2, "no file: the group's initial count"
    finally:
        follower.stop()

    # Refused (a wrong token) or a group the service lacks: the file, never a crash.
    with TaskServiceServer(service) as server:
        for follower in (
            desired(server.url, scale_file, token="wrong"),
            DesiredExecutors(
                TaskServiceClient(server.url, registration_token=TOKEN), "ns/other", scale_file, default=2
            ),
        ):
            scale_file.write_text("6\n")
            follower.start()
            try:
                time.sleep(0.2)
                assert follower.current() == 6 and not follower.changed.is_set()
            finally:
                follower.stop()


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    yield
    assert not [t for t in threading.enumerate() if t.name == "floe-executor-count"]
