"""A small synchronous client of the task service's v1 HTTP API, safe to share between threads.

Optimizer threads call it directly; each call opens its own connection (calls are few:
a heartbeat every few seconds, one long poll per thread), and `close` aborts the calls
in flight so a stopping optimizer need not wait out its long polls. Proxies are not
used: the task service is reached inside the cluster (or on this machine).

Refusals raise subclasses of the service's own errors (`floe.service.errors`), carrying
the server's message, so one ``except`` clause serves the in-process service and this client.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from typing import Literal, TypeVar
from urllib.parse import quote, urlsplit

from pydantic import BaseModel, ValidationError

from floe.service import errors
from floe.service.wire import (
    API_VERSION,
    Accepted,
    CompleteRequest,
    ErrorResponse,
    PollRequest,
    PollResponse,
    RegisterRequest,
    RegisterResponse,
    TaskAssignment,
)

_Model = TypeVar("_Model", bound=BaseModel)


class ServiceUnavailable(Exception):
    """The service could not be reached, or failed (5xx): the call may be retried."""


class RequestFailed(Exception):
    """The service refused the call for a reason retrying will not cure (400, 404, 422)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Unauthorized(errors.Unauthorized):
    """401: the token is missing, wrong or expired (the optimizer was dropped); register again."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)


class StaleAttempt(errors.StaleAttempt):
    """409: the attempt was superseded or already finished; the call was ignored."""

    def __init__(self, attempt_id: str, message: str) -> None:
        Exception.__init__(self, message)
        self.attempt_id = attempt_id
        self.reason = message


class UnknownGroup(errors.UnknownGroup):
    """404 on register: the service has no optimizer group of that name."""

    def __init__(self, group: str, message: str) -> None:
        Exception.__init__(self, message)
        self.group = group


class TaskServiceClient:
    """Calls the task service at `base_url` (e.g. ``http://floe-operator:8080``).

    `timeout` bounds each call; a poll may take its ``wait_s`` on top of it.
    """

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"task service URL must be http(s)://host[:port][/prefix], got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = f"{parts.path.rstrip('/')}/{API_VERSION}"
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self._closed = False

    def register(self, request: RegisterRequest) -> RegisterResponse:
        """Join a group; raises UnknownGroup if the service has no such group."""
        try:
            return self._call("POST", "/optimizers", RegisterResponse, body=request)
        except RequestFailed as exc:
            if exc.status == 404:
                raise UnknownGroup(request.group, str(exc)) from None
            raise

    def heartbeat(self, token: str) -> None:
        """Tell the service this optimizer is alive."""
        self._call("POST", "/optimizers/heartbeat", Accepted, token=token)

    def poll(self, token: str, thread: int, wait_s: float = 20.0) -> TaskAssignment | None:
        """A task for `thread`, waiting up to `wait_s` for one; None when none came."""
        response = self._call(
            "POST",
            "/poll",
            PollResponse,
            token=token,
            body=PollRequest(thread=thread, wait_s=wait_s),
            timeout=self.timeout + wait_s,
        )
        return response.task

    def ack(self, token: str, attempt_id: str) -> None:
        """Start the attempt; raises StaleAttempt if it is no longer this optimizer's."""
        self._call(
            "POST", f"/tasks/{quote(attempt_id, safe='')}/ack", Accepted, token=token, attempt_id=attempt_id
        )

    def complete(self, token: str, attempt_id: str, request: CompleteRequest) -> None:
        """Report the attempt's outcome; raises StaleAttempt if it is no longer this optimizer's."""
        self._call(
            "POST",
            f"/tasks/{quote(attempt_id, safe='')}/complete",
            Accepted,
            token=token,
            body=request,
            attempt_id=attempt_id,
        )

    def unregister(self, token: str) -> None:
        """Leave the group; the tasks still held go back to the queue."""
        self._call("DELETE", "/optimizers", Accepted, token=token)

    def close(self) -> None:
        """Abort the calls in flight (they raise ServiceUnavailable) and refuse new ones."""
        with self._lock:
            self._closed = True
            connections = list(self._open)
        for connection in connections:
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)

    def _call(
        self,
        method: Literal["GET", "POST", "DELETE"],
        path: str,
        response_model: type[_Model],
        token: str | None = None,
        body: BaseModel | None = None,
        attempt_id: str = "",
        timeout: float | None = None,
    ) -> _Model:
        url = f"{self.base_url}/{API_VERSION}{path}"
        headers = {"Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        payload = None
        if body is not None:
            payload = body.model_dump_json().encode()
            headers["Content-Type"] = "application/json"
        status, data = self._exchange(method, self._prefix + path, headers, payload, timeout or self.timeout)
        if status == 200:
            try:
                return response_model.model_validate_json(data)
            except ValidationError as exc:
                raise RequestFailed(status, f"{method} {url}: unexpected answer: {exc}") from None
        message = f"{method} {url} answered {status}: {_error_text(data)}"
        if status == 401:
            raise Unauthorized(message)
        if status == 409:
            raise StaleAttempt(attempt_id, message)
        if status >= 500:
            raise ServiceUnavailable(message)
        raise RequestFailed(status, message)

    def _exchange(
        self, method: str, path: str, headers: dict[str, str], payload: bytes | None, timeout: float
    ) -> tuple[int, bytes]:
        connection_class = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        connection = connection_class(self._host, self._port, timeout=timeout)
        with self._lock:
            if self._closed:
                raise ServiceUnavailable("the task service client is closed")
            self._open.add(connection)
        try:
            connection.connect()
            # close() may have run during connect, before this socket existed to be shut down.
            with self._lock:
                if self._closed:
                    raise ServiceUnavailable("the task service client is closed")
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            if self._closed:
                raise ServiceUnavailable(
                    f"the task service client was closed during the call ({exc})"
                ) from exc
            raise ServiceUnavailable(
                f"task service unreachable at {self.base_url}: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            connection.close()
            with self._lock:
                self._open.discard(connection)


def _error_text(data: bytes) -> str:
    try:
        error = ErrorResponse.model_validate_json(data)
    except ValidationError:
        return data[:500].decode(errors="replace") or "(no body)"
    return f"{error.error}: {error.detail}" if error.detail else error.error
