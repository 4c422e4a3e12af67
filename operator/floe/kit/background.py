"""An aiohttp application served from a background thread with its own event loop.

The operator runs its servers beside kopf's loop and the engine's thread, and the embedded
``floe run`` and the tests beside their own code: each server gets a thread, binds before
`start` returns (so a bind error is raised to the caller) and drains on `stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Self

from aiohttp import web

log = logging.getLogger(__name__)


class BackgroundServer:
    """Serves the application `app_factory()` makes, over HTTP or (with `ssl_context`) HTTPS.

    ``port=0`` picks a free port; `url` tells where the server listens once started.
    """

    def __init__(
        self,
        app_factory: Callable[[], web.Application],
        name: str,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        lingering_time_s: float = 10.0,
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self._app_factory = app_factory
        self._ssl_context = ssl_context
        self._lingering_time_s = lingering_time_s
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._failure: Exception | None = None

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:41234``."""
        if not self._started.is_set() or self._failure is not None:
            raise RuntimeError(f"the {self.name} server is not running")
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://[{host}]:{self.port}" if ":" in host else f"{scheme}://{host}:{self.port}"

    def start(self) -> None:
        """Bind and start serving; returns once requests are answered. Bind errors raise here."""
        if self._thread is not None:
            raise RuntimeError(f"the {self.name} server was already started")
        sock = socket.create_server((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._serve(sock),), name=f"floe-{self.name}", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            self._thread.join()
            raise RuntimeError(f"the {self.name} server did not start: {self._failure}") from self._failure

    def stop(self) -> None:
        """Stop serving (the application's shutdown hooks run), then end the thread."""
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    async def _serve(self, sock: socket.socket) -> None:
        runner = web.AppRunner(
            self._app_factory(),
            access_log=None,
            shutdown_timeout=5.0,
            lingering_time=self._lingering_time_s,
        )
        try:
            await runner.setup()
            await web.SockSite(runner, sock, ssl_context=self._ssl_context).start()
        except Exception as exc:
            self._failure = exc
            self._started.set()
            await runner.cleanup()
            sock.close()
            return
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._started.set()
        log.info("%s listening on %s", self.name, self.url)
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()
