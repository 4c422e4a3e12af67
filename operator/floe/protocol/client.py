"""A small synchronous client of the task service's v1 HTTP API, safe to share between threads.

Optimizer threads call it directly. Each thread keeps one keep-alive connection: a task
costs a poll, an ack and a complete, and a new TCP connection for each tripled the
service's CPU per task. `close` aborts the calls in flight so a stopping optimizer need
not wait out its long polls. Proxies are not used: the task service is reached inside the
cluster (or on this machine).

A reused connection may have been closed by the server while idle (aiohttp closes
connections idle past its keep-alive timeout). The client checks for that before each
reuse, and when a call on a reused connection still fails before any answer, it sends
the call again on a new connection only when doing so cannot change the outcome:
heartbeat, poll, ack (a repeated ack is a no-op) and unregister. Register and complete
are never re-sent here: the first may have been processed, and a second complete would
be answered 409, which the optimizer would take for a refusal and delete the files the
first one delivered. Their failures raise ServiceUnavailable, and the optimizer's own
retry (`floe_optimizer.app`) knows the first attempt may have landed.

Refusals raise subclasses of the service's own errors (`floe.protocol.errors`), carrying
the server's message, so one ``except`` clause serves the in-process service and this client.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import select
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from pydantic import BaseModel, ValidationError

from floe.protocol import errors
from floe.protocol.assignment import TaskAssignment
from floe.protocol.wire import (
    API_VERSION,
    Accepted,
    CompleteRequest,
    CompleteResponse,
    ErrorResponse,
    GroupExecutors,
    PollRequest,
    PollResponse,
    RegisterRequest,
    RegisterResponse,
)

_Model = TypeVar("_Model", bound=BaseModel)

TOKEN_ENV = "FLOE_REGISTRATION_TOKEN"
TOKEN_FILE_ENV = "FLOE_REGISTRATION_TOKEN_FILE"

RegistrationToken = Callable[[], str | None]
"""Where register finds the registration token: called at each registration, so a rotated
Secret (whose mounted file the kubelet rewrites) is picked up without a restart."""


def registration_token_from_env(environ: dict[str, str] | None = None) -> RegistrationToken:
    """The token in ``$FLOE_REGISTRATION_TOKEN``, else in the file ``$FLOE_REGISTRATION_TOKEN_FILE``.

    The file is read at each call (surrounding whitespace stripped); neither set: None
    (the service must then admit optimizers without one). A file that cannot be read
    raises OSError at the call, which the optimizer reports and retries.
    """
    env = dict(os.environ if environ is None else environ)
    value = env.get(TOKEN_ENV, "").strip()
    path = env.get(TOKEN_FILE_ENV, "").strip()
    if value:
        return lambda: value
    if path:
        return lambda: read_token_file(Path(path))
    return lambda: None


def read_token_file(path: Path) -> str:
    """The token in ``path``, whitespace stripped; ValueError if the file is empty."""
    token = path.read_text().strip()
    if not token:
        raise ValueError(f"the registration token file {path} is empty")
    return token


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
    `registration_token` is what register presents (a string, or a function called at
    each registration); None presents none.
    """

    def __init__(
        self,
        base_url: str,
        timeout: float = 30.0,
        registration_token: str | RegistrationToken | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"task service URL must be http(s)://host[:port][/prefix], got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        if registration_token is None or isinstance(registration_token, str):
            fixed = registration_token
            self._registration_token: RegistrationToken = lambda: fixed
        else:
            self._registration_token = registration_token
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = f"{parts.path.rstrip('/')}/{API_VERSION}"
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self._local = threading.local()
        self._closed = False
        self._next_poll_supported = True

    def register(self, request: RegisterRequest) -> RegisterResponse:
        """Join a group; raises UnknownGroup if the service has no such group, Unauthorized if
        it refuses the registration token."""
        try:
            return self._call(
                "POST",
                "/optimizers",
                RegisterResponse,
                token=self._registration_token(),
                body=request,
                resend=False,
            )
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

    def complete(self, token: str, attempt_id: str, request: CompleteRequest) -> TaskAssignment | None:
        """Report the attempt's outcome; raises StaleAttempt if it is no longer this optimizer's.

        With ``request.next_poll``, returns the thread's next task when the service had one
        ready (None otherwise: poll as usual); without, always None. A service from before
        ``next_poll`` refuses it with 422 without recording anything, so the completion is
        then sent again without it, and never asks again.
        """
        if request.next_poll is not None and not self._next_poll_supported:
            request = request.model_copy(update={"next_poll": None})
        path = f"/tasks/{quote(attempt_id, safe='')}/complete"
        try:
            response = self._call(
                "POST",
                path,
                CompleteResponse,
                token=token,
                body=request,
                attempt_id=attempt_id,
                resend=False,
                # A service from before next_poll refuses the field even when null.
                exclude={"next_poll"} if request.next_poll is None else None,
            )
        except RequestFailed as exc:
            if request.next_poll is None or exc.status != 422 or "next_poll" not in str(exc):
                raise
            self._next_poll_supported = False
            return self.complete(token, attempt_id, request)
        return response.task

    def executors(self, group: str, known: int | None = None, wait_s: float = 0.0) -> int | None:
        """The executor count the operator decided for `group` (None: none decided since it
        started), presenting the registration token; with `known`, waits up to `wait_s` for a
        count other than it. Raises UnknownGroup on 404 (no such group, or a service from
        before this call)."""
        query = {"group": group, "wait_s": f"{wait_s:g}"}
        if known is not None:
            query["known"] = str(known)
        try:
            response = self._call(
                "GET",
                f"/executors?{urlencode(query)}",
                GroupExecutors,
                token=self._registration_token(),
                timeout=self.timeout + wait_s,
            )
        except RequestFailed as exc:
            if exc.status == 404:
                raise UnknownGroup(group, str(exc)) from None
            raise
        return response.executors

    def unregister(self, token: str) -> None:
        """Leave the group; the tasks still held go back to the queue."""
        self._call("DELETE", "/optimizers", Accepted, token=token)

    def close(self) -> None:
        """Abort the calls in flight (they raise ServiceUnavailable), shut every connection down
        and refuse new calls."""
        with self._lock:
            self._closed = True
            connections = list(self._open)
            self._open.clear()
        # Shut down, not closed: closing a connection another thread is reading from would
        # pull its socket from under it; the owning threads close theirs on the error.
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
        resend: bool = True,
        exclude: set[str] | None = None,
    ) -> _Model:
        url = f"{self.base_url}/{API_VERSION}{path}"
        headers = {"Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        payload = None
        if body is not None:
            payload = body.model_dump_json(exclude=exclude).encode()
            headers["Content-Type"] = "application/json"
        status, data = self._exchange(
            method, self._prefix + path, headers, payload, timeout or self.timeout, resend
        )
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
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        payload: bytes | None,
        timeout: float,
        resend: bool,
    ) -> tuple[int, bytes]:
        """One request on this thread's connection; with `resend`, once more on a new connection
        when a reused one fails before answering."""
        while True:
            connection, reused = self._connection(timeout)
            try:
                connection.request(method, path, body=payload, headers=headers)
                response = connection.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as exc:
                self._discard(connection)
                if self._closed:
                    raise ServiceUnavailable(
                        f"the task service client was closed during the call ({exc})"
                    ) from exc
                if reused and resend and isinstance(exc, ConnectionError | http.client.BadStatusLine):
                    continue  # the next connection is a new one: this retries once at most
                raise ServiceUnavailable(
                    f"task service unreachable at {self.base_url}: {type(exc).__name__}: {exc}"
                ) from exc
            if response.will_close:
                self._discard(connection)
            return response.status, data

    def _connection(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's open connection and True, or a new connected one and False."""
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is not None and _usable(connection):
            assert connection.sock is not None
            connection.sock.settimeout(timeout)
            return connection, True
        if connection is not None:
            self._discard(connection)
        connection_class = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        connection = connection_class(self._host, self._port, timeout=timeout)
        with self._lock:
            if self._closed:
                raise ServiceUnavailable("the task service client is closed")
            self._open.add(connection)
        try:
            connection.connect()
        except OSError as exc:
            self._discard(connection)
            raise ServiceUnavailable(
                f"task service unreachable at {self.base_url}: {type(exc).__name__}: {exc}"
            ) from exc
        # close() may have run during connect, before this socket existed to be shut down.
        with self._lock:
            if self._closed:
                connection.close()
                raise ServiceUnavailable("the task service client is closed")
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._local.connection = connection
        return connection, False

    def _discard(self, connection: http.client.HTTPConnection) -> None:
        connection.close()
        with self._lock:
            self._open.discard(connection)
        if getattr(self._local, "connection", None) is connection:
            self._local.connection = None


def _usable(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle keep-alive connection is still open: nothing may be readable on it
    between calls, so anything readable is the server's close (EOF) or garbage."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _error_text(data: bytes) -> str:
    try:
        error = ErrorResponse.model_validate_json(data)
    except ValidationError:
        return data[:500].decode(errors="replace") or "(no body)"
    return f"{error.error}: {error.detail}" if error.detail else error.error
