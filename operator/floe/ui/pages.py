"""The list pages: the groups (`/`), the tables, sorted, filtered and paged (`/tables`), and each
group's queue with its running processes (`/queue`). Each renders from one `Snapshot`."""

from __future__ import annotations

from floe.ui.html import Html, Writer, escape, health_cell, join, table_url, url
from floe.ui.model import BUSY_STATES, PAGE_SIZE, SORTS, GroupRow, Snapshot, TableQuery, TableRow, select

STATES = ("IDLE", "PENDING", *sorted(BUSY_STATES), "DISABLED")


def _group_link(w: Writer, key: str) -> Html:
    return w.link(url("/tables", {"group": key}), key)


def _executors(group: GroupRow) -> str:
    if group.ready_executors is None or group.desired_executors is None:
        return "local"
    return f"{group.ready_executors} / {group.desired_executors}"


def groups_page(w: Writer, snapshot: Snapshot) -> Html:
    """Each group: its executors, threads, demand, tasks, tables and quota use."""
    rows = []
    for g in snapshot.groups:
        spec = g.group.spec if g.group is not None else None
        rows.append(
            (
                _group_link(w, g.key),
                str(spec.policy) if spec is not None else "(deleted)",
                _executors(g),
                f"{g.stats.threads} / {spec.max_threads}" if spec is not None else str(g.stats.threads),
                g.optimizers,
                g.demand,
                g.stats.running_tasks,
                g.stats.pending_tasks,
                g.tables,
                w.link(url("/queue"), str(g.stats.pending_tables)) if g.stats.pending_tables else "0",
                f"{g.stats.utilization:.0%}",
                g.over_quota,
            )
        )
    headers = (
        "group",
        "policy",
        "executors ready / desired",
        "threads / at most",
        "optimizers",
        "demand (tasks)",
        "running tasks",
        "queued tasks",
        "tables",
        "pending tables",
        "quota use (last hour)",
        "tables over quota",
    )
    states: dict[str, int] = {}
    for row in snapshot.rows:
        states[row.view.state] = states.get(row.view.state, 0) + 1
    summary = w.table(
        ("state", "tables"),
        [(w.link(url("/tables", {"state": s}), s), n) for s, n in sorted(states.items())],
        empty="no tables",
    )
    return join(
        [
            w.table(headers, rows, css="groups", empty="no optimizer groups"),
            Html(
                '<p class="empty">Quota use: the task time of the group\'s threads over the last hour; '
                "a table over quota used at least its whole quota in that hour.</p>"
            ),
            Html("<h2>Tables by state</h2>"),
            summary,
        ]
    )


def _sort_header(w: Writer, query: TableQuery, key: str, title: str) -> Html:
    """A column title that sorts by `key`, the other way round when it already does."""
    if key == query.sort:
        arrow = " ▼" if query.descending else " ▲"
        params = query.params(order="asc" if query.descending else "desc", page=1)
    else:
        arrow = ""
        params = query.params(sort=key, order="", page=1)  # its own first direction
    return w.link(url("/tables", params), title + arrow, "sort")


def _select(w: Writer, name: str, current: str, options: list[tuple[str, str]]) -> Html:
    choices = [Html('<option value="">any</option>')]
    for value, label in options:
        selected = " selected" if value == current else ""
        choices.append(Html(f'<option value="{escape(value)}"{selected}>{w.text(label)}</option>'))
    return Html(f'<label>{escape(name)}<select name="{escape(name)}">{join(choices)}</select></label>')


def _filters(w: Writer, snapshot: Snapshot, query: TableQuery) -> Html:
    """The filter form: a GET of this same page, which changes nothing."""
    reasons = sorted({row.reason for row in snapshot.rows if row.reason})
    fields = [
        _select(w, "group", query.group, [(g.key, g.key) for g in snapshot.groups]),
        _select(w, "state", query.state, [(s, s) for s in STATES]),
        _select(w, "reason", query.reason, [(r, r) for r in reasons]),
        Html(
            f'<label>name<input type="search" name="name" value="{w.text(query.name)}" '
            'placeholder="part of namespace/name"></label>'
        ),
        Html(f'<input type="hidden" name="sort" value="{escape(query.sort)}">'),
        Html(f'<input type="hidden" name="order" value="{"desc" if query.descending else "asc"}">'),
        Html('<button type="submit">filter</button>'),
        w.link("/tables", "clear"),
    ]
    return Html(f'<form class="filters" method="get" action="/tables">{join(fields)}</form>')


