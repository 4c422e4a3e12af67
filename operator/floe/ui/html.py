"""HTML built safely: text is escaped (and masked of credentials) unless it is `Html` already, and
every page shares one layout with its styles inline (no script, nothing fetched from elsewhere)."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import quote, urlencode


class Html(str):
    """Markup that is safe as it is: built here from escaped text."""


def escape(text: str) -> Html:
    """`text` as HTML text (quotes escaped too, so it is safe inside an attribute)."""
    return Html(html.escape(text, quote=True))


def join(parts: Iterable[Html]) -> Html:
    """Markup fragments one after another."""
    return Html("".join(parts))


def url(path: str, params: Mapping[str, str] | None = None) -> str:
    """A link's target: `path` with `params` as its query string."""
    return f"{path}?{urlencode(params)}" if params else path


def table_url(table_id: str) -> str:
    """The page of a table (``namespace/name``), each part quoted."""
    namespace, _, name = table_id.partition("/")
    return f"/tables/{quote(namespace, safe='')}/{quote(name, safe='')}"


def human_bytes(num: float) -> str:
    """A size in binary units, e.g. ``1.5 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(num) < 1024 or unit == "TiB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.1f} {unit}"
        num /= 1024
    raise AssertionError("unreachable: the loop returns at its last unit")


class Writer:
    """Turns text into markup: masked of credentials (`redact`), then escaped."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        self.redact = redact

    def text(self, value: str) -> Html:
        """Free text as markup: credentials masked, then escaped."""
        return escape(self.redact(value))

    def cell(self, value: Html | str | int | float | None) -> Html:
        """A table cell's content: markup as it is, text masked and escaped, numbers as written."""
        if value is None:
            return Html("&ndash;")
        if isinstance(value, Html):
            return value
        if isinstance(value, float):
            return escape(f"{value:g}")
        return self.text(str(value))

    def link(self, href: str, text: str, css: str = "") -> Html:
        """An anchor to `href` (a path of this UI) reading `text`."""
        attribute = f' class="{escape(css)}"' if css else ""
        return Html(f'<a href="{escape(href)}"{attribute}>{self.text(text)}</a>')

    def table(
        self,
        headers: Iterable[Html | str],
        rows: Iterable[Iterable[Html | str | int | float | None]],
        css: str = "",
        empty: str = "none",
    ) -> Html:
        """A table; `empty` is said when there are no rows."""
        head = join(Html(f"<th>{self.cell(h)}</th>") for h in headers)
        body = [join(Html(f"<td>{self.cell(c)}</td>") for c in row) for row in rows]
        if not body:
            return Html(f'<p class="empty">{self.text(empty)}</p>')
        lines = join(Html(f"<tr>{row}</tr>") for row in body)
        attribute = f' class="{escape(css)}"' if css else ""
        return Html(f"<table{attribute}><thead><tr>{head}</tr></thead><tbody>{lines}</tbody></table>")


NAV = (("/", "Groups"), ("/tables", "Tables"), ("/queue", "Queue"))

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#1d2433;background:#f6f7f9}
header{background:#1d3557;color:#fff;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:center}
header a{color:#dbe7ff;text-decoration:none}header a.on{color:#fff;font-weight:600}
header .brand{font-weight:700;color:#fff}
main{padding:1em 1.2em;max-width:1400px}
h1{font-size:1.4em;margin:.2em 0 .6em}h2{font-size:1.1em;margin:1.4em 0 .5em}
table{border-collapse:collapse;background:#fff;width:100%;font-size:.9em}
th,td{border-bottom:1px solid #e3e6ea;padding:.35em .6em;text-align:left;vertical-align:top}
th{background:#eef1f5}th a{color:inherit}
td.num,th.num{text-align:right}
.notice{background:#fff3cd;border:1px solid #e0c36c;padding:.5em .8em;margin-bottom:1em}
.empty{color:#6b7280;font-style:italic}
.filters{display:flex;gap:.6em;flex-wrap:wrap;align-items:end;margin-bottom:.8em}
.filters label{display:flex;flex-direction:column;font-size:.8em;color:#4b5563}
.pager{margin:.8em 0;display:flex;gap:1em}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.25em 1.2em;background:#fff;padding:.8em}
dl.facts dt{color:#4b5563}dl.facts dd{margin:0}
.charts{display:flex;flex-wrap:wrap;gap:1em}
figure{background:#fff;margin:0;padding:.5em;border:1px solid #e3e6ea}
figcaption{font-size:.85em;color:#374151;margin-bottom:.3em}
code{background:#eef1f5;padding:.1em .3em}
.health-bad{color:#b42318;font-weight:600}.health-fair{color:#b54708}.health-good{color:#067647}
"""

SECURITY_HEADERS = {
    # Nothing runs and nothing is loaded from elsewhere: styles and charts are inline.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def layout(
    writer: Writer, title: str, active: str, body: Html, notice: str = "", brand: str = "floe"
) -> Html:
    """A whole page: the header with the navigation (`active`: the path of the current section),
    a `notice` if any, then `body`."""
    nav = join(writer.link(path, name, "on" if path == active else "") for path, name in NAV)
    banner = Html(f'<p class="notice">{writer.text(notice)}</p>') if notice else Html("")
    return Html(
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{writer.text(title)} · {writer.text(brand)}</title><style>{STYLE}</style></head>"
        f'<body><header><span class="brand">{writer.text(brand)}</span>{nav}</header>'
        f"<main>{banner}<h1>{writer.text(title)}</h1>{body}</main></body></html>\n"
    )


def health_cell(writer: Writer, health: int | None) -> Html:
    """A health score, coloured by how bad it is."""
    if health is None:
        return Html("&ndash;")
    css = "health-bad" if health < 50 else "health-fair" if health < 80 else "health-good"
    return Html(f'<span class="{css}">{writer.text(str(health))}</span>')
