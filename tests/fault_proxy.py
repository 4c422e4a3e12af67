"""An HTTP proxy that fails on purpose, put between floe and a real server (a REST catalog, the
task service) to make the faults of a real network happen when a test says.

Requests are forwarded to the upstream server as they come, except those a rule matches
(by method and path). A rule can:

- ``refuse``: close the connection without forwarding, as a server that went down would;
- ``drop_answer``: forward the request, then close the connection without relaying the answer:
  the server acted, the client never hears it (a timeout or a connection reset after sending);
- ``hold``: keep the request until the test releases it, then forward it, or drop it unsent
  when the test says the client is gone.

``down()`` refuses everything until ``up()``; ``limit_rate()`` answers 429 Too Many Requests,
with a ``Retry-After``, to the requests above a rate, as a managed catalog's throttle does.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
}


@dataclass
class Rule:
    """What to do with the requests matching ``method`` and the ``path`` pattern."""

    method: str
    path: re.Pattern[str]
    action: str
    times: int | None = None
    """How many requests the rule takes; None: all of them."""
    down_after: bool = False
    """With ``drop_answer``: the proxy goes down as the answer is dropped (the server crashed)."""
    matched: int = 0
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    forward_held: bool = True

    def takes(self, method: str, path: str) -> bool:
        return (
            method == self.method
            and self.path.search(path) is not None
            and (self.times is None or self.matched < self.times)
        )

    def let_go(self, forward: bool = True) -> None:
        """Release held requests: forward them, or drop them unsent (their client is gone)."""
        self.forward_held = forward
        self.release.set()


class FaultProxy:
    """A threaded HTTP/1.1 proxy to ``upstream`` (``http://host:port``), on a free loopback port."""

    def __init__(self, upstream: str, host: str = "127.0.0.1") -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self._upstream = (parsed.hostname or "", parsed.port or 80)
        self._rules: list[Rule] = []
        self._down = False
        self._lock = threading.Lock()
        self.forwarded: list[tuple[str, str, int]] = []
        """(method, path, status) of every request forwarded and answered upstream."""
        self._rate: tuple[float, float] | None = None
        self._tokens = 0.0
        self._filled_at = 0.0
        self.throttled = 0
        """Requests answered 429 by `limit_rate`."""
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            do_POST = do_DELETE = do_PUT = do_HEAD = do_GET

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        """The proxy's base URL, to give clients instead of the upstream's."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FaultProxy:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; held requests are dropped."""
        with self._lock:
            for rule in self._rules:
                rule.let_go(forward=False)
        self._server.shutdown()
        self._server.server_close()

    def down(self) -> None:
        """Refuse every request (close its connection unanswered) until `up`."""
        self._down = True

    def up(self) -> None:
        """Forward requests again."""
        self._down = False

    def limit_rate(self, per_s: float | None, retry_after_s: float = 1.0) -> None:
        """Answer 429 with ``Retry-After: retry_after_s`` to requests above `per_s` a second
        (a bucket of one second's worth); None: forward everything again."""
        with self._lock:
            self._rate = None if per_s is None else (per_s, retry_after_s)
            self._tokens, self._filled_at = (per_s or 0.0), time.monotonic()

    def _over_rate(self) -> float | None:
        """The Retry-After to answer when the request is above the rate; None to forward it."""
        with self._lock:
            if self._rate is None:
                return None
            per_s, retry_after_s = self._rate
            now = time.monotonic()
            self._tokens = min(per_s, self._tokens + (now - self._filled_at) * per_s)
            self._filled_at = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return None
            self.throttled += 1
            return retry_after_s

    def rule(
        self, method: str, path: str, action: str, times: int | None = 1, down_after: bool = False
    ) -> Rule:
        """Add a rule for requests whose path matches the regular expression `path`."""
        if action not in ("refuse", "drop_answer", "hold"):
            raise ValueError(f"unknown action {action!r}")
        added = Rule(method, re.compile(path), action, times, down_after)
        with self._lock:
            self._rules.append(added)
        return added

    def clear(self) -> None:
        """Drop every rule, releasing held requests unsent."""
        with self._lock:
            rules, self._rules = self._rules, []
        for rule in rules:
            rule.let_go(forward=False)

    def _match(self, method: str, path: str) -> Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.takes(method, path):
                    rule.matched += 1
                    return rule
        return None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        rule = self._match(handler.command, handler.path)

        if self._down or (rule is not None and rule.action == "refuse"):
            handler.close_connection = True
            return
        retry_after = self._over_rate()
        if retry_after is not None:
            error = {"error": {"message": "slow down", "type": "TooManyRequestsException", "code": 429}}
            answer = json.dumps(error).encode()
            handler.send_response_only(429, "Too Many Requests")
            handler.send_header("Retry-After", f"{retry_after:g}")
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(answer)))
            handler.end_headers()
            handler.wfile.write(answer)
            return
        if rule is not None and rule.action == "hold":
            rule.arrived.set()
            rule.release.wait()
            if not rule.forward_held:
                handler.close_connection = True
                return
        status, reason, headers, answer = self._forward(handler, body)
        if rule is not None and rule.action == "drop_answer":
            if rule.down_after:
                self._down = True
            rule.arrived.set()
            handler.close_connection = True
            return
        handler.send_response_only(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(answer)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(answer)

    def _forward(
        self, handler: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self._upstream, timeout=120)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP}
            connection.request(handler.command, handler.path, body=body or None, headers=headers)
            response = connection.getresponse()
            answer = response.read()
            self.forwarded.append((handler.command, handler.path, response.status))
            return response.status, response.reason, response.getheaders(), answer
        finally:
            connection.close()


@contextmanager
def fault_proxy(upstream: str) -> Iterator[FaultProxy]:
    """A started FaultProxy to `upstream`, stopped on exit."""
    proxy = FaultProxy(upstream).start()
    try:
        yield proxy
    finally:
        proxy.stop()


COMMIT_PATH = r"^/v1/(?:[^/]+/)?namespaces/[^/]+/tables/[^/?]+$"
"""A REST catalog's table commit (POST ``updateTable``), with or without a prefix."""
