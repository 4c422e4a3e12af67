"""Adaptive refresh: an unchanged table is checked less and less often, a change brings it back to
the shortest interval, checks are spread, and an interval trigger is evaluated on time even on a
table nothing writes to. The rules on plain values with a clock; then the engine on Iceberg's REST
catalog server and on a SQL catalog, with a clock that moves only when the test says so."""

from __future__ import annotations

import importlib.util
import json
import random
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from rest_s3 import RestS3Stack, rest_s3_stack
from test_maintenance_dangling import replace_data_files
from test_metadata_probe import table_without_maintenance
from test_task_service import Clock

from floe.api.group import OptimizerGroup
from floe.api.table import RefreshSpec
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.refresh_cadence import JITTER, PACE_GAPS, CommitPace, RefreshCadence, RefreshState
from floe.optimizing.table_state import TableState
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe.tables.history import SUMMARY_OPTIMIZING_TYPE, data_commit_times
from floe.tables.scan import scan_table
from floe.tables.writer import write_data_files

ROWS = pa.table({"id": pa.array(range(10), pa.int64())})
CADENCE = RefreshCadence(min_interval_s=10.0, max_interval_s=80.0)


def test_an_unchanged_table_doubles_its_interval_up_to_the_maximum_and_a_change_resets_it() -> None:
    state = RefreshState()
    intervals = []
    now = 0.0
    for changed in (True, False, False, False, False, False, True, False):
        if changed:  # a writer's commit, in the log the check loads
            state.pace = CommitPace(now - 1.0)
        state.on_checked(now, CADENCE, "ns/t", changed=changed)
        assert state.interval_s is not None and state.next_s is not None
        # The next check is the interval away, give or take the spread; the first at the maximum
        # anywhere within it, but no sooner than the minimum.
        if state.interval_s == CADENCE.max_interval_s != (intervals or [None])[-1]:
            assert CADENCE.min_interval_s <= state.next_s - now <= state.interval_s
        else:
            assert abs(state.next_s - now - state.interval_s) <= JITTER * state.interval_s
        intervals.append(state.interval_s)
        now = state.next_s
    assert intervals == [10, 20, 40, 80, 80, 80, 10, 20]
    state.recheck_now()
    assert state.due(now) and state.interval_s is None


def _follow_writer(
    commits: list[float],
    until_s: float,
    notices: bool = False,
    created_s: float = -3600.0,
    skew_s: float = 0.0,
) -> tuple[list[float], list[float]]:
    """A table made at `created_s`, checked by `RefreshState` (10 s to 600 s) while a writer
    commits at `commits` (each followed by a change notice with `notices`), the writer's clock
    `skew_s` ahead: each commit's delay until a check saw it, and the times of the checks. A check
    that loads the table (its first, or one that finds it changed) reads its snapshot log's pace,
    as the refresher does."""
    cadence = RefreshCadence(min_interval_s=10.0, max_interval_s=600.0)
    state, now, last_seen = RefreshState(), 0.0, 0
    delays: list[float] = []
    checks: list[float] = []
    while now < until_s:
        if notices and now in commits:
            state.notice()
        if state.due(now):
            made = sum(1 for c in commits if c <= now)
            changed = made > last_seen
            delays += [now - c for c in commits[last_seen:made]]
            if changed or not checks:
                logged = [created_s, *commits[:made]]
                state.pace = CommitPace.of([t + skew_s for t in logged[-PACE_GAPS - 1 :]])
                state.written_s = logged[-1] + skew_s
            state.on_checked(now, cadence, "ns/t", changed=changed)
            checks.append(now)
            last_seen = made
        now += 1.0
    return delays, checks


def test_a_table_written_every_minute_is_checked_when_its_commits_come() -> None:
    """A writer committing every 60 s (a streaming job's checkpoints), from 3 minutes after the
    table was made: the first commits are found by the backing off, and then the snapshot log
    tells the pace: each commit is seen half a minimum interval after it is made (or at the
    minimum interval after the check that found the last), with one check a commit, not six. A
    writer's clock a few seconds off moves that by as much, not more."""
    commits = [60.0 * k + 7 for k in range(3, 63)]
    for skew_s in (0.0, -2.0, 2.0):
        delays, checks = _follow_writer(commits, 3800, created_s=7, skew_s=skew_s)
        assert max(delays[3:]) <= 5 + abs(skew_s) + 1, (skew_s, delays)
        second_half = [c for c in checks if c >= 1800]
        assert len(second_half) <= len([c for c in commits if c >= 1800]) + 2, (skew_s, second_half)
    # The writer stops: the table goes back to being checked less and less often.
    _, checks = _follow_writer([60.0 * k + 7 for k in range(1, 31)], 3 * 3600)
    last_hour = [c for c in checks if c >= 2 * 3600]
    assert len(last_hour) <= 8, last_hour


