"""The task service over HTTP/JSON (API v1, documented in ``docs/task-service-openapi.json``).

An aiohttp app in front of an in-memory `TaskService`. The service's own calls never
block, so a poll without a task at hand waits here, on the event loop, until the
service signals that tasks may have become available (its subscribe callback, bridged
from whatever thread fires it with ``loop.call_soon_threadsafe``) or the poll's
``wait_s`` runs out. A keeper task runs the service's timeouts every second.

The optimizers' frequent calls (heartbeat, poll, ack, complete) run on the event loop
itself: they hold the service's lock for microseconds and do no I/O, and handing each to
a worker thread cost more than the call (an executor hop, a loop wake-up and the GIL
passed back and forth, on every request). The rare, heavier ones (register, unregister,
the keeper, /metrics) still run in worker threads.

`TaskServiceServer` runs the app on its own event loop in a background thread, for the
embedded ``floe run`` and the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError

from floe.kit.background import BackgroundServer
from floe.protocol.assignment import TaskAssignment
from floe.protocol.errors import (
    InvalidRequest,
    ResultRefused,
    ResultUnverifiable,
    StaleAttempt,
    Unauthorized,
    UnknownGroup,
)
from floe.protocol.rewrite_task import RewriteTaskResult
from floe.protocol.wire import (
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
    TablesNotified,
)
from floe.service.change_notices import UnknownTable
from floe.service.openapi import ROUTES, build_openapi
from floe.service.task_service import TaskService

log = logging.getLogger(__name__)

COMPLETE_MAX_BYTES = 16 * 1024 * 1024
"""A completion carries per-column metrics of every file its task wrote: 64 files of a 1,000-column
table with 16-byte bounds come to about 8 MiB of JSON (`tests/test_service_limits.py` builds it)."""
SMALL_MAX_BYTES = 16 * 1024
"""Register and poll bodies are a few fields."""
BODY_LIMITS = {
    "register": SMALL_MAX_BYTES,
    "poll": SMALL_MAX_BYTES,
    "complete": COMPLETE_MAX_BYTES,
    "table_changed": SMALL_MAX_BYTES,
}
"""Per operation, the largest body read; a larger one is refused with 413 before it is read."""
LINGER_S = 1.0
BODY_TIMEOUT_S = 30.0
"""A body not fully received within this long is refused (408): a slow sender holds no handler."""

_Model = TypeVar("_Model", bound=BaseModel)
_T = TypeVar("_T")
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Rejected(Exception):
    """A request refused before it reaches the service."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error


class _Wakeup:
    """The service's "tasks may be available" signal, as an asyncio event long polls wait on.

    Each signal sets the current event and replaces it with a fresh one, so a poll that
    took the event before asking the service for a task cannot miss a signal fired after.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._event = asyncio.Event()
        self.closed = False

    def current(self) -> asyncio.Event:
        """The event the next signal will set."""
        return self._event

    def signal(self) -> None:
        """Wake every waiting poll; call on the loop's thread."""
        self._event.set()
        self._event = asyncio.Event()

    def signal_threadsafe(self) -> None:
        """Wake every waiting poll from any thread (the TaskService's subscribe callback)."""
        if self.closed:
            return
        if threading.get_ident() == self._loop_thread:
            # A handler's own call into the service: no need to wake the loop through its pipe.
            self.signal()
            return
        # The loop may close between the check and the call when the server stops.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.signal)

    def close(self) -> None:
        """Release every waiting poll for good: the server is shutting down."""
        self.closed = True
        self.signal()