def _table_row(w: Writer, row: TableRow) -> tuple[Html | str | int | float | None, ...]:
    v = row.view
    wait = row.wait
    position = (
        f" ({wait.queue_position} of {wait.queue_length})"
        if wait is not None and wait.queue_position is not None
        else ""
    )
    return (
        w.link(table_url(v.table_id), v.table_id),
        _group_link(w, v.group_key),
        v.state,
        health_cell(w, v.health),
        row.backlog,
        v.running_tasks,
        f"{v.occupation:.0%}",
        v.data_files,
        v.delete_files,
        f"{row.reason}{position}" if wait is not None else None,
        v.last_error or v.last_result,
    )


def tables_page(w: Writer, snapshot: Snapshot, query: TableQuery) -> Html:
    """One page of the tables the query's filters let through, in its order."""
    page = select(snapshot.rows, query)
    titles = {
        "name": "table",
        "state": "state",
        "health": "health",
        "backlog": "backlog (tasks)",
        "occupation": "quota occupation",
        "waiting": "waiting for",
    }
    headers: list[Html | str] = [
        _sort_header(w, query, "name", titles["name"]),
        "group",
        _sort_header(w, query, "state", titles["state"]),
        _sort_header(w, query, "health", titles["health"]),
        _sort_header(w, query, "backlog", titles["backlog"]),
        "running tasks",
        _sort_header(w, query, "occupation", titles["occupation"]),
        "data files",
        "delete files",
        _sort_header(w, query, "waiting", titles["waiting"]),
        "last result",
    ]
    assert set(titles) == set(SORTS), "every order the model offers has a column"
    first = (page.page - 1) * PAGE_SIZE + 1 if page.matching else 0
    shown = Html(
        f'<p class="count">{page.matching} of {len(snapshot.rows)} tables match; '
        f"{first}&ndash;{first + len(page.rows) - 1 if page.rows else 0} shown.</p>"
    )
    pager = []
    if page.page > 1:
        pager.append(w.link(url("/tables", query.params(page=page.page - 1)), "← previous", "prev"))
    pager.append(Html(f"<span>page {page.page} of {page.pages}</span>"))
    if page.page < page.pages:
        pager.append(w.link(url("/tables", query.params(page=page.page + 1)), "next →", "next"))
    return join(
        [
            _filters(w, snapshot, query),
            shown,
            w.table(
                headers, [_table_row(w, row) for row in page.rows], css="tables", empty="no table matches"
            ),
            Html(f'<nav class="pager">{join(pager)}</nav>'),
        ]
    )


def _queue_order(row: TableRow) -> tuple[bool, int]:
    """Planning order: by queue position, tables out of the queue (planning now) last."""
    position = row.wait.queue_position if row.wait is not None else None
    return (position is None, position or 0)


def queue_page(w: Writer, snapshot: Snapshot) -> Html:
    """Per group: the tables waiting to be planned, in the order the group plans them, and the
    processes running now."""
    queued: dict[str, list[TableRow]] = {}
    running: dict[str, list[TableRow]] = {}
    for row in snapshot.rows:
        key = row.view.group_key
        if row.view.state in BUSY_STATES or row.view.running_tasks:
            running.setdefault(key, []).append(row)
        elif row.view.state == "PENDING":
            queued.setdefault(key, []).append(row)
    parts = []
    keys = [g.key for g in snapshot.groups] + sorted(
        (set(queued) | set(running)) - {g.key for g in snapshot.groups}
    )
    for key in keys:
        pending = sorted(queued.get(key, []), key=_queue_order)
        parts.append(Html(f'<h2 id="group-{escape(key)}">group {_group_link(w, key)}</h2>'))
        parts.append(Html("<h3>Running processes</h3>"))
        parts.append(
            w.table(
                ("table", "state", "process", "running tasks", "queued tasks"),
                [
                    (
                        w.link(table_url(r.view.table_id), r.view.table_id),
                        r.view.state,
                        r.view.process_id,
                        r.view.running_tasks,
                        r.view.queued_tasks,
                    )
                    for r in running.get(key, [])
                ],
                css="running",
                empty="no process running",
            )
        )
        parts.append(Html("<h3>Waiting to be planned, in planning order</h3>"))
        parts.append(
            w.table(
                ("#", "table", "due tasks", "quota occupation", "waiting for", "why"),
                [
                    (
                        r.wait.queue_position if r.wait else None,
                        w.link(table_url(r.view.table_id), r.view.table_id),
                        r.view.due_tasks,
                        f"{r.view.occupation:.0%}",
                        r.reason,
                        r.wait.message if r.wait else r.view.pending_reason,
                    )
                    for r in pending
                ],
                css="queue",
                empty="no table waiting",
            )
        )
    if not parts:
        parts.append(Html('<p class="empty">no optimizer groups</p>'))
    return join(parts)
