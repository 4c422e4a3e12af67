"""A table's page (`/tables/NAMESPACE/NAME`): its state, what it waits for, its health and what
took points off it, the process running, its maintenance, and its last runs as charts."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from floe.api.history import STATUS_HISTORY, RunRecord
from floe.api.meta import rfc3339
from floe.optimizing.views import TableDetail
from floe.planning.health import EQUALITY_DELETES_POINTS, POSITION_DELETES_POINTS, SMALL_FILES_POINTS
from floe.ui.charts import Series, line_chart
from floe.ui.history import RUN_POINTS, RunPoint
from floe.ui.html import Html, Writer, health_cell, human_bytes, join, url
from floe.ui.model import TableRow

CHART_POINTS = 200
"""Runs a chart shows at most, the last ones: a page stays small whatever the ring holds."""


def _time(seconds: float | None) -> str | None:
    return rfc3339(seconds) if seconds is not None else None


def _next_check(detail: TableDetail) -> str:
    """When its catalog is asked next, and the interval its last check set."""
    if detail.next_refresh_s is None or detail.refresh_interval_s is None:
        return "at the next round"
    return f"{rfc3339(detail.next_refresh_s)} (every {detail.refresh_interval_s:g}s now)"


def _facts(w: Writer, pairs: Sequence[tuple[str, Html | str | int | float | None]]) -> Html:
    items = join(Html(f"<dt>{w.text(name)}</dt><dd>{w.cell(value)}</dd>") for name, value in pairs)
    return Html(f'<dl class="facts">{items}</dl>')


def _waiting(row: TableRow) -> str:
    wait = row.wait
    if wait is None:
        return ""
    where = (
        f" (position {wait.queue_position} of {wait.queue_length} in its group's queue)"
        if wait.queue_position is not None
        else ""
    )
    return f"{wait.reason}: {wait.message}{where}"


def _health(w: Writer, detail: TableDetail | None) -> Html:
    health = detail.health if detail is not None else None
    if health is None:
        return Html('<p class="empty">not evaluated yet</p>')
    return w.table(
        ("factor", "from 0 (none) to 1 (worst)", "points lost", "of"),
        [
            (
                "small files",
                f"{health.small_files:.2f}",
                f"{SMALL_FILES_POINTS * health.small_files:.0f}",
                SMALL_FILES_POINTS,
            ),
            (
                "equality deletes",
                f"{health.equality_deletes:.2f}",
                f"{EQUALITY_DELETES_POINTS * health.equality_deletes:.0f}",
                EQUALITY_DELETES_POINTS,
            ),
            (
                "position deletes",
                f"{health.position_deletes:.2f}",
                f"{POSITION_DELETES_POINTS * health.position_deletes:.0f}",
                POSITION_DELETES_POINTS,
            ),
        ],
        css="health",
    )


def _label(run: RunPoint) -> str:
    """A run's end, short: ``MM-DD HH:MM`` of its RFC 3339 time."""
    return f"{run.finished[5:10]} {run.finished[11:16]}" if len(run.finished) >= 16 else run.finished


def _charts(w: Writer, points: Sequence[RunPoint]) -> Html:
    """Files and bytes in and out, bytes out over bytes in, and executor core-seconds, per
    optimizing run: the last `CHART_POINTS`."""
    done = points[-CHART_POINTS:]
    if not done:
        return Html('<p class="empty">no optimizing run yet</p>')
    labels = [_label(r) for r in done]
    ratio = [r.bytes_out / r.bytes_in if r.bytes_in and r.committed else None for r in done]
    charts = [
        line_chart(
            w,
            "Files per run",
            labels,
            [
                Series("files in", [r.files_in for r in done]),
                Series("files out", [r.files_out for r in done]),
            ],
            lambda v: f"{v:.0f}",
        ),
        line_chart(
            w,
            "Bytes per run",
            labels,
            [
                Series("bytes in", [r.bytes_in for r in done]),
                Series("bytes out", [r.bytes_out for r in done]),
            ],
            human_bytes,
        ),
        line_chart(
            w,
            "Write amplification per run (bytes out / bytes in)",
            labels,
            [Series("bytes out / bytes in", ratio)],
            lambda v: f"{v:.2f}",
        ),
        line_chart(
            w,
            "Cost per run (executor core-seconds)",
            labels,
            [Series("core-seconds", [r.executor_seconds for r in done])],
            lambda v: f"{v:.1f}",
        ),
    ]
    return Html(f'<div class="charts">{join(charts)}</div>')