class _Api:
    """The request handlers, one per operation id of `ROUTES`."""

    def __init__(self, service: TaskService, keeper_interval_s: float, body_timeout_s: float) -> None:
        self.service = service
        self.keeper_interval_s = keeper_interval_s
        self.body_timeout_s = body_timeout_s
        self._wakeup: _Wakeup | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._openapi = build_openapi()

    @property
    def wakeup(self) -> _Wakeup:
        if self._wakeup is None:
            raise RuntimeError("the app has not started")
        return self._wakeup

    def handlers(self) -> dict[str, _Handler]:
        return {
            "register": self.register,
            "heartbeat": self.heartbeat,
            "unregister": self.unregister,
            "poll": self.poll,
            "ack": self.ack,
            "complete": self.complete,
            "executors": self.executors,
            "table_changed": self.table_changed,
            "openapi": self.openapi,
            "health": self.health,
            "metrics": self.metrics,
        }

    async def on_startup(self, _: web.Application) -> None:
        self._wakeup = _Wakeup(asyncio.get_running_loop())
        self.service.subscribe(self._wakeup.signal_threadsafe)
        self._keeper = asyncio.create_task(self._run_keeper(), name="floe-task-service-keeper")

    async def on_shutdown(self, _: web.Application) -> None:
        self.wakeup.close()

    async def on_cleanup(self, _: web.Application) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper

    async def _run_keeper(self) -> None:
        while True:
            await asyncio.sleep(self.keeper_interval_s)
            try:
                await asyncio.to_thread(self.service.run_keeper)
            except Exception:
                log.exception(
                    "the task service keeper failed; trying again in %.0f s", self.keeper_interval_s
                )

    async def register(self, request: web.Request) -> web.Response:
        try:
            # Before the body: a caller without the registration token makes the service read nothing.
            self.service.check_registration_token(_bearer(request))
        except Unauthorized as exc:
            # Who knocked, never what they sent: a near-miss token is still a secret.
            log.warning("refused a registration from %s: %s", request.remote, exc)
            raise
        body = await _body(request, RegisterRequest, "register", self.body_timeout_s)
        response = await asyncio.to_thread(self.service.register, body, _bearer(request))
        log.info(
            "optimizer %s (%s) joined group %s with %d threads",
            response.optimizer_id,
            body.name,
            body.group,
            body.threads,
        )
        return _json(response)

    async def heartbeat(self, request: web.Request) -> web.Response:
        self.service.heartbeat(_token(request))
        return _accepted()

    async def unregister(self, request: web.Request) -> web.Response:
        await asyncio.to_thread(self.service.unregister, _token(request))
        # Its threads' long polls now answer 401 instead of waiting out their wait_s.
        self.wakeup.signal()
        return _accepted()

    async def poll(self, request: web.Request) -> web.Response:
        token = _token(request)
        self.service.check_token(token)
        body = await _body(request, PollRequest, "poll", self.body_timeout_s)

        def take() -> tuple[bool, TaskAssignment | None]:
            task = self.service.poll(token, body)
            return task is not None, task

        # A task handed to a closed connection would wait out the ack timeout: none is taken then.
        return _json(PollResponse(task=await self._long_poll(request, body.wait_s, take, None)))

    async def ack(self, request: web.Request) -> web.Response:
        self.service.ack(_token(request), request.match_info["attempt_id"])
        return _accepted()

    async def complete(self, request: web.Request) -> web.Response:
        token = _token(request)
        self.service.check_token(token)
        body = await _body(request, CompleteRequest, "complete", self.body_timeout_s)
        if body.next_poll is not None and _client_gone(request):
            # Record the outcome, but a task handed to a closed connection would wait out the ack timeout.
            body = body.model_copy(update={"next_poll": None})
        attempt_id = request.match_info["attempt_id"]
        if isinstance(body.result, RewriteTaskResult) and body.result.files:
            # Checking the files reads their footers from storage: not on the event loop.
            task = await asyncio.to_thread(self.service.complete, token, attempt_id, body)
        else:
            task = self.service.complete(token, attempt_id, body)
        # Only a client that asked for its next task gets the field: v1 clients that never
        # ask parse the answer as Accepted, which admits no other field.
        return _json(CompleteResponse(task=task)) if body.next_poll is not None else _accepted()

    async def executors(self, request: web.Request) -> web.Response:
        # Before the query: a stranger learns nothing, not even which groups exist.
        self.service.check_driver_token(_bearer(request))
        query = ExecutorsQuery.model_validate(dict(request.query))

        def count() -> tuple[bool, int | None]:
            executors = self.service.executors(query.group)
            return query.known is None or executors != query.known, executors

        executors = await self._long_poll(request, query.wait_s, count, None)
        return _json(GroupExecutors(group=query.group, executors=executors))

    async def _long_poll(
        self, request: web.Request, wait_s: float, attempt: Callable[[], tuple[bool, _T]], gone: _T
    ) -> _T:
        """What `attempt` gives once it says it is done, or when `wait_s` passes or the server
        closes; `attempt` runs again at every change of the service. `gone` once the client has
        hung up, without calling `attempt`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            wakeup = self.wakeup.current()
            if _client_gone(request):
                return gone
            done, value = attempt()
            remaining = deadline - loop.time()
            if done or remaining <= 0 or self.wakeup.closed:
                return value
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), remaining)

    async def table_changed(self, request: web.Request) -> web.Response:
        notices = self.service.notices
        try:
            # Before the body: a caller without the notice token makes the service read nothing.
            notices.check_token(_bearer(request))
        except Unauthorized as exc:
            log.warning("refused a change notice from %s: %s", request.remote, exc)
            raise
        body = await _body(request, ChangeNotice, "table_changed", self.body_timeout_s, empty=ChangeNotice())
        namespace, table = request.match_info["namespace"], request.match_info["table"]
        try:
            # Off the loop: the engine looks the table up under its lock.
            found = await asyncio.to_thread(notices.table_changed, namespace, table, body.catalog)
        except UnknownTable as exc:
            raise _Rejected(404, "unknown_table", str(exc)) from exc
        except ValueError as exc:
            raise _Rejected(422, "invalid_request", str(exc)) from exc
        return _json(TablesNotified(tables=found))

    async def openapi(self, _: web.Request) -> web.Response:
        return web.json_response(self._openapi)

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def metrics(self, _: web.Request) -> web.Response:
        # Collecting reads the service and the engine under their locks: not on the event loop.
        body = await asyncio.to_thread(generate_latest, self.service.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def create_app(
    service: TaskService, keeper_interval_s: float = 1.0, body_timeout_s: float = BODY_TIMEOUT_S
) -> web.Application:
    """The v1 HTTP app over `service`; its keeper runs ``service.run_keeper()`` every interval.
    A request body must arrive within `body_timeout_s`."""
    api = _Api(service, keeper_interval_s, body_timeout_s)
    app = web.Application(middlewares=[_error_responses], client_max_size=max(BODY_LIMITS.values()))
    handlers = api.handlers()
    for route in ROUTES:
        app.router.add_route(route.method, route.path, handlers[route.operation_id])
    app.on_startup.append(api.on_startup)
    app.on_shutdown.append(api.on_shutdown)
    app.on_cleanup.append(api.on_cleanup)
    return app


@web.middleware
async def _error_responses(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Every failure becomes an ErrorResponse with the status the API documents."""
    try:
        return await handler(request)
    except Unauthorized as exc:
        # A stranger's body is not read: end the connection rather than drain it.
        return _error(401, "unauthorized", str(exc), headers={"WWW-Authenticate": "Bearer"}, close=True)
    except StaleAttempt as exc:
        return _error(409, "stale_attempt", str(exc))
    except UnknownGroup as exc:
        return _error(404, "unknown_group", str(exc))
    except _Rejected as exc:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        # The rest of the body is not wanted: end the connection rather than drain it.
        return _error(exc.status, exc.error, str(exc), headers, close=exc.status in (401, 408, 413))
    except ValidationError as exc:
        return _error(422, "invalid_request", _describe(exc))
    except InvalidRequest as exc:
        return _error(422, "invalid_request", str(exc))
    except ResultRefused as exc:
        return _error(422, "result_refused", str(exc))
    except ResultUnverifiable as exc:
        return _error(503, "result_unverifiable", str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason.lower().replace(" ", "_"), f"{request.method} {request.path}")
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return _error(500, "internal_error", "see the task service's log")


