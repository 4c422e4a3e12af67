"""schemathesis against the task service's own OpenAPI document, over real HTTP.

Generated requests (valid and invalid bodies, paths and headers), without a token and with
valid ones, must never get a 5xx, a status the document does not list for the call, or an
answer whose body or content type contradicts it. Bounded and derandomized: the same cases
run every time, in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from synthetic import spec

from floe.protocol.client import TaskServiceClient
from floe.protocol.wire import RegisterRequest
from floe.service.http import TaskServiceServer
from floe.service.openapi import build_openapi
from floe.service.task_service import TaskService

REGISTRATION_TOKEN = "fuzz-registration-token"
GROUP = "g"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


class Served:
    def __init__(self) -> None:
        self.service = TaskService(clock=time.time, registration_token=REGISTRATION_TOKEN)
        scheduler = self.service.add_group(GROUP)
        scheduler.upsert_table("ns/t", quota=1.0, last_optimized_s=None)
        scheduler.add_process("ns/t", "p", [spec(f"p-t{i}") for i in range(200)], 3, False)
        self.server = TaskServiceServer(self.service, keeper_interval_s=60, body_timeout_s=5)
        self.server.start()

    def register(self) -> str:
        """A new optimizer's token."""
        client = TaskServiceClient(self.server.url, registration_token=REGISTRATION_TOKEN)
        try:
            return client.register(RegisterRequest(group=GROUP, threads=4, memory_bytes=0)).token
        finally:
            client.close()


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    running = Served()
    yield running
    running.server.stop()


RAW = build_openapi()
SCHEMA = schemathesis.openapi.from_dict(RAW)
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]

FUZZ_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _shorten_polls(case: Any) -> None:
    """A generated long poll may ask to wait a minute; the answer is the same after 0.1 s."""
    body = case.body
    if case.path == "/v1/poll" and isinstance(body, dict) and isinstance(body.get("wait_s"), int | float):
        body["wait_s"] = min(body["wait_s"], 0.1)
    query = case.query if case.path == "/v1/executors" and isinstance(case.query, dict) else {}
    if isinstance(query.get("wait_s"), int | float):
        query["wait_s"] = min(query["wait_s"], 0.1)


CASES = [
    pytest.param(operation, mode, id=f"{mode.value}-{operation.method.upper()} {operation.path}")
    for operation in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    # A call without a body or parameters has no wrong shape to be sent in.
    if mode is GenerationMode.POSITIVE
    or {"requestBody", "parameters"} & set(RAW["paths"][operation.path][operation.method])
]


@pytest.mark.parametrize(("operation", "mode"), CASES)
@pytest.mark.parametrize("caller", ["stranger", "registered"])
def test_every_answer_is_documented(
    operation: Any, mode: GenerationMode, caller: str, served: Served
) -> None:
    """Strangers (their own headers, if any) and registered optimizers (valid tokens) alike, with
    requests the document allows and requests it does not."""
    headers = {}
    if caller == "registered":
        # Register and the executor count present the registration token; the rest a fresh
        # optimizer's token per test (a generated unregister ends the previous one's).
        security = RAW["paths"][operation.path][operation.method]["security"]
        registration = security == [{"registrationToken": []}]
        headers = {"Authorization": f"Bearer {REGISTRATION_TOKEN if registration else served.register()}"}

    @FUZZ_SETTINGS
    @given(case=operation.as_strategy(generation_mode=mode))
    def call(case: Any) -> None:
        _shorten_polls(case)
        case.call_and_validate(base_url=served.server.url, headers=headers, checks=CHECKS)

    call()