def test_a_change_that_commits_no_data_leaves_the_next_commit_where_it_was_due() -> None:
    """A writer commits every 60 s, the last at 1000, seen at 1005; floe's rewrite (or a
    maintenance job) commits at 1020 and a check finds it at 1025: the next check is still aimed
    at 1060, half a minimum interval after, not at a commit made after 1005."""
    state = RefreshState()
    state.pace = CommitPace.of([880.0, 940.0, 1000.0])
    state.on_checked(1005.0, CADENCE, "ns/t", changed=False)
    state.on_checked(1025.0, CADENCE, "ns/t", changed=True)  # the same log: no commit of data
    assert state.last_change_s == 1000.0 and state.next_s == 1065.0, state


def test_a_writer_whose_gaps_vary_is_looked_for_from_the_soonest_it_commits() -> None:
    """Gaps of 48 to 72 s between commits: each commit is checked for from the shortest recent gap
    on, every minimum interval, so none is seen later than the gaps vary by and one interval more;
    about one and a half checks a commit."""
    rng = random.Random(3)
    commits = [0.0]
    while commits[-1] < 3600:
        commits.append(commits[-1] + rng.uniform(48, 72))
    delays, checks = _follow_writer(commits, 3600, created_s=-60)
    assert max(delays[4:]) <= 24 + 10 * (1 + JITTER) + 1, delays
    assert len(checks) <= 2 * len(commits), (len(checks), len(commits))


def test_the_pace_of_a_tables_commits_is_the_lower_median_of_its_last_three_gaps() -> None:
    assert CommitPace.of([]) == CommitPace()
    assert CommitPace.of([5.0]) == CommitPace(5.0)
    assert CommitPace.of([0.0, 100.0, 160.0, 220.0, 400.0]) == CommitPace(400.0, 60.0, 60.0)
    # A pause does not set the pace; commits of one instant (or out of order) make no gap.
    assert CommitPace.of([0.0, 60.0, 120.0, 3600.0]) == CommitPace(3600.0, 60.0, 60.0)
    assert CommitPace.of([10.0, 10.0, 5.0]) == CommitPace(5.0)


def test_a_table_written_once_a_day_is_checked_no_more_than_an_idle_one() -> None:
    """A nightly job's table: after each commit it is looked for at a sixteenth of a day (the
    maximum, 10 minutes, here), not every minimum interval for the two days its next commit may
    take; each commit is still seen within the maximum interval."""
    day = 86400.0
    delays, checks = _follow_writer([day * k + 7 for k in range(1, 4)], 4 * day)
    assert max(delays) <= 600 * (1 + JITTER) + 1, delays
    last_day = [c for c in checks if c >= 3 * day]
    assert len(last_day) <= day / 600 * 1.2, len(last_day)


def test_a_table_whose_commits_come_with_notices_is_checked_at_each_and_polled_as_an_idle_one() -> None:
    """A writer committing every minute, a change notice after each commit: each commit is seen
    at the round of its notice, and the polling backs off as if the table were idle (a few checks
    an hour besides the notices, not one or two a minute)."""
    commits = [60.0 * k + 7 for k in range(1, 61)]
    delays, checks = _follow_writer(commits, 3600, notices=True)
    assert delays == [0.0] * 59  # the last commit's notice comes at the last second
    second_half = [c for c in checks if c >= 1800]
    assert len(second_half) <= 30 + 3, second_half
    # The notices stop, the writer does not: polling still finds its commits, within the maximum.
    delays, _ = _follow_writer(commits, 3 * 3600, notices=False)
    assert max(delays) <= 600 * (1 + JITTER) + 1


