"""The task service's routes and their OpenAPI 3.1 document, built from the v1 wire models.

`ROUTES` is the one list of what the HTTP app serves: `floe.service.http` registers a
handler for each entry, so the document cannot describe a route the app lacks. The
committed copy is ``docs/task-service-openapi.json``; regenerate it with
``python -m floe.service.openapi > docs/task-service-openapi.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from floe.service.wire import (
    API_VERSION,
    Accepted,
    CompleteRequest,
    ErrorResponse,
    PollRequest,
    PollResponse,
    RegisterRequest,
    RegisterResponse,
)

REF_TEMPLATE = "#/components/schemas/{model}"
BEARER = "bearerToken"

ERROR_MEANINGS = {
    400: "The body is not JSON.",
    401: "The bearer token is missing, wrong or expired (the optimizer was dropped): nothing changed. "
    "Register again.",
    404: "No such optimizer group.",
    409: "The attempt is stale (superseded by another attempt, or already finished): "
    "the call was ignored and nothing changed.",
    422: "The body does not match the schema, or contradicts what the optimizer registered or was "
    "handed (a thread beyond its threads, a result for another task); `detail` names the offending field.",
}

_OBJECT: dict[str, Any] = {"type": "object"}
_HEALTH: dict[str, Any] = {
    "type": "object",
    "properties": {"status": {"type": "string", "const": "ok"}},
    "required": ["status"],
}


@dataclass(frozen=True)
class Route:
    """One operation of the API: where it lives, what it takes and answers, and who may call it."""

    method: Literal["GET", "POST", "DELETE"]
    path: str
    operation_id: str
    summary: str
    description: str
    response: type[BaseModel] | dict[str, Any]
    request: type[BaseModel] | None = None
    authenticated: bool = True
    errors: tuple[int, ...] = ()


ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        f"/{API_VERSION}/optimizers",
        "register",
        "Register an optimizer",
        "Join an optimizer group. The answer carries the bearer token every other call needs, "
        "and how often to heartbeat.",
        RegisterResponse,
        request=RegisterRequest,
        authenticated=False,
        errors=(400, 404, 422),
    ),
    Route(
        "POST",
        f"/{API_VERSION}/optimizers/heartbeat",
        "heartbeat",
        "Heartbeat",
        "Tell the service the optimizer is alive. An optimizer silent for longer than its group's "
        "heartbeat timeout is dropped and its unfinished tasks are handed out again.",
        Accepted,
        errors=(401,),
    ),
    Route(
        "DELETE",
        f"/{API_VERSION}/optimizers",
        "unregister",
        "Unregister",
        "Leave the group. Tasks the optimizer holds and has not completed go back to the queue.",
        Accepted,
        errors=(401,),
    ),
    Route(
        "POST",
        f"/{API_VERSION}/poll",
        "poll",
        "Poll for a task",
        "Ask for a task for one optimizer thread. Without a task at hand the call waits (long poll) "
        'until one becomes available or `wait_s` passes, then answers `{"task": null}`.',
        PollResponse,
        request=PollRequest,
        errors=(400, 401, 422),
    ),
    Route(
        "POST",
        f"/{API_VERSION}/tasks/{{attempt_id}}/ack",
        "ack",
        "Acknowledge a task",
        "The optimizer starts the attempt it was handed. An attempt not acknowledged within the "
        "group's ack timeout is handed out again.",
        Accepted,
        errors=(401, 409),
    ),
    Route(
        "POST",
        f"/{API_VERSION}/tasks/{{attempt_id}}/complete",
        "complete",
        "Complete a task",
        "Report the outcome of an attempt: the files it wrote, or the error that stopped it.",
        Accepted,
        request=CompleteRequest,
        errors=(400, 401, 409, 422),
    ),
    Route(
        "GET",
        f"/{API_VERSION}/openapi.json",
        "openapi",
        "This document",
        "The OpenAPI 3.1 description of the task service.",
        _OBJECT,
        authenticated=False,
    ),
    Route(
        "GET",
        "/healthz",
        "health",
        "Liveness",
        "Answers while the service is up.",
        _HEALTH,
        authenticated=False,
    ),
)


def build_openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 document of `ROUTES`, with every wire model under ``components/schemas``."""
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [(ErrorResponse, "serialization")]
    for route in ROUTES:
        if route.request is not None:
            models.append((route.request, "validation"))
        if isinstance(route.response, type):
            models.append((route.response, "serialization"))
    refs, definitions = models_json_schema(models, ref_template=REF_TEMPLATE)

    def schema_of(model: type[BaseModel] | dict[str, Any], mode: JsonSchemaMode) -> dict[str, Any]:
        return dict(refs[(model, mode)]) if isinstance(model, type) else model

    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        operation: dict[str, Any] = {
            "operationId": route.operation_id,
            "summary": route.summary,
            "description": route.description,
        }
        if "{attempt_id}" in route.path:
            operation["parameters"] = [
                {
                    "name": "attempt_id",
                    "in": "path",
                    "required": True,
                    "description": "The attempt's id, from the task assignment.",
                    "schema": {"type": "string"},
                }
            ]
        if route.request is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schema_of(route.request, "validation")}},
            }
        responses: dict[str, Any] = {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": schema_of(route.response, "serialization")}},
            }
        }
        error_schema = schema_of(ErrorResponse, "serialization")
        for status in route.errors:
            responses[str(status)] = {
                "description": ERROR_MEANINGS[status],
                "content": {"application/json": {"schema": error_schema}},
            }
        operation["responses"] = responses
        operation["security"] = [{BEARER: []}] if route.authenticated else []
        paths.setdefault(route.path, {})[route.method.lower()] = operation

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "floe task service",
            "version": API_VERSION,
            "description": (
                "The API optimizers use to take and report rewrite tasks: register (getting a token), "
                "heartbeat, poll per thread, acknowledge, complete, unregister. Every call but register, "
                "the document and the health check carries `Authorization: Bearer <token>`. Every error "
                "answer has an `ErrorResponse` body."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": definitions.get("$defs", {}),
            "securitySchemes": {
                BEARER: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The token returned by register.",
                }
            },
        },
    }


def render_openapi() -> str:
    """The document as committed in ``docs/task-service-openapi.json``."""
    return json.dumps(build_openapi(), indent=2) + "\n"


if __name__ == "__main__":
    print(render_openapi(), end="")
