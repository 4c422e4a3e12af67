"""Every number floe takes from a user or a stranger is bounded: each numeric flag of each
command ends in one line and exit code 2 outside its bounds, and the task service answers 422
to a registration claiming more threads than a group can have."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from floe.cli import main
from floe.protocol.wire import MAX_OPTIMIZER_THREADS
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService

BAD_FLAGS = [
    ("optimize", "--cores", "0"),
    ("optimize", "--cores", "-3"),
    ("optimize", "--cores", "100000"),
    ("demo", "--cores", "0"),
    ("demo", "--scale", "-1"),
    ("demo", "--scale", "0"),
    ("demo", "--scale", "nan"),
    ("demo", "--scale", "1e9"),
    ("run", "--cores", "-1"),
    ("run", "--refresh-interval", "0"),
    ("run", "--refresh-interval", "inf"),
    ("run", "--timeout", "-5"),
    ("operator", "--service-port", "-1"),
    ("operator", "--service-port", "70000"),
    ("operator", "--peering-lifetime", "10000000"),
    ("operator", "--secret-interval", "nan"),
    ("operator", "--refresh-interval", "1e12"),
]
REQUIRED = {
    "optimize": ["--catalog-config", "missing.yaml", "db.t", "--dry-run"],
    "demo": ["--dir", "never-made"],
    "run": ["-f", "missing.yaml"],
    "operator": [],
}


@pytest.mark.parametrize(("command", "flag", "value"), BAD_FLAGS)
def test_a_numeric_flag_out_of_bounds_is_one_line_and_exit_2(
    command: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([command, *REQUIRED[command], f"{flag}={value}"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"floe {command}: error: argument {flag}: must be" in err and "Traceback" not in err


def test_a_flag_that_is_no_number_says_what_it_must_be(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["optimize", *REQUIRED["optimize"], "--cores", "two"])
    assert stopped.value.code == 2
    assert (
        "argument --cores: must be an integer, positive and at most 256; got 'two'" in capsys.readouterr().err
    )


@pytest.fixture
def server() -> Iterator[TaskServiceServer]:
    service = TaskService(clock=time.time)
    service.add_group("g")
    with TaskServiceServer(service) as running:
        yield running


def _register(server: TaskServiceServer, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{server.url}/v1/optimizers",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("threads", 10**9),
        ("threads", MAX_OPTIMIZER_THREADS + 1),
        ("memory_bytes", 2**63),
        ("group", "g" * 600),
    ],
)
def test_a_registration_beyond_the_bounds_is_422_naming_the_field(
    server: TaskServiceServer, field: str, value: Any
) -> None:
    body: dict[str, Any] = {"group": "g", "threads": 2, "memory_bytes": 0, field: value}
    status, error = _register(server, body)
    assert status == 422, error
    assert error["error"] == "invalid_request" and field in error["detail"]


def test_a_registration_of_a_whole_groups_threads_is_taken(server: TaskServiceServer) -> None:
    status, answer = _register(server, {"group": "g", "threads": MAX_OPTIMIZER_THREADS, "memory_bytes": 0})
    assert status in (200, 201) and answer["optimizer_id"], answer