def test_a_tables_first_check_follows_how_long_it_has_gone_unchanged() -> None:
    """A table last written three days ago is next checked at the maximum interval; one written 30
    s ago after 30 s; one whose last write is not known (or in the future, a skewed clock) at the
    minimum. So is a table asked about again after its settings changed."""
    now = 1_000_000.0
    for written_s, interval_s in ((now - 3 * 86400, 80.0), (now - 30, 30.0), (None, 10.0), (now + 60, 10.0)):
        state = RefreshState(written_s=written_s)
        state.on_checked(now, CADENCE, "ns/t", changed=False)
        assert state.interval_s == interval_s, written_s
        state.recheck_now()
        state.on_checked(now, CADENCE, "ns/t", changed=False)
        assert state.interval_s == interval_s, written_s


def test_when_not_every_due_check_can_be_made_a_noticed_or_new_table_goes_first_then_the_latest() -> None:
    """Due checks by urgency: never made or noticed first, then by how late against the interval:
    a writer's table 20 s late on a 10 s interval before an idle one 60 s late on 600 s."""
    new, noticed, writer, idle = RefreshState(), RefreshState(), RefreshState(), RefreshState()
    for state, interval_s, late_s in ((noticed, 600.0, 0.0), (writer, 10.0, 20.0), (idle, 600.0, 60.0)):
        state.interval_s, state.next_s = interval_s, 1000.0 - late_s
    noticed.notice()
    order = sorted([idle, writer, noticed, new], key=lambda s: -s.urgency(1000.0))
    assert order[2:] == [writer, idle] and {id(s) for s in order[:2]} == {id(new), id(noticed)}


def test_a_check_is_never_later_than_an_interval_trigger_and_the_spread_is_the_same_each_time() -> None:
    state = RefreshState(interval_s=80.0, time_trigger_s=30.0, checks=4)
    state.on_checked(0.0, CADENCE, "ns/t", changed=False)
    assert state.next_s == 30.0 and not state.time_trigger_due(29.0) and state.time_trigger_due(30.0)
    a, b = RefreshState(), RefreshState()
    a.on_checked(5.0, CADENCE, "ns/t", changed=False)
    b.on_checked(5.0, CADENCE, "ns/t", changed=False)
    assert a.next_s == b.next_s


def test_tables_applied_together_are_not_checked_in_bursts() -> None:
    """1,000 tables checked in the same second: their next checks spread over the 2 s either side
    of 10 s, none of the 20 tenths of a second holding more than a tenth of them."""
    states = {f"ns/t{i}": RefreshState() for i in range(1000)}
    for table_id, state in states.items():
        state.on_checked(0.0, CADENCE, table_id, changed=True)
    tenths = Counter(int((s.next_s or 0.0) * 10) for s in states.values())
    assert set(tenths) <= set(range(90, 111)) and max(tenths.values()) <= 100, tenths