def _runs(w: Writer, runs: Sequence[RunRecord]) -> Html:
    return w.table(
        (
            "finished",
            "kind",
            "outcome",
            "files in → out",
            "bytes in → out",
            "core-seconds",
            "snapshot",
            "trigger / error",
        ),
        [
            (
                r.finished,
                r.kind,
                r.outcome,
                f"{r.files_in} → {r.files_out}",
                f"{human_bytes(r.bytes_in)} → {human_bytes(r.bytes_out)}",
                f"{r.executor_seconds:.1f}",
                str(r.snapshot_id) if r.snapshot_id is not None else None,
                r.error or r.trigger,
            )
            for r in reversed(runs)
        ],
        css="runs",
        empty="no run yet",
    )


def table_page(w: Writer, row: TableRow, detail: TableDetail | None, points: Sequence[RunPoint]) -> Html:
    """The whole table page; `detail` None when the engine dropped the table since the snapshot;
    `points`: its optimizing runs to chart."""
    v = row.view
    namespace, _, name = v.table_id.partition("/")
    runs = detail.runs if detail is not None else ()
    facts = _facts(
        w,
        [
            ("table", f"{detail.catalog}: {v.table}" if detail is not None else v.table),
            ("group", w.link(url("/tables", {"group": v.group_key}), v.group_key)),
            ("state", v.state),
            ("waiting for", _waiting(row) or None),
            ("health", health_cell(w, v.health)),
            ("data files", v.data_files),
            ("delete files", v.delete_files),
            ("snapshot", str(detail.snapshot_id) if detail is not None and detail.snapshot_id else None),
            ("pending since", _time(detail.pending_since_s) if detail is not None else None),
            ("last refreshed", _time(detail.last_refresh_s) if detail is not None else None),
            ("next check", _next_check(detail) if detail is not None else None),
            ("last planned", _time(detail.last_plan_s) if detail is not None else None),
            ("quota", v.quota),
            ("quota occupation (last hour)", f"{v.occupation:.0%}"),
            ("process running", v.process_id),
            ("running tasks", v.running_tasks),
            ("queued tasks", v.queued_tasks),
            ("due tasks (not planned yet)", v.due_tasks),
            ("last result", v.last_result or None),
            ("last error", v.last_error or None),
            ("refused", detail.refusal if detail is not None and detail.refusal else None),
            ("maintenance running", str(v.maintaining) if v.maintaining is not None else None),
        ],
    )
    maintenance = w.table(
        ("job", "last result", "files removed", "bytes removed"),
        [
            (str(job), run.result, run.files_removed, human_bytes(run.bytes_removed))
            for job, run in sorted(v.maintenance.items())
        ],
        css="maintenance",
        empty="no maintenance job ran yet",
    )
    commands = Html(
        f"<p>More: <code>floe explain {w.text(shlex.quote(name))} -n {w.text(shlex.quote(namespace))}</code> "
        f"(each trigger against its threshold), <code>floe history {w.text(shlex.quote(name))} "
        f"-n {w.text(shlex.quote(namespace))}</code> (with <code>--history-table</code>: every run).</p>"
    )
    return join(
        [
            facts,
            Html("<h2>Health</h2>"),
            _health(w, detail),
            Html("<h2>History</h2>"),
            Html(
                f'<p class="empty">The charts show the last {CHART_POINTS} optimizing runs at most: '
                f"those that ended since this process started (up to {RUN_POINTS:,} across all tables, "
                f"kept in memory) and those among the last {STATUS_HISTORY} runs the table's status "
                "keeps.</p>"
            ),
            _charts(w, points),
            Html(f"<h2>Last {STATUS_HISTORY} runs</h2>"),
            _runs(w, runs),
            Html("<h2>Maintenance</h2>"),
            maintenance,
            commands,
        ]
    )
