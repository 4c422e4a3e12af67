"""The web UI's pages (`floe.ui`) over a real engine of 10,000 tables with no catalog: the tables'
runtimes are set by hand, as the engine's refreshes would set them. Each page is fetched from a
real `UiServer` over HTTP."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from floe.api.group import OptimizerGroup
from floe.api.history import RunRecord
from floe.api.models import OptimizedTable
from floe.kit.redaction import Redactor
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.table_state import TableState
from floe.planning.health import TableHealth
from floe.service.task_service import TaskService
from floe.ui.charts import Series, line_chart
from floe.ui.history import RunPoints
from floe.ui.html import Writer
from floe.ui.model import PAGE_SIZE, TableQuery, UiSource
from floe.ui.server import UiServer

TABLES = 10_000
SECRET = "hunter2-very-secret-key"
GROUPS = ("batch", "fast")
STATES = (TableState.IDLE, TableState.PENDING, TableState.IDLE, TableState.DISABLED)


def _group(name: str) -> OptimizerGroup:
    return OptimizerGroup.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizerGroup",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"executors": 1, "executorCores": 2},
        }
    )


def _table(name: str, group: str) -> OptimizedTable:
    return OptimizedTable.model_validate(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "table": f"db.{name}",
                "group": group,
                "catalog": {"name": "lake", "properties": {"type": "sql", "s3.secret-access-key": SECRET}},
            },
        }
    )


def _run(table: str, minute: int, files_in: int) -> RunRecord:
    return RunRecord(
        table=table,
        run_id=f"{table}-{minute}",
        kind="minor",
        started=f"2024-01-01T00:{minute:02d}:00Z",
        finished=f"2024-01-01T00:{minute:02d}:30Z",
        outcome="committed",
        snapshot_id=minute,
        files_in=files_in,
        bytes_in=files_in * 1000,
        files_out=1,
        bytes_out=files_in * 900,
        executor_seconds=files_in * 1.5,
    )


@dataclass
class Served:
    engine: OptimizingEngine
    source: UiSource
    url: str


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """10,000 tables in two groups: health 0 to 99 by name, every fourth one pending; table 7
    failed with a secret and markup in its error, and has three runs."""
    redact = Redactor()
    # Groups keyed namespace/name, as the operator keys them.
    engine = OptimizingEngine(TaskService(clock=time.time, registration_token="t"), namespaced_groups=True)
    for name in GROUPS:
        engine.apply_group(_group(name))
    base = _table("t00000", "batch")
    for i in range(TABLES):
        name = f"t{i:05d}"
        table = base.model_copy(
            update={
                "metadata": base.metadata.model_copy(update={"name": name}),
                "spec": base.spec.model_copy(
                    update={"table": f"db.{name}", "group": ("batch", "fast")[i % 2]}
                ),
            }
        )
        redact.add(table.spec.catalog.properties)
        runtime = engine.apply_table(table)
        runtime.state = STATES[i % len(STATES)]
        runtime.health = TableHealth(i % 100, 0.5, 0.0, 0.1)
        runtime.data_files = i % 37
        if runtime.state == TableState.PENDING:
            runtime.pending_reason = "12 fragment files"
            runtime.due_tasks = i % 5
            engine.service.group(engine.table_group_key(runtime)).set_pending(runtime.table_id, True)
    seven = engine.runtimes["ns/t00007"]
    seven.last_error = f"load failed: s3.secret-access-key={SECRET} <script>alert(1)</script>"
    for minute, files in ((1, 12), (2, 30), (3, 18)):
        seven.runs.record(_run("ns/t00007", minute, files))
    source = UiSource(engine, redact, ttl_s=3600)
    with UiServer(source) as server:
        yield Served(engine, source, server.url)
    engine.close()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.headers["Content-Security-Policy"].startswith("default-src 'none'")
        return str(response.read().decode())


def _rows(page: str) -> list[str]:
    """The table ids of a tables page's rows, in order."""
    body = page.split('<table class="tables">', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr><td><a href="/tables/ns/(t\d+)"', body)


def test_a_page_of_10000_tables_renders_its_own_rows_bounded_in_size(served: Served) -> None:
    readings = served.source.readings
    page = _get(f"{served.url}/tables")
    rows = _rows(page)
    assert len(rows) == PAGE_SIZE
    assert len(page.encode()) < 150_000, "one page of 100 rows, not every table"
    assert f"{TABLES} of {TABLES} tables match" in page
    # Worst health first by default: health is the name's number modulo 100.
    assert rows[:2] == ["t00000", "t00100"]
    last = _get(f"{served.url}/tables?page=100")
    assert _rows(last)[-1] == "t09999" and "page 100 of 100" in last
    assert "next →" not in last
    # The engine is read once for every page within the snapshot's life, whatever the pages.
    for path in ("/", "/queue", "/tables?sort=name&order=desc", "/tables/ns/t00007"):
        _get(served.url + path)
    assert served.source.readings - readings <= 1


def test_sorting_and_filtering_change_the_rows(served: Served) -> None:
    by_name_desc = _rows(_get(f"{served.url}/tables?sort=name&order=desc"))
    assert by_name_desc[:2] == ["t09999", "t09998"]
    by_backlog = _rows(_get(f"{served.url}/tables?sort=backlog"))
    assert by_backlog[0] in {f"t{i:05d}" for i in range(TABLES) if i % 4 == 1 and i % 5 == 4}
    pending_fast = _get(f"{served.url}/tables?state=PENDING&group=ns%2Ffast&sort=name")
    assert f"{TABLES // 4} of {TABLES} tables match" in pending_fast
    assert _rows(pending_fast)[:2] == ["t00001", "t00005"]
    assert "0 of" in _get(f"{served.url}/tables?state=PENDING&group=ns%2Fbatch")
    named = _get(f"{served.url}/tables?name=T0004")
    assert f"10 of {TABLES} tables match" in named  # t00040 to t00049, whatever the case
    waiting = _get(f"{served.url}/tables?reason=NothingDue&sort=name")
    assert "t00000" in _rows(waiting) and "t00001" not in _rows(waiting)


def test_a_secret_and_markup_in_a_tables_error_are_never_shown(served: Served) -> None:
    for path in ("/tables?name=t00007", "/tables/ns/t00007"):
        page = _get(served.url + path)
        assert "load failed" in page
        assert SECRET not in page
        assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_table_page_charts_its_runs_and_links_back(served: Served) -> None:
    page = _get(f"{served.url}/tables/ns/t00007")
    assert page.count('<svg class="chart"') == 4
    values = re.findall(r'<circle class="point"[^>]*data-value="([^"]+)"', page)
    # files in and out, bytes in and out, their ratio, the cost: three runs each.
    assert len(values) == 3 * (2 + 2 + 1 + 1)
    assert {"12", "30", "18"} <= set(values)
    assert "0.9" in values  # bytes out / bytes in
    assert 'href="/tables?group=ns%2Fbatch"' not in page and 'href="/tables?group=ns%2Ffast"' in page
    assert "floe explain t00007 -n ns" in page


def test_the_groups_and_queue_pages_show_every_group(served: Served) -> None:
    groups = _get(served.url + "/")
    for key in ("ns/batch", "ns/fast"):
        assert f'href="/tables?group={key.replace("/", "%2F")}"' in groups
    assert "local" in groups  # no pods counted by this engine
    queue = _get(served.url + "/queue")
    positions = [int(p) for p in re.findall(r"<tr><td>(\d+)</td><td><a", queue)]
    assert positions[:3] == [1, 2, 3]
    assert queue.count("NoExecutors") == TABLES // 4


def test_only_get_is_served_and_an_unknown_table_is_404(served: Served) -> None:
    post = urllib.request.Request(f"{served.url}/tables", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=10)
    assert refused.value.code == 405
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{served.url}/tables/ns/%3Cnope%3E", timeout=10)
    assert missing.value.code == 404
    assert "&lt;nope&gt;" in missing.value.read().decode()


def test_a_query_it_cannot_use_falls_back_to_the_default() -> None:
    query = TableQuery.parse({"sort": "drop table", "page": "-3", "name": "x" * 1000})
    assert (query.sort, query.page, len(query.name), query.descending) == ("health", 1, 200, False)
    assert TableQuery.parse({"sort": "backlog"}).descending
    assert not TableQuery.parse({"sort": "backlog", "order": "asc"}).descending


def test_a_chart_skips_missing_values_and_escapes_its_labels() -> None:
    writer = Writer(lambda text: text.replace("token-1", "***"))
    svg = line_chart(writer, "<b>cost</b>", ["a", "b", "c"], [Series("token-1", [1.0, None, 3.0])])
    assert svg.count('class="point"') == 2
    assert "&lt;b&gt;cost&lt;/b&gt;" in svg and "<b>" not in svg
    assert "token-1" not in svg and "***" in svg


def test_the_run_ring_keeps_its_bound_and_adds_the_runs_a_status_kept() -> None:
    ring = RunPoints(bound=3)
    for minute in range(5):
        ring.put(_run("ns/a", minute, 10 + minute))
    ring.put(_run("ns/a", 6, 99).model_copy(update={"kind": "expire", "run_id": "expire-run"}))
    # The status still has the oldest run, which the ring dropped, and the newest, which it holds.
    kept = [_run("ns/a", 0, 10), _run("ns/a", 4, 14)]
    assert [p.files_in for p in ring.of("ns/a", kept)] == [10, 12, 13, 14]
    assert ring.of("ns/b") == []


def test_a_chart_names_a_few_points_on_its_axis_and_every_point_in_a_tooltip() -> None:
    writer = Writer(lambda text: text)
    labels = [f"run {i}" for i in range(40)]
    svg = line_chart(writer, "files", labels, [Series("files in", [float(i) for i in range(40)])])
    assert svg.count('class="point"') == 40
    named = re.findall(r">run (\d+)</text>", svg)
    assert named[0] == "0" and named[-1] == "39" and len(named) <= 6
