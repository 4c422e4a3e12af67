"""The UI's aiohttp application, GET only, and `UiServer`, which serves it from a thread of its own
(the operator's ``--ui-port``, ``floe run --ui-port``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from floe.kit.background import BackgroundServer
from floe.ui.html import SECURITY_HEADERS, Html, Writer, layout
from floe.ui.model import TableQuery, UiSource
from floe.ui.pages import groups_page, queue_page, tables_page
from floe.ui.table_page import table_page


class _Pages:
    """The handlers: each reads the source's snapshot and renders off the event loop (reading the
    engine waits for its lock, which a round may hold)."""

    def __init__(self, source: UiSource) -> None:
        self.source = source

    def _page(
        self, title: str, active: str, render: Callable[[Writer], Html], status: int = 200
    ) -> web.Response:
        writer = Writer(self.source.redact)
        body = layout(writer, title, active, render(writer), self.source.notice(), self.source.title)
        return web.Response(text=body, status=status, content_type="text/html", headers=SECURITY_HEADERS)

    async def _render(self, build: Callable[[], web.Response]) -> web.Response:
        return await asyncio.get_running_loop().run_in_executor(None, build)

    async def groups(self, _: web.Request) -> web.Response:
        return await self._render(
            lambda: self._page("Optimizer groups", "/", lambda w: groups_page(w, self.source.snapshot()))
        )

    async def tables(self, request: web.Request) -> web.Response:
        query = TableQuery.parse(request.query)
        return await self._render(
            lambda: self._page("Tables", "/tables", lambda w: tables_page(w, self.source.snapshot(), query))
        )

    async def table(self, request: web.Request) -> web.Response:
        table_id = f"{request.match_info['namespace']}/{request.match_info['name']}"

        def build() -> web.Response:
            row = self.source.snapshot().by_id.get(table_id)
            if row is None:
                return self._page(
                    "No such table",
                    "/tables",
                    lambda w: Html(f"<p>floe serves no table {w.text(table_id)}.</p>"),
                    status=404,
                )
            detail = self.source.detail(table_id)
            points = self.source.points(detail) if detail is not None else []
            return self._page(row.view.table_id, "/tables", lambda w: table_page(w, row, detail, points))

        return await self._render(build)

    async def queue(self, _: web.Request) -> web.Response:
        return await self._render(
            lambda: self._page(
                "Queue and running processes", "/queue", lambda w: queue_page(w, self.source.snapshot())
            )
        )


def create_ui_app(source: UiSource) -> web.Application:
    """The UI: ``/`` (groups), ``/tables``, ``/tables/{namespace}/{name}``, ``/queue``; GET (and
    HEAD) only, so nothing it serves changes anything."""
    pages = _Pages(source)
    app = web.Application()
    app.router.add_get("/", pages.groups)
    app.router.add_get("/tables", pages.tables)
    app.router.add_get("/tables/{namespace}/{name}", pages.table)
    app.router.add_get("/queue", pages.queue)
    return app


class UiServer(BackgroundServer):
    """Serves the UI of `source` from a background thread; ``port=0`` picks a free port."""

    def __init__(self, source: UiSource, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(lambda: create_ui_app(source), "ui", host=host, port=port)
