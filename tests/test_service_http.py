"""The task service over real HTTP on 127.0.0.1: routes, status codes, long polls, the client.

Every test runs the real in-memory TaskService behind a TaskServiceServer. Task specs are
synthetic: nothing here runs a task.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from synthetic import result, spec

from floe.protocol.client import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    RequestFailed,
    ServiceUnavailable,
    StaleAttempt,
    TaskServiceClient,
    Unauthorized,
    UnknownGroup,
    registration_token_from_env,
)
from floe.protocol.wire import (
    CompleteRequest,
    NextPoll,
    PollRequest,
    RegisterRequest,
    RegisterResponse,
    TaskAssignment,
)
from floe.scheduling.group_scheduler import GroupScheduler
from floe.service.http import TaskServiceServer, create_app
from floe.service.openapi import ROUTES, build_openapi, render_openapi
from floe.service.task_service import TaskService

OPENAPI_FILE = Path(__file__).parent.parent / "docs" / "task-service-openapi.json"
GROUP = "g"
TABLE = "ns/t"


class Clock:
    """A clock the test moves by hand, so timeouts expire exactly when the test says."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class ObservedService(TaskService):
    """The real service, telling the test when a poll found nothing (the HTTP layer then waits)."""

    def __init__(self, clock: Clock, registration_token: str | None = None) -> None:
        super().__init__(clock, heartbeat_interval_s=10.0, registration_token=registration_token)
        self.empty_poll = threading.Event()

    def poll(self, token: str, request: PollRequest) -> TaskAssignment | None:
        task = super().poll(token, request)
        if task is None:
            self.empty_poll.set()
        return task


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(clock: Clock) -> ObservedService:
    service = ObservedService(clock)
    scheduler = service.add_group(
        GROUP, heartbeat_timeout_s=60.0, ack_timeout_s=30.0, execute_timeout_s=600.0
    )
    scheduler.upsert_table(TABLE, quota=1.0, last_optimized_s=None)
    return service


@pytest.fixture
def server(service: ObservedService) -> Iterator[TaskServiceServer]:
    with TaskServiceServer(service, keeper_interval_s=0.05) as server:
        yield server


@pytest.fixture
def client(server: TaskServiceServer) -> Iterator[TaskServiceClient]:
    client = TaskServiceClient(server.url, timeout=10.0)
    yield client
    client.close()


def add_process(service: TaskService, tasks: int = 1, process_id: str = "p1") -> GroupScheduler:
    scheduler = service.group(GROUP)
    specs = [spec(f"{process_id}-t{i}") for i in range(tasks)]
    scheduler.add_process(TABLE, process_id, specs, max_retries=0, allow_partial_commit=False)
    return scheduler


def register(client: TaskServiceClient, threads: int = 1) -> RegisterResponse:
    return client.register(RegisterRequest(group=GROUP, threads=threads, memory_bytes=0, name="test"))