def _bearer(request: web.Request) -> str | None:
    """The request's bearer token, or None when it sends none."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _token(request: web.Request) -> str:
    token = _bearer(request)
    if token is None:
        raise _Rejected(
            401, "unauthorized", "missing bearer token: send 'Authorization: Bearer <token from register>'"
        )
    return token


async def _body(
    request: web.Request, model: type[_Model], operation: str, timeout_s: float, empty: _Model | None = None
) -> _Model:
    """The body as `model`; `empty` stands for a body left out, where the call allows that."""
    raw = await _read_limited(request, BODY_LIMITS[operation], timeout_s)
    if empty is not None and not raw.strip():
        return empty
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        if any(error["type"] == "json_invalid" for error in exc.errors()):
            raise _Rejected(400, "invalid_json", f"the body is not JSON: {exc.errors()[0]['msg']}") from exc
        raise


async def _read_limited(request: web.Request, limit: int, timeout_s: float) -> bytes:
    """The body, refused with 413 when it is (or declares itself) over `limit` bytes and with 408
    when it does not arrive within `timeout_s`; a refused body is never read whole."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise _Rejected(
            413, "payload_too_large", f"the body is {declared} bytes; this call takes at most {limit}"
        )
    chunks: list[bytes] = []
    size = 0

    async def read() -> None:
        nonlocal size
        while chunk := await request.content.read(64 * 1024):
            size += len(chunk)
            if size > limit:
                raise _Rejected(
                    413, "payload_too_large", f"the body is over the {limit} bytes this call takes"
                )
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), timeout_s)
    except TimeoutError:
        raise _Rejected(408, "request_timeout", f"the body did not arrive within {timeout_s:g} s") from None
    return b"".join(chunks)


def _describe(exc: ValidationError) -> str:
    """``thread: Input should be greater than or equal to 0; ...`` (``body`` for whole-body rules)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}" for error in exc.errors()
    )


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _json(model: BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        text=model.model_dump_json(), status=status, content_type="application/json", headers=headers
    )


def _accepted() -> web.Response:
    return _json(Accepted())


def _error(
    status: int, error: str, detail: str, headers: dict[str, str] | None = None, close: bool = False
) -> web.Response:
    response = _json(ErrorResponse(error=error, detail=detail), status, headers)
    if close:
        response.force_close()
    return response


class TaskServiceServer(BackgroundServer):
    """Serves a TaskService over HTTP from a background thread with its own event loop.

    ``port=0`` picks a free port; `url` tells where the server listens once started. On `stop`,
    waiting long polls answer ``{"task": null}``, then the thread ends.
    """

    def __init__(
        self,
        service: TaskService,
        host: str = "127.0.0.1",
        port: int = 0,
        keeper_interval_s: float = 1.0,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.service = service
        super().__init__(
            lambda: create_app(service, keeper_interval_s, body_timeout_s),
            "task-service",
            host=host,
            port=port,
            # After refusing a body unread, drain it for a second so the answer is not lost to a
            # reset, then close: a stranger's 64 MiB holds the connection one second, not ten.
            lingering_time_s=LINGER_S,
        )
