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

from floe.protocol.wire import (
    API_VERSION,
    Accepted,
    ChangeNotice,
    CompleteRequest,
    CompleteResponse,
    ErrorResponse,
    ExecutorsQuery,
    GroupExecutors,
    PollRequest,
    PollResponse,
    RegisterRequest,
    RegisterResponse,
    TablesNotified,
)

REF_TEMPLATE = "#/components/schemas/{model}"
BEARER = "bearerToken"
REGISTRATION = "registrationToken"
NOTICE = "noticeToken"

ERROR_MEANINGS = {
    400: "The body is not JSON.",
    401: "The bearer token is missing, wrong or expired (the optimizer was dropped): nothing changed, "
    "and the body was not read. Register again.",
    404: "No such optimizer group.",
    408: "The body did not arrive within 30 s: nothing changed.",
    409: "The attempt is stale (superseded by another attempt, or already finished): "
    "the call was ignored and nothing changed.",
    413: "The body is larger than this call takes (16 KiB; a completion 16 MiB), or declares itself "
    "so: it was not read and nothing changed.",
    422: "The body does not match the schema, or contradicts what the optimizer registered or was "
    "handed (a thread beyond its threads, a result for another task); `detail` names the offending field.",
}

REGISTER_401 = (
    "The registration token is missing or wrong (the service was given one): nothing changed. "
    "Send the operator's registration token as `Authorization: Bearer <registration token>`."
)