def idle_checks_per_minute(first_checks_s: float, from_s: float, to_s: float) -> Counter[int]:
    """The checks 2,000 idle tables get in each minute from `from_s` to `to_s` (not counting the
    first): made one after another over 9 minutes, the last just now, first checked in that order
    over `first_checks_s`, under the default cadence (10 s to 10 minutes)."""
    cadence = RefreshCadence(min_interval_s=10.0, max_interval_s=600.0)
    tables = 2000
    minutes: Counter[int] = Counter()
    for i in range(tables):
        name, now = f"db.t{i:05d}", first_checks_s * i / tables
        state = RefreshState(written_s=-540.0 * (1 - i / tables))
        state.on_checked(now, cadence, name, changed=False)
        while state.next_s is not None and state.next_s < to_s:
            now = state.next_s
            if now >= from_s:
                minutes[int(now // 60)] += 1
            state.on_checked(now, cadence, name, changed=False)
    return minutes


@pytest.mark.parametrize("first_checks_s", [0.0, 240.0], ids=["at-once", "over-4-minutes"])
def test_idle_tables_applied_together_spread_evenly_over_the_maximum_interval(first_checks_s: float) -> None:
    """Idle tables applied together, backed off to 10 minutes: from their twentieth minute to the
    eightieth, no minute holds more than 1.3 times the checks of an even spread. With each check
    moved only ±10 % around its interval, the tables of one age stayed checked together; with a
    CRC of the table's name as the spread, tables named in sequence were spread unevenly: minutes
    held 1.4 to 2.2 times as many."""
    minutes = idle_checks_per_minute(first_checks_s, 20 * 60, 80 * 60)
    even = 2000 / 10
    assert sum(minutes.values()) == pytest.approx(2000 * 6, rel=0.02)
    assert max(minutes.values()) <= 1.3 * even, sorted(minutes.items())


def test_idle_tables_first_checked_in_order_of_making_do_not_come_back_together() -> None:
    """Tables made over 9 minutes and first checked in that order over 4 minutes (as 10,000 REST
    tables are): each is checked next after about as long as it has gone unchanged, which brought
    them all back within one minute at 2.8 times the rate of their first checks. Their next checks
    fall anywhere within that interval: no minute of the next twenty holds more than 1.2 times a
    minute of the first checks."""
    minutes = idle_checks_per_minute(240.0, 0.0, 20 * 60)
    first_checks_per_minute = 2000 / 4
    assert max(minutes.values()) <= 1.2 * first_checks_per_minute, sorted(minutes.items())


def test_a_fixed_cadence_spreads_every_check_around_its_interval() -> None:
    """A fixed interval (minimum = maximum) has no room below it to spread a check within: its
    first checks are spread ±10 % around it, as every later one."""
    cadence = RefreshCadence(min_interval_s=30.0, max_interval_s=30.0)
    after_first = set()
    for i in range(50):
        state = RefreshState(written_s=-3600.0)
        state.on_checked(0.0, cadence, f"db.t{i:05d}", changed=False)
        assert state.next_s is not None and 27.0 <= state.next_s <= 33.0
        after_first.add(round(state.next_s, 3))
    assert len(after_first) > 40


def test_the_cadence_takes_the_operators_interval_where_the_table_sets_none() -> None:
    assert RefreshCadence.of(RefreshSpec(), 10.0) == RefreshCadence(10.0, 600.0)
    assert RefreshCadence.of(
        RefreshSpec.model_validate({"minInterval": "30s", "maxInterval": "20s"}), 10.0
    ) == (RefreshCadence(30.0, 30.0))
    with pytest.raises(ValueError, match="must be positive"):
        RefreshSpec.model_validate({"maxInterval": "0s"})


def test_a_tables_pace_is_read_from_its_writers_commits_not_its_rewrites(tmp_path: Path) -> None:
    """Three appends, then a rewrite of every file (floe's commit, ``replace``): the commit times
    the cadence reads are the appends', oldest first, and no more than asked for."""
    catalog = SqlCatalog("paced", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", ROWS.schema)
    for _ in range(3):
        table.append(ROWS)
    appends = [s.timestamp_ms / 1000 for s in table.metadata.snapshots]
    data = {f.path for f in scan_table(table).files.data_files}
    replace_data_files(table, data, tuple(write_data_files(table, table.scan().to_arrow())))
    table = catalog.load_table("db.t")
    assert len(table.metadata.snapshots) == 4
    assert data_commit_times(table.metadata, 4) == appends
    assert data_commit_times(table.metadata, 2) == appends[1:]


# -- the engine ---------------------------------------------------------------------------


def _engine(clock: Clock) -> OptimizingEngine:
    engine = OptimizingEngine(TaskService(clock=clock), refresh_interval_s=10.0, clock=clock)
    engine.apply_group(
        OptimizerGroup.model_validate(
            {"apiVersion": "floe.dev/v1alpha1", "kind": "OptimizerGroup", "metadata": {"name": "default"}}
        )
    )
    return engine


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestS3Stack]:
    with rest_s3_stack("127.0.0.1", tmp_path_factory.mktemp("rest-s3")) as running:
        yield running


def _written_table(stack: RestS3Stack, namespace: str) -> Table:
    """``NAMESPACE.orders``, one file written, in the REST catalog ``lake``."""
    catalog: RestCatalog = stack.client("lake")
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.orders", ROWS.schema)
    table.append(ROWS)
    return table


def test_an_idle_rest_table_is_asked_less_often_until_a_writer_commits(stack: RestS3Stack) -> None:
    table = _written_table(stack, "adaptive")
    clock = Clock()
    engine = _engine(clock)
    try:
        spec = {"refresh": {"maxInterval": "80s"}}
        runtime = engine.apply_table(
            table_without_maintenance("lake", stack.properties, "adaptive.orders", **spec)
        )

        def calls() -> int:
            return engine.table_loads + engine.not_modified_loads

        intervals: list[float] = []
        for _ in range(300):  # 300 s, a round a second
            before = calls()
            engine.tick()
            if calls() > before:
                assert runtime.refresh.interval_s is not None
                intervals.append(runtime.refresh.interval_s)
            clock.now += 1.0
        # Loaded once, then asked at 10, 20, 40 and 80 s (spread by up to a tenth either way).
        assert intervals[:5] == [10, 20, 40, 80, 80] and set(intervals[5:]) <= {80}, intervals
        assert engine.table_loads == 1 and calls() <= 7

        # A writer commits: seen within one longest interval, then asked every 10 s again.
        table.append(ROWS)
        waited = 0
        while runtime.snapshot_id != table.refresh().metadata.current_snapshot_id:
            engine.tick()
            clock.now += 1.0
            waited += 1
            assert waited <= 80 * (1 + JITTER) + 1, "the commit was not seen within the longest interval"
        assert runtime.refresh.interval_s == 10 and engine.table_loads == 2
    finally:
        engine.close()


def test_a_table_unchanged_for_days_is_checked_at_the_maximum_from_its_first_check(
    stack: RestS3Stack,
) -> None:
    """The engine takes a table's last-updated time from its first load: three days on, the
    table is next asked after the longest interval, not after the minimum's climb."""
    table = _written_table(stack, "aged")
    clock = Clock()
    clock.now = time.time() + 3 * 86400
    engine = _engine(clock)
    try:
        runtime = engine.apply_table(
            table_without_maintenance("lake", stack.properties, "aged.orders", refresh={"maxInterval": "80s"})
        )
        engine.tick()
        assert runtime.snapshot_id == table.metadata.current_snapshot_id
        assert runtime.refresh.interval_s == 80 and engine.table_loads == 1
    finally:
        engine.close()


def test_an_interval_trigger_fires_on_a_table_nothing_writes_to(tmp_path: Path) -> None:
    """Two small files, below the minor file-count trigger: nothing is due until the minor
    interval has passed since the last minor, and then the unchanged table is evaluated again."""
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=(tmp_path / "wh").as_uri())
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.orders", ROWS.schema)
    table.append(ROWS)
    # The second file as if a minor had written it: the table's history says when the last minor ran.
    table.append(ROWS, snapshot_properties={SUMMARY_OPTIMIZING_TYPE: "minor"})
    snapshot = table.current_snapshot()
    assert snapshot is not None
    last_minor_s = snapshot.timestamp_ms / 1000.0
    clock = Clock()
    clock.now = last_minor_s + 1.0
    engine = _engine(clock)
    try:
        properties = {"type": "sql", **{k: str(v) for k, v in catalog.properties.items()}}
        spec = {"minor": {"triggerInterval": "1h"}}
        runtime = engine.apply_table(table_without_maintenance("lake", properties, "sales.orders", **spec))
        engine.tick()
        assert runtime.state == TableState.IDLE and runtime.refresh.time_trigger_s == last_minor_s + 3601
        loads = engine.table_loads
        while clock.now + 60.0 < last_minor_s + 3601:  # a round a minute: unchanged, nothing loaded
            clock.now += 60.0
            engine.tick()
        assert runtime.state == TableState.IDLE and engine.table_loads == loads
        clock.now = last_minor_s + 3601
        engine.tick()
        assert runtime.state == TableState.PENDING and runtime.due_tasks == 1
        assert engine.table_loads == loads + 1
    finally:
        engine.close()
        catalog.engine.dispose()


# -- change notices ------------------------------------------------------------------------


def _notice(url: str, path: str, token: str | None, body: bytes = b"") -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{url}{path}", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "change-notices" / "notify.py"


def _example_module() -> Any:
    spec = importlib.util.spec_from_file_location("floe_notify_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _example_main(argv: list[str], url: str) -> int:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLOE_NOTICE_URL", url)
        patch.setenv("FLOE_NOTICE_TOKEN", "notice-secret")
        return int(_example_module().main(argv))


def test_a_change_notice_finds_the_tables_naming_its_identifier_as_they_are_applied_now() -> None:
    """Notices come at a writer's commit rate: the engine finds their tables by identifier, kept
    as tables are applied, renamed and removed, not by a walk over every table."""
    engine = _engine(Clock())
    try:
        properties = {"type": "sql", "uri": "sqlite:///unused.db"}

        def apply(catalog: str, identifier: str, name: str) -> None:
            resource = table_without_maintenance(catalog, properties, identifier)
            engine.apply_table(
                resource.model_copy(update={"metadata": resource.metadata.model_copy(update={"name": name})})
            )

        apply("lake", "sales.orders", "a")
        apply("other", "sales.orders", "b")
        apply("lake", "sales.items", "c")
        assert engine.table_changed("sales.orders") == ["default/a", "default/b"]
        assert engine.table_changed("sales.orders", catalog="other") == ["default/b"]
        apply("lake", "sales.returns", "a")  # its spec names another table now
        assert engine.table_changed("sales.orders") == ["default/b"]
        assert engine.table_changed("sales.returns") == ["default/a"]
        engine.remove_table("default/b")
        assert engine.table_changed("sales.orders") == []
    finally:
        engine.close()


def test_a_change_notice_has_a_backed_off_table_read_at_the_next_round(stack: RestS3Stack) -> None:
    table = _written_table(stack, "noticed")
    clock = Clock()
    engine = _engine(clock)
    engine.service.notices.allow("notice-secret")
    server = TaskServiceServer(engine.service)
    server.start()
    try:
        # No minor trigger: the appended table stays idle, so its cadence is the polling's alone.
        minor = {"triggerInterval": "-1", "triggerFileCount": 1000}
        runtime = engine.apply_table(
            table_without_maintenance("lake", stack.properties, "noticed.orders", minor=minor)
        )
        for _ in range(200):  # backed off: checked every 80 s, then 160 s, ...
            engine.tick()
            clock.now += 1.0
        backed_off = runtime.refresh.interval_s
        assert backed_off is not None and backed_off >= 160
        table.append(ROWS)
        engine.tick()
        assert runtime.snapshot_id != table.refresh().metadata.current_snapshot_id  # not due yet

        status, body = _notice(server.url, "/v1/tables/noticed/orders/changed", "notice-secret")
        assert (status, body) == (200, {"tables": ["default/noticed-orders"]})
        engine.tick()
        assert runtime.snapshot_id == table.refresh().metadata.current_snapshot_id
        # The notice does not shorten the polling: the next commit brings its own notice.
        assert runtime.refresh.interval_s is not None and runtime.refresh.interval_s >= backed_off
        # The example a writer's job calls after its commit; with a catalog named, only its tables.
        notify = _example_module().notify_table_changed
        assert notify("noticed.orders", "lake", url=server.url, token="notice-secret") == [
            "default/noticed-orders"
        ]
        assert _example_main(["noticed.nosuch", "--strict"], server.url) == 1  # floe has no such table
        status, body = _notice(
            server.url, "/v1/tables/noticed/orders/changed", "notice-secret", b'{"catalog": "other"}'
        )
        assert status == 404 and body["error"] == "unknown_table" and "'other'" in body["detail"]
    finally:
        server.stop()
        engine.close()


def test_change_notices_refuse_strangers_unknown_tables_and_malformed_calls(stack: RestS3Stack) -> None:
    engine = _engine(Clock())
    server = TaskServiceServer(engine.service)
    server.start()
    path = "/v1/tables/sales/orders/changed"
    try:
        status, body = _notice(server.url, path, "anything")
        assert status == 401 and "change notices are off" in body["detail"]
        engine.service.notices.allow("notice-secret")
        assert _notice(server.url, path, None)[0] == 401
        status, body = _notice(server.url, path, "notice-secrex")
        assert (
            status == 401 and "wrong notice token" in body["detail"] and "notice-secre" not in body["detail"]
        )
        status, body = _notice(server.url, path, "notice-secret")
        assert status == 404 and body == {
            "error": "unknown_table",
            "detail": "floe optimizes no table 'sales.orders'",
        }
        status, body = _notice(server.url, "/v1/tables/sales%20x/orders/changed", "notice-secret")
        assert status == 422 and "'sales x' is not a namespace or table name" in body["detail"]
        status, body = _notice(server.url, path, "notice-secret", b'{"catalog": 5}')
        assert status == 422 and body["detail"].startswith("catalog:")
        status, body = _notice(server.url, path, "notice-secret", b'{"table": "x"}')
        assert status == 422 and "Extra inputs" in body["detail"]
        assert _notice(server.url, path, "notice-secret", b"{not json")[0] == 400
        assert engine.service.notices.accepted == 0
    finally:
        server.stop()
        engine.close()