def call(
    server: TaskServiceServer,
    method: str,
    path: str,
    body: bytes | str | dict[str, Any] | None = None,
    token: str | None = None,
    authorization: str | None = None,
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One raw HTTP request: status, JSON body, headers."""
    url = urllib.parse.urlsplit(server.url)
    connection = HTTPConnection(url.hostname or "", url.port, timeout=30)
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if authorization is not None:
        headers["Authorization"] = authorization
    payload = json.dumps(body).encode() if isinstance(body, dict) else body
    try:
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read()), dict(response.headers)
    finally:
        connection.close()


def test_register_gives_a_token_and_the_timing(server: TaskServiceServer, service: TaskService) -> None:
    status, body, _ = call(
        server, "POST", "/v1/optimizers", {"group": GROUP, "threads": 2, "memory_bytes": 1024, "name": "o1"}
    )

    assert status == 200
    response = RegisterResponse.model_validate(body)
    assert response.token and response.heartbeat_interval_s == 10.0 and response.heartbeat_timeout_s == 60.0
    [info] = service.optimizers(GROUP)
    assert (info.optimizer_id, info.name, info.threads) == (response.optimizer_id, "o1", 2)


def test_register_in_an_unknown_group_is_404(server: TaskServiceServer, client: TaskServiceClient) -> None:
    status, body, _ = call(
        server, "POST", "/v1/optimizers", {"group": "nope", "threads": 1, "memory_bytes": 0}
    )

    assert status == 404
    assert body["error"] == "unknown_group" and "'nope'" in body["detail"]
    with pytest.raises(UnknownGroup, match="unknown optimizer group 'nope'"):
        client.register(RegisterRequest(group="nope", threads=1, memory_bytes=0))


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong-token", "Basic dXNlcjpwYXNz", "Bearer "], ids=repr
)
def test_calls_without_a_valid_token_are_401_and_change_nothing(
    server: TaskServiceServer, service: TaskService, client: TaskServiceClient, authorization: str | None
) -> None:
    scheduler = add_process(service, tasks=2)
    session = register(client, threads=2)
    held = client.poll(session.token, 0, wait_s=0)
    assert held is not None
    before = scheduler.stats(0)[TABLE]
    attempt = held.attempt_id
    complete_body = {"result": result(held.task_id).model_dump(mode="json")}

    for method, path, body in [
        ("POST", "/v1/optimizers/heartbeat", None),
        ("POST", "/v1/poll", {"thread": 1, "wait_s": 0}),
        ("POST", f"/v1/tasks/{attempt}/ack", None),
        ("POST", f"/v1/tasks/{attempt}/complete", complete_body),
        ("DELETE", "/v1/optimizers", None),
    ]:
        status, error, headers = call(server, method, path, body, authorization=authorization)
        assert status == 401, (method, path, error)
        assert error["error"] == "unauthorized" and error["detail"]
        assert headers["WWW-Authenticate"] == "Bearer"

    assert scheduler.stats(0)[TABLE] == before
    assert [o.optimizer_id for o in service.optimizers(GROUP)] == [session.optimizer_id]
    # The real token still works on the very same attempt.
    client.ack(session.token, attempt)
    client.complete(session.token, attempt, CompleteRequest(result=result(held.task_id)))
    assert scheduler.stats(0)[TABLE].succeeded == 1


def test_tokens_expire_on_unregister_and_when_the_keeper_drops_a_silent_optimizer(
    server: TaskServiceServer, service: TaskService, client: TaskServiceClient, clock: Clock
) -> None:
    scheduler = add_process(service)
    leaving, silent = register(client), register(client)
    assert client.poll(leaving.token, 0, wait_s=0) is not None

    client.unregister(leaving.token)

    assert scheduler.stats(0)[TABLE].planned == 1  # its task went back
    with pytest.raises(Unauthorized, match="register again"):
        client.heartbeat(leaving.token)

    clock.now += 61  # past the heartbeat timeout; the server's keeper runs every 50 ms
    deadline = time.monotonic() + 10
    while service.optimizers(GROUP) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert service.optimizers(GROUP) == []
    with pytest.raises(Unauthorized):
        client.poll(silent.token, 0, wait_s=0)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/optimizers", {"group": GROUP, "threads": 0, "memory_bytes": 0}, "threads"),
        ("/v1/optimizers", {"group": GROUP, "memory_bytes": 0}, "threads"),
        ("/v1/optimizers", {"group": GROUP, "threads": 1, "memory_bytes": 0, "colour": "red"}, "colour"),
        ("/v1/poll", {"thread": -1}, "thread"),
        ("/v1/poll", {"thread": 0, "wait_s": 3600}, "wait_s"),
        ("/v1/poll", {"thread": 7}, "thread 7"),  # beyond the threads it registered
        ("/v1/tasks/a1/complete", {"result": None, "error": None}, "exactly one of result and error"),
        ("/v1/tasks/a1/complete", {"result": {"task_id": "x"}}, "result.rewrite.files"),
        ("/v1/tasks/a1/complete", {"result": []}, "result"),  # not an object: no kind to tell it by
        ("/v1/tasks/a1/complete", {"result": 7}, "result"),
        ("/v1/poll", [], "body"),
    ],
)
def test_a_body_of_the_wrong_shape_is_422_naming_the_field(
    server: TaskServiceServer, client: TaskServiceClient, path: str, body: Any, field: str
) -> None:
    token = register(client).token

    status, error, _ = call(server, "POST", path, json.dumps(body), token=token)

    assert status == 422, error
    assert error["error"] == "invalid_request"
    assert field in error["detail"]


def acked_task(
    service: TaskService, client: TaskServiceClient
) -> tuple[GroupScheduler, str, TaskAssignment, dict[str, Any]]:
    """A process of one task, acked by a new optimizer: its scheduler, the optimizer's token,
    the task, and the JSON body of its successful completion."""
    scheduler = add_process(service)
    token = register(client).token
    task = client.poll(token, 0, wait_s=0)
    assert task is not None
    client.ack(token, task.attempt_id)
    body = CompleteRequest(result=result(task.task_id)).model_dump(mode="json", exclude_none=True)
    return scheduler, token, task, body


@pytest.mark.parametrize("tagged", [True, False], ids=["with-kind", "v1-without-kind"])
def test_a_result_is_accepted_with_its_kind_and_without_it(
    server: TaskServiceServer, service: TaskService, client: TaskServiceClient, tagged: bool
) -> None:
    scheduler, token, task, body = acked_task(service, client)
    assert body["result"]["kind"] == "rewrite"
    if not tagged:  # an optimizer older than the field
        del body["result"]["kind"]

    reply = call(server, "POST", f"/v1/tasks/{task.attempt_id}/complete", body, token)

    assert reply[:2] == (200, {"accepted": True})
    [outcome] = scheduler.take_finished()
    assert outcome.succeeded


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "delete-files", "task_id": "t", "deleted": 3},
        {"task_id": "t", "deleted": 3},
        {"kind": "orphan-scan", "task_id": "t", "orphans": [], "old_files": 0},
        {"task_id": "t", "orphans": [], "old_files": 0},
    ],
)
def test_a_file_task_result_is_read_with_its_kind_and_without_it(body: dict[str, Any]) -> None:
    read = CompleteRequest.model_validate({"result": body}).result

    assert read is not None and read.kind == ("delete-files" if "deleted" in body else "orphan-scan")


@pytest.mark.parametrize("kind", ["orphan-scan", "delete-files", "nonsense"])
def test_a_result_whose_kind_contradicts_its_fields_is_422_and_changes_nothing(
    server: TaskServiceServer, service: TaskService, client: TaskServiceClient, kind: str
) -> None:
    scheduler, token, task, body = acked_task(service, client)
    body["result"]["kind"] = kind

    status, error, _ = call(server, "POST", f"/v1/tasks/{task.attempt_id}/complete", body, token)

    assert status == 422, error
    assert error["error"] == "invalid_request" and "result" in error["detail"]
    client.complete(token, task.attempt_id, CompleteRequest(result=result(task.task_id)))
    [outcome] = scheduler.take_finished()
    assert outcome.succeeded


@pytest.mark.parametrize("body", ["{not json", "", "\xff"])
def test_a_body_that_is_not_json_is_400(
    server: TaskServiceServer, client: TaskServiceClient, body: str
) -> None:
    token = register(client).token

    status, error, _ = call(server, "POST", "/v1/poll", body.encode("latin-1"), token=token)

    assert status == 400
    assert error["error"] == "invalid_json" and "not JSON" in error["detail"]


def test_a_long_poll_returns_as_soon_as_a_process_is_added(
    server: TaskServiceServer, service: ObservedService, client: TaskServiceClient
) -> None:
    token = register(client).token
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        polled: Future[TaskAssignment | None] = pool.submit(client.poll, token, 0, 30.0)
        assert service.empty_poll.wait(10), "the poll never reached the service"

        add_process(service)

        task = polled.result(timeout=25)
        elapsed = time.monotonic() - started
    assert task is not None and task.task_id == "p1-t0" and task.table == TABLE
    assert elapsed < 15, "the poll waited for its deadline instead of waking up"


def test_a_long_poll_without_work_answers_null_after_wait_s(
    server: TaskServiceServer, client: TaskServiceClient
) -> None:
    token = register(client).token
    started = time.monotonic()

    status, body, _ = call(server, "POST", "/v1/poll", {"thread": 0, "wait_s": 0.3}, token=token)

    assert (status, body) == (200, {"task": None})
    assert time.monotonic() - started >= 0.3


def test_unregistering_ends_the_optimizers_long_polls_with_401(
    server: TaskServiceServer, service: ObservedService, client: TaskServiceClient
) -> None:
    token = register(client).token
    with ThreadPoolExecutor(1) as pool:
        polled = pool.submit(client.poll, token, 0, 30.0)
        assert service.empty_poll.wait(10)
        client.unregister(token)
        with pytest.raises(Unauthorized):
            polled.result(timeout=15)


def test_stopping_the_server_releases_waiting_polls(service: ObservedService) -> None:
    server = TaskServiceServer(service)
    server.start()
    client = TaskServiceClient(server.url)
    token = register(client).token
    with ThreadPoolExecutor(1) as pool:
        polled = pool.submit(client.poll, token, 0, 30.0)
        assert service.empty_poll.wait(10)
        started = time.monotonic()
        server.stop()
        assert polled.result(timeout=15) is None
    assert time.monotonic() - started < 15


def test_late_acks_and_completions_of_superseded_attempts_are_409(
    server: TaskServiceServer, service: TaskService, client: TaskServiceClient
) -> None:
    scheduler = add_process(service)
    token = register(client).token
    first = client.poll(token, 0, wait_s=0)
    assert first is not None
    # Polling again on the same thread gives the task up: the next attempt supersedes the first.
    second = client.poll(token, 0, wait_s=0)
    assert second is not None and second.task_id == first.task_id and second.attempt_id != first.attempt_id

    status, error, _ = call(server, "POST", f"/v1/tasks/{first.attempt_id}/ack", token=token)
    assert status == 409 and error["error"] == "stale_attempt" and first.attempt_id in error["detail"]
    with pytest.raises(StaleAttempt, match="is stale"):
        client.complete(token, first.attempt_id, CompleteRequest(result=result(first.task_id)))
    assert scheduler.stats(0)[TABLE].succeeded == 0

    client.ack(token, second.attempt_id)
    client.complete(token, second.attempt_id, CompleteRequest(result=result(second.task_id)))
    with pytest.raises(StaleAttempt):  # completed already
        client.complete(token, second.attempt_id, CompleteRequest(error="late"))
    [outcome] = scheduler.take_finished()
    assert outcome.succeeded and outcome.failures == {}


def test_a_failed_task_is_completed_with_its_error(service: TaskService, client: TaskServiceClient) -> None:
    scheduler = add_process(service)
    token = register(client).token
    task = client.poll(token, 0, wait_s=0)
    assert task is not None

    client.ack(token, task.attempt_id)
    client.complete(token, task.attempt_id, CompleteRequest(error="boom"))

    [outcome] = scheduler.take_finished()
    assert not outcome.succeeded and outcome.failures == {task.task_id: "boom"}


def test_health_and_unknown_paths(server: TaskServiceServer) -> None:
    assert call(server, "GET", "/healthz")[:2] == (200, {"status": "ok"})
    status, error, _ = call(server, "GET", "/v1/nothing-here")
    assert status == 404 and error["error"] == "not_found"
    status, error, _ = call(server, "GET", "/v1/poll")
    assert status == 405 and error["error"] == "method_not_allowed"


def test_the_served_document_is_the_generated_one(server: TaskServiceServer) -> None:
    status, document, _ = call(server, "GET", "/v1/openapi.json")

    assert status == 200
    assert document == json.loads(render_openapi())


def test_every_documented_route_is_served() -> None:
    app = create_app(TaskService(Clock()))
    served = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None}
    documented = {(route.method, route.path) for route in ROUTES}
    assert documented <= served
    assert set(build_openapi()["paths"]) == {route.path for route in ROUTES}


def test_the_committed_openapi_document_is_up_to_date() -> None:
    assert OPENAPI_FILE.read_text() == render_openapi(), (
        "docs/task-service-openapi.json is stale: run "
        "`.venv/bin/python -m floe.service.openapi > docs/task-service-openapi.json`"
    )


def test_the_client_reports_an_unreachable_service_clearly() -> None:
    server = TaskServiceServer(TaskService(Clock()))
    server.start()
    url = server.url
    server.stop()

    with pytest.raises(ServiceUnavailable, match=f"unreachable at {url}"):
        TaskServiceClient(url, timeout=5).heartbeat("token")


def test_closing_the_client_aborts_a_long_poll(service: ObservedService, client: TaskServiceClient) -> None:
    token = register(client).token
    with ThreadPoolExecutor(1) as pool:
        polled = pool.submit(client.poll, token, 0, 30.0)
        assert service.empty_poll.wait(10)
        client.close()
        with pytest.raises(ServiceUnavailable, match="closed"):
            polled.result(timeout=15)
    with pytest.raises(ServiceUnavailable, match="closed"):
        client.heartbeat(token)


def test_a_poll_from_a_client_that_hung_up_takes_no_task(
    server: TaskServiceServer, service: ObservedService, client: TaskServiceClient
) -> None:
    token = register(client).token
    gone = TaskServiceClient(server.url)
    with ThreadPoolExecutor(1) as pool:
        polled = pool.submit(gone.poll, token, 0, 30.0)
        assert service.empty_poll.wait(10)
        gone.close()
        with pytest.raises(ServiceUnavailable):
            polled.result(timeout=15)

    add_process(service, process_id="p2")  # wakes the abandoned poll on the server

    task = client.poll(token, 0, wait_s=5)
    assert task is not None and task.task_id == "p2-t0"
    assert task.attempt_id.startswith("p2-t0-a1-"), "the hung-up poll took the first attempt"


def test_the_client_rejects_a_bad_url() -> None:
    with pytest.raises(ValueError, match="http"):
        TaskServiceClient("floe-operator:8080")


def test_request_failed_carries_the_status(client: TaskServiceClient) -> None:
    token = register(client).token
    with pytest.raises(RequestFailed, match="out of range") as raised:
        client.poll(token, 5, wait_s=0)
    assert raised.value.status == 422


# -- the registration token --------------------------------------------------------------------


REGISTRATION_TOKEN = "registration-token-for-the-tests"


@pytest.fixture
def guarded_service(clock: Clock) -> ObservedService:
    """A service with group GROUP that requires the registration token."""
    service = ObservedService(clock, registration_token=REGISTRATION_TOKEN)
    service.add_group(GROUP)
    return service


@pytest.fixture
def guarded(guarded_service: ObservedService) -> Iterator[TaskServiceServer]:
    with TaskServiceServer(guarded_service) as server:
        yield server


@pytest.mark.parametrize(
    ("authorization", "detail"),
    [
        (None, "missing registration token"),
        ("Basic dXNlcjpwYXNz", "missing registration token"),
        ("Bearer not-the-token", "wrong registration token"),
    ],
    ids=["none", "basic", "wrong"],
)
def test_register_needs_the_registration_token_when_the_service_has_one(
    guarded: TaskServiceServer, guarded_service: ObservedService, authorization: str | None, detail: str
) -> None:
    service = guarded_service
    body = {"group": GROUP, "threads": 1, "memory_bytes": 0, "name": "intruder"}

    status, error, headers = call(guarded, "POST", "/v1/optimizers", body, authorization=authorization)

    assert status == 401 and error["error"] == "unauthorized" and detail in error["detail"]
    assert headers["WWW-Authenticate"] == "Bearer"
    assert REGISTRATION_TOKEN not in json.dumps(error)
    assert service.optimizers(GROUP) == []
    status, answer, _ = call(guarded, "POST", "/v1/optimizers", body, token=REGISTRATION_TOKEN)
    assert status == 200 and RegisterResponse.model_validate(answer).token != REGISTRATION_TOKEN
    metrics = scrape(guarded)
    assert metrics[("floe_optimizer_registrations_total", (("result", "refused"),))] == 1
    assert metrics[("floe_optimizer_registrations_total", (("result", "accepted"),))] == 1


def test_the_client_presents_the_registration_token_it_is_given(
    guarded: TaskServiceServer, guarded_service: ObservedService, tmp_path: Path
) -> None:
    service = guarded_service
    request = RegisterRequest(group=GROUP, threads=1, memory_bytes=0)
    with pytest.raises(Unauthorized, match="missing registration token"):
        TaskServiceClient(guarded.url).register(request)
    with pytest.raises(Unauthorized, match="wrong registration token"):
        TaskServiceClient(guarded.url, registration_token="nope").register(request)

    # As the driver pod reads it: a mounted file, re-read at each registration.
    token_file = tmp_path / "token"
    source = registration_token_from_env({TOKEN_FILE_ENV: str(token_file)})
    client = TaskServiceClient(guarded.url, registration_token=source)
    token_file.write_text("stale\n")
    with pytest.raises(Unauthorized, match="wrong registration token"):
        client.register(request)
    token_file.write_text(f"{REGISTRATION_TOKEN}\n")
    session = client.register(request)
    client.heartbeat(session.token)
    assert [o.optimizer_id for o in service.optimizers(GROUP)] == [session.optimizer_id]
    # The variable wins over the file.
    both = {TOKEN_ENV: REGISTRATION_TOKEN, TOKEN_FILE_ENV: str(tmp_path / "missing")}
    assert registration_token_from_env(both)() == REGISTRATION_TOKEN
    assert registration_token_from_env({})() is None


# -- /metrics ------------------------------------------------------------------------------------


def scrape(server: TaskServiceServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics (no token), parsed: sample name and labels → value."""
    url = urllib.parse.urlsplit(server.url)
    connection = HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/plain")
        text = response.read().decode()
    finally:
        connection.close()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_what_the_service_did(
    server: TaskServiceServer, service: ObservedService, client: TaskServiceClient
) -> None:
    add_process(service, tasks=3)
    session = register(client, threads=2)
    first = client.poll(session.token, 0, wait_s=0)
    second = client.poll(session.token, 1, wait_s=0)
    assert first is not None and second is not None
    client.complete(session.token, first.attempt_id, CompleteRequest(result=result(first.task_id)))
    client.complete(session.token, second.attempt_id, CompleteRequest(error="boom"))

    metrics = scrape(server)

    group = (("group", GROUP),)
    assert metrics[("floe_group_optimizers", group)] == 1
    assert metrics[("floe_group_threads", group)] == 2
    assert metrics[("floe_group_pending_tasks", group)] == 0  # the third was cancelled with the process
    assert metrics[("floe_group_running_tasks", group)] == 0
    assert metrics[("floe_tasks_completed_total", (("group", GROUP), ("outcome", "success")))] == 1
    assert metrics[("floe_tasks_completed_total", (("group", GROUP), ("outcome", "failure")))] == 1
    assert metrics[("floe_optimizer_registrations_total", (("result", "accepted"),))] == 1
    assert metrics[("floe_poll_duration_seconds_count", ())] == 2
    assert metrics[("floe_poll_duration_seconds_bucket", (("le", "+Inf"),))] == 2


# -- keep-alive -------------------------------------------------------------------------------------


def test_the_client_keeps_one_connection_per_thread(client: TaskServiceClient) -> None:
    token = register(client).token

    def local_port() -> int:
        connection = client._local.connection
        assert connection is not None and connection.sock is not None
        port: int = connection.sock.getsockname()[1]
        return port

    port = local_port()
    for _ in range(5):
        client.heartbeat(token)
        assert client.poll(token, 0, wait_s=0) is None
    assert local_port() == port
    with ThreadPoolExecutor(1) as pool:  # another thread, another connection
        assert pool.submit(lambda: (client.heartbeat(token), local_port())[1]).result() != port


def test_a_connection_the_server_closed_while_idle_is_replaced(service: ObservedService) -> None:
    with TaskServiceServer(service) as server:
        client = TaskServiceClient(server.url, timeout=10)
        token = register(client).token
        client.heartbeat(token)
        port = server.port
    # The same address, a new server (and service): the kept connection was closed under it.
    with TaskServiceServer(TaskService(Clock()), port=port) as again:
        assert again.url == server.url
        with pytest.raises(Unauthorized):  # answered: the call went through on a new connection
            client.heartbeat(token)
    client.close()


class ScriptedServer:
    """A raw HTTP/1.1 server that answers each request it reads by the next action of a script:
    ``"ok"`` answers 200 and keeps the connection, ``"drop"`` closes it without answering
    (as a server that processed the request and then died would), ``"no_next_poll"`` answers
    422 as a v1 service from before ``next_poll`` does to a completion carrying it."""

    def __init__(self, script: list[str]) -> None:
        self.script = script
        self.requests: list[str] = []
        self.bodies: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self.script:
            connection, _ = self._listener.accept()
            with connection, connection.makefile("rb") as stream:
                while self.script:
                    request_line = stream.readline().decode()
                    if not request_line:
                        break
                    length = 0
                    while (line := stream.readline()) not in (b"\r\n", b""):
                        name, _, value = line.decode().partition(":")
                        if name.lower() == "content-length":
                            length = int(value)
                    self.bodies.append(stream.read(length))
                    self.requests.append(request_line.split()[1])
                    action = self.script.pop(0)
                    if action == "drop":
                        break
                    status, body = b"200 OK", b'{"accepted": true}'
                    if action == "no_next_poll":
                        status = b"422 Unprocessable Entity"
                        detail = "next_poll: Extra inputs are not permitted"
                        body = json.dumps({"error": "invalid_request", "detail": detail}).encode()
                    connection.sendall(
                        b"HTTP/1.1 "
                        + status
                        + b"\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
        self._listener.close()


def test_a_call_whose_reused_connection_dies_is_resent_only_when_that_is_harmless() -> None:
    completion = CompleteRequest(result=result("t1"))
    # heartbeat, then a heartbeat whose connection dies after the server read it: re-sent once.
    server = ScriptedServer(["ok", "drop", "ok"])
    client = TaskServiceClient(server.url, timeout=10)
    client.heartbeat("token")
    client.heartbeat("token")
    assert server.requests == ["/v1/optimizers/heartbeat"] * 3
    client.close()

    # A completion on a connection that dies after the server read it may have been processed:
    # it is not re-sent (a second one would be answered 409 and taken for a refusal).
    server = ScriptedServer(["ok", "drop", "ok"])
    client = TaskServiceClient(server.url, timeout=10)
    client.heartbeat("token")
    with pytest.raises(ServiceUnavailable):
        client.complete("token", "a1", completion)
    assert server.requests == ["/v1/optimizers/heartbeat", "/v1/tasks/a1/complete"]
    client.heartbeat("token")  # the next call opens a new connection
    assert server.requests[-1] == "/v1/optimizers/heartbeat"
    client.close()


def test_a_completion_may_carry_the_next_poll_and_answers_as_before_without_it(
    server: TaskServiceServer, service: TaskService, client: TaskServiceClient
) -> None:
    scheduler = add_process(service, tasks=2)
    token = register(client, threads=2).token
    first = client.poll(token, 0, wait_s=0)
    assert first is not None
    client.ack(token, first.attempt_id)
    request = CompleteRequest(result=result(first.task_id), next_poll=NextPoll(thread=0))
    second = client.complete(token, first.attempt_id, request)
    assert second is not None and second.task_id != first.task_id
    client.ack(token, second.attempt_id)

    # A client that does not ask gets exactly the v1 answer it always got.
    body = CompleteRequest(result=result(second.task_id)).model_dump(mode="json", exclude_none=True)
    assert call(server, "POST", f"/v1/tasks/{second.attempt_id}/complete", body, token)[:2] == (
        200,
        {"accepted": True},
    )
    [outcome] = scheduler.take_finished()
    assert outcome.succeeded and len(outcome.results) == 2

    # Asked with nothing ready: task is null, and the stale completion of a finished attempt
    # is 409 with no task.
    third_process = add_process(service, tasks=1, process_id="p2")
    third = client.poll(token, 1, wait_s=0)
    assert third is not None
    body = CompleteRequest(error="boom", next_poll=NextPoll(thread=1)).model_dump(
        mode="json", exclude_none=True
    )
    path = f"/v1/tasks/{third.attempt_id}/complete"
    assert call(server, "POST", path, body, token)[:2] == (200, {"accepted": True, "task": None})
    status, error, _ = call(server, "POST", path, body, token)
    assert status == 409 and "task" not in error
    assert third_process.take_finished()[0].failures == {third.task_id: "boom"}


def test_the_client_completes_without_next_poll_on_a_service_that_predates_it() -> None:
    server = ScriptedServer(["no_next_poll", "ok", "ok"])
    client = TaskServiceClient(server.url, timeout=10)
    request = CompleteRequest(result=result("t1"), next_poll=NextPoll(thread=0))
    assert client.complete("token", "a1", request) is None
    assert client.complete("token", "a2", request) is None  # it does not ask again
    assert server.requests == ["/v1/tasks/a1/complete"] * 2 + ["/v1/tasks/a2/complete"]
    assert [b"next_poll" in body for body in server.bodies] == [True, False, False]
    client.close()


# -- /v1/executors -------------------------------------------------------------------------------


def test_a_groups_executor_count_needs_the_registration_token_and_a_known_group(
    guarded: TaskServiceServer, guarded_service: ObservedService
) -> None:
    path = "/v1/executors?group=g"

    def asked() -> tuple[int, dict[str, Any]]:
        status, body, _ = call(guarded, "GET", path, token=REGISTRATION_TOKEN)
        return status, body

    status, error, _ = call(guarded, "GET", path)
    assert (status, error["error"]) == (401, "unauthorized")
    assert "missing registration token" in error["detail"]
    status, error, _ = call(guarded, "GET", path, token="nope")
    assert (status, error["error"]) == (401, "unauthorized")
    # Nothing counted as a refused registration: a driver asking is not one.
    assert ("floe_optimizer_registrations_total", (("result", "refused"),)) not in scrape(guarded)

    status, error, _ = call(guarded, "GET", "/v1/executors?group=other", token=REGISTRATION_TOKEN)
    assert (status, error["error"]) == (404, "unknown_group")
    status, error, _ = call(guarded, "GET", "/v1/executors", token=REGISTRATION_TOKEN)
    assert (status, error["error"]) == (422, "invalid_request") and "group" in error["detail"]
    status, error, _ = call(guarded, "GET", f"{path}&wait_s=61", token=REGISTRATION_TOKEN)
    assert status == 422 and "wait_s" in error["detail"]
    status, error, _ = call(guarded, "GET", f"{path}&known=-1", token=REGISTRATION_TOKEN)
    assert status == 422 and "known" in error["detail"]

    # Before the operator decides a count, the answer says so; then it is the count.
    assert asked() == (200, {"group": GROUP, "executors": None})
    guarded_service.set_executors(GROUP, 3)
    assert asked() == (200, {"group": GROUP, "executors": 3})
    client = TaskServiceClient(guarded.url, registration_token=REGISTRATION_TOKEN)
    try:
        assert client.executors(GROUP) == 3
        with pytest.raises(UnknownGroup):
            client.executors("other")
    finally:
        client.close()
    with pytest.raises(Unauthorized, match="wrong registration token"):
        TaskServiceClient(guarded.url, registration_token="nope").executors(GROUP)

    # A group the service drops forgets its count; made again, it has none until told.
    guarded_service.remove_group(GROUP)
    guarded_service.add_group(GROUP)
    assert asked() == (200, {"group": GROUP, "executors": None})


def test_a_long_poll_for_the_executor_count_returns_as_soon_as_it_changes(
    server: TaskServiceServer, service: ObservedService, client: TaskServiceClient
) -> None:
    service.set_executors(GROUP, 0)
    started = time.monotonic()
    assert client.executors(GROUP, known=0, wait_s=0.3) == 0, "unchanged: the same count at wait_s"
    assert time.monotonic() - started >= 0.3

    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        asked: Future[int | None] = pool.submit(client.executors, GROUP, 0, 30.0)
        time.sleep(0.2)
        assert not asked.done(), "answered while the count was the one known"
        service.set_executors(GROUP, 2)
        assert asked.result(timeout=25) == 2
    assert time.monotonic() - started < 15, "the long poll waited for its deadline instead of waking up"
    # Another count than the one known is answered at once.
    started = time.monotonic()
    assert client.executors(GROUP, known=1, wait_s=30.0) == 2
    assert time.monotonic() - started < 5