ATTEMPT_ID = ("attempt_id", "The attempt's id, from the task assignment.")

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
    query: type[BaseModel] | None = None
    """The model of the query string's parameters, if the call takes any."""
    security: str | None = BEARER
    """The security scheme the call presents, None for none."""
    errors: tuple[int, ...] = ()
    error_meanings: tuple[tuple[int, str], ...] = ()
    """Meanings of this route's errors where they differ from `ERROR_MEANINGS`."""
    media_type: str = "application/json"
    path_parameters: tuple[tuple[str, str], ...] = ()
    """Each ``{name}`` of the path and what it is."""
    request_required: bool = True


ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        f"/{API_VERSION}/optimizers",
        "register",
        "Register an optimizer",
        "Join an optimizer group. When the task service was given a registration token (always on "
        "Kubernetes: the operator's registration Secret), the call must present it as its bearer "
        "token. The answer carries the optimizer's own bearer token, which its other calls need, "
        "and how often to heartbeat.",
        RegisterResponse,
        request=RegisterRequest,
        security=REGISTRATION,
        errors=(400, 401, 404, 408, 413, 422),
        error_meanings=((401, REGISTER_401),),
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
        errors=(400, 401, 408, 413, 422),
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
        path_parameters=(ATTEMPT_ID,),
    ),
    Route(
        "POST",
        f"/{API_VERSION}/tasks/{{attempt_id}}/complete",
        "complete",
        "Complete a task",
        "Report the outcome of an attempt: the files it wrote, or the error that stopped it. With "
        "`next_poll` the same call also asks for that thread's next task, without waiting: the answer "
        "then carries `task` (null when none is ready: poll as usual), saving a poll's round trip. A "
        "refused completion (401, 409, 422) hands out nothing.\n\n"
        "A result names what it is the result of in `kind` (`rewrite`, `orphan-scan` or "
        "`delete-files`), and is read as that: a result whose fields contradict its `kind` is "
        "422 `invalid_request`. A result without `kind`, from an optimizer older than the field, "
        "is told apart by its fields.\n\n"
        "A result is checked before it is accepted: the rows read must be the input files' record "
        "counts, the rows written the rows read minus the rows deleted, and every file must lie in the "
        "task's `output_dir`, be named with its `file_name_prefix`, exist with the claimed size, and "
        "carry in its Parquet footer the claimed row count, the table's field ids and types and the "
        "claimed column metrics (NaN counts no more than the non-null values). A positions task's "
        "new position deletes (or deletion vector) of a data file must hold every position of the "
        "position deletes and deletion vectors of that file it replaces. A result that fails is "
        "refused with 422 `result_refused`: unlike "
        "other refusals, the attempt is then recorded as failed (using one of the task's retries) and "
        "the files it wrote are deleted.",
        CompleteResponse,
        request=CompleteRequest,
        path_parameters=(ATTEMPT_ID,),
        errors=(400, 401, 408, 409, 413, 422, 503),
        error_meanings=(
            (
                503,
                "The result's files could not be read from storage to check them: nothing changed; "
                "send the completion again.",
            ),
        ),
    ),
    Route(
        "GET",
        f"/{API_VERSION}/executors",
        "executors",
        "A group's executor count",
        "How many executors the group's driver should run, as the operator decided it (a fixed "
        "`spec.executors`, or the autoscaler's count). With `known` and `wait_s` the call waits "
        "(long poll) until the count differs from `known` or `wait_s` passes, so a decision reaches "
        "the driver at once. Presents the registration token, as register does.",
        GroupExecutors,
        query=ExecutorsQuery,
        security=REGISTRATION,
        errors=(401, 404, 422),
        error_meanings=(
            (401, REGISTER_401),
            (422, "A query parameter is missing or out of range; `detail` names it."),
        ),
    ),
    Route(
        "POST",
        f"/{API_VERSION}/tables/{{namespace}}/{{table}}/changed",
        "table_changed",
        "A table changed",
        "Tell floe that a writer committed to the table `namespace.table`: every OptimizedTable of that "
        "identifier (only those of `catalog`, if the body names one) is refreshed at the engine's next "
        "round, instead of at its next scheduled check, which backs off to `refresh.maxInterval` on a "
        "table that does not change. A writer's post-commit hook or a catalog's event relay calls it. "
        "The call presents the notice token (the operator's `--notice-token-file`), not the "
        "registration token; the body may be left out. A notice changes nothing but when the table is "
        "next read.",
        TablesNotified,
        request=ChangeNotice,
        request_required=False,
        security=NOTICE,
        path_parameters=(
            ("namespace", "The table's namespace; levels joined by `.` or by the unit separator (%1F)."),
            ("table", "The table's name."),
        ),
        errors=(400, 401, 404, 408, 413, 422),
        error_meanings=(
            (
                401,
                "The notice token is missing or wrong, or change notices are off (the operator was given "
                "no notice token): nothing changed.",
            ),
            (404, "floe optimizes no table of that identifier (in that catalog): nothing changed."),
            (422, "The namespace or table name is malformed, or the body does not match the schema."),
        ),
    ),
    Route(
        "GET",
        f"/{API_VERSION}/openapi.json",
        "openapi",
        "This document",
        "The OpenAPI 3.1 description of the task service.",
        _OBJECT,
        security=None,
    ),
    Route(
        "GET",
        "/healthz",
        "health",
        "Liveness",
        "Answers while the service is up.",
        _HEALTH,
        security=None,
    ),
    Route(
        "GET",
        "/metrics",
        "metrics",
        "Prometheus metrics",
        "The task service's and the engine's metrics in the Prometheus text format: per group "
        "pending and running tasks, registered optimizers and threads; per table quota occupation, "
        "tasks and state; completed tasks, registrations and commits by result; the scheduler's "
        "poll latency.",
        {"type": "string"},
        security=None,
        media_type="text/plain",
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
        if route.path_parameters:
            operation["parameters"] = [
                {
                    "name": name,
                    "in": "path",
                    "required": True,
                    "description": what,
                    "schema": {"type": "string"},
                }
                for name, what in route.path_parameters
            ]
        if route.query is not None:
            operation["parameters"] = _query_parameters(route.query)
        if route.request is not None:
            operation["requestBody"] = {
                "required": route.request_required,
                "content": {"application/json": {"schema": schema_of(route.request, "validation")}},
            }
        responses: dict[str, Any] = {
            "200": {
                "description": "OK",
                "content": {route.media_type: {"schema": schema_of(route.response, "serialization")}},
            }
        }
        error_schema = schema_of(ErrorResponse, "serialization")
        meanings = {**ERROR_MEANINGS, **dict(route.error_meanings)}
        for status in route.errors:
            responses[str(status)] = {
                "description": meanings[status],
                "content": {"application/json": {"schema": error_schema}},
            }
        operation["responses"] = responses
        operation["security"] = [{route.security: []}] if route.security else []
        paths.setdefault(route.path, {})[route.method.lower()] = operation

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "floe task service",
            "version": API_VERSION,
            "description": (
                "The API optimizers use to take and report rewrite tasks: register (getting a token), "
                "heartbeat, poll per thread, acknowledge, complete, unregister; and the executor count "
                "drivers follow; and the change notices a writer's pipeline sends. Register and the executor "
                "count present the registration token, when the service has one, as `Authorization: Bearer "
                "<registration token>`; a change notice presents the notice token; every other call but the "
                "document, the health check and the metrics carries `Authorization: Bearer <token from "
                "register>`. Every error answer has an `ErrorResponse` body."
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
                },
                REGISTRATION: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The registration token shared by the task service and the optimizers "
                    "it may admit (on Kubernetes: the chart's registration Secret).",
                },
                NOTICE: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The notice token shared by floe and the pipelines that tell it a table "
                    "changed (on Kubernetes: the chart's changeNotices.existingSecret).",
                },
            },
        },
    }


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """OpenAPI query parameters of `model`'s fields, each with its own schema."""
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    parameters = []
    for name, field_schema in schema["properties"].items():
        description = field_schema.pop("description", "")
        field_schema.pop("title", None)
        # A query string has no null: an optional parameter is one left out.
        options = field_schema.pop("anyOf", None)
        if options is not None:
            (present,) = [option for option in options if option.get("type") != "null"]
            field_schema.update(present)
            if field_schema.get("default", 0) is None:
                del field_schema["default"]
        parameters.append(
            {
                "name": name,
                "in": "query",
                "required": name in required,
                "description": description,
                "schema": field_schema,
            }
        )
    return parameters


def render_openapi() -> str:
    """The document as committed in ``docs/task-service-openapi.json``."""
    return json.dumps(build_openapi(), indent=2) + "\n"


if __name__ == "__main__":
    print(render_openapi(), end="")
