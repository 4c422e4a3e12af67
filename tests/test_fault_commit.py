"""Commits whose outcome is unknown: the catalog applies a commit and the answer is lost, or the
catalog goes away mid-commit. floe must neither commit twice nor delete files a snapshot holds.

A real Iceberg REST catalog on moto's S3 (tests/rest_s3.py) sits behind `FaultProxy`, which
drops answers and refuses connections on cue. The rewrite is real (floe's rewrite task, run
in-process on pyarrow); Iceberg Java's reader, talking to the catalog directly, checks rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fault_proxy import COMMIT_PATH, FaultProxy, fault_proxy
from pyiceberg.table import Table
from rest_s3 import RestS3Stack, rest_catalog, rest_s3_stack, s3_filesystem
from test_correctness import CONFIG, LAYOUTS, MOR, SCHEMA, Writer

from floe.commit.request import CommitConflict, CommitPending, RewriteRequest
from floe.commit.rewrite import commit_rewrite
from floe.local.optimize import plan_table
from floe.local.reference_reader import ReferenceReader
from floe.optimizing.commit_request import commit_request
from floe.optimizing.specs import build_process
from floe.planning.plan import OptimizingType
from floe.rewrite.task import run_task
from floe.tables.history import SUMMARY_PROCESS_ID

CATALOG = "faults_rest"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestS3Stack]:
    with rest_s3_stack("127.0.0.1", tmp_path_factory.mktemp("fault-commit")) as running:
        yield running


@pytest.fixture
def proxy(stack: RestS3Stack) -> Iterator[FaultProxy]:
    with fault_proxy(stack.catalog.uri) as running:
        yield running


_tables = iter(range(1_000_000))


@pytest.fixture
def table(stack: RestS3Stack, proxy: FaultProxy, reference: ReferenceReader) -> Table:
    """A table with small files and deletes, as floe sees it: through the proxy."""
    direct = stack.client(CATALOG)
    reference.register_catalog(CATALOG, stack.properties)
    if ("db",) not in direct.list_namespaces():
        direct.create_namespace("db")
    name = f"db.t{next(_tables)}"
    created = direct.create_table(name, SCHEMA, partition_spec=LAYOUTS["identity"], properties=MOR)
    writer = Writer(created)
    for _ in range(6):
        writer.append(30)
    writer.upsert([3, 40])
    return rest_catalog(f"{CATALOG}_proxied", {**stack.properties, "uri": proxy.url}).load_table(name)


def _request(table: Table, forced: OptimizingType = OptimizingType.FULL) -> RewriteRequest:
    """An optimizing of the table (full unless `forced` says), its tasks run for real."""
    scanned, plan = plan_table(table, CONFIG, forced=forced)
    process = build_process(table, ".".join(table.name()), scanned, plan, CONFIG)
    results = [run_task(spec) for spec in process.specs]
    return commit_request(process, results, {}, allow_partial_commit=False)


def _snapshots_of(stack: RestS3Stack, table: Table, request: RewriteRequest) -> list[int]:
    fresh = stack.client(CATALOG).load_table(table.name())
    return [
        s.snapshot_id
        for s in fresh.metadata.snapshots
        if s.summary is not None and s.summary.get(SUMMARY_PROCESS_ID) == request.process_id
    ]


def _rows(reference: ReferenceReader, table: Table, snapshot_id: int | None = None) -> object:
    return reference.rows(CATALOG, ".".join(table.name()), snapshot_id)


def _stored(stack: RestS3Stack, request: RewriteRequest) -> bool:
    fs = s3_filesystem(stack.moto.endpoint)
    return all(fs.get_file_info(f.file_path.removeprefix("s3://")).size for f in request.added_files)


def test_a_commit_whose_answer_is_lost_is_found_on_the_next_attempt_not_made_twice(
    stack: RestS3Stack, proxy: FaultProxy, table: Table, reference: ReferenceReader
) -> None:
    before = _rows(reference, table)
    request = _request(table)
    lost = proxy.rule("POST", COMMIT_PATH, "drop_answer")

    result = commit_rewrite(table, request)

    assert lost.matched == 1, "the catalog applied the first commit, whose answer was dropped"
    assert result.attempts == 2
    assert _snapshots_of(stack, table, request) == [result.snapshot_id]
    assert _rows(reference, table) == before
    assert _stored(stack, request)


def test_a_commit_that_may_have_landed_while_the_catalog_went_away_stays_pending_then_is_found(
    stack: RestS3Stack, proxy: FaultProxy, table: Table, reference: ReferenceReader
) -> None:
    before = _rows(reference, table)
    request = _request(table)
    proxy.rule("POST", COMMIT_PATH, "drop_answer", down_after=True)

    with pytest.raises(CommitPending, match="could not be made now"):
        commit_rewrite(table, request)

    # It did land, but floe could not see that: every file it wrote is still there.
    landed = _snapshots_of(stack, table, request)
    assert len(landed) == 1 and _stored(stack, request)

    proxy.up()
    result = commit_rewrite(table, request)

    assert (result.snapshot_id, result.attempts) == (landed[0], 1)
    assert _snapshots_of(stack, table, request) == landed
    assert _rows(reference, table) == before


def test_commits_the_catalog_never_received_stay_pending_and_land_once_it_answers(
    stack: RestS3Stack, proxy: FaultProxy, table: Table, reference: ReferenceReader
) -> None:
    before = _rows(reference, table)
    start = table.current_snapshot()
    request = _request(table)
    proxy.rule("POST", COMMIT_PATH, "refuse", times=None)

    with pytest.raises(CommitPending, match="may not have landed"):
        commit_rewrite(table, request)

    assert _snapshots_of(stack, table, request) == []
    assert stack.client(CATALOG).load_table(table.name()).current_snapshot() == start
    assert _stored(stack, request)

    proxy.clear()
    result = commit_rewrite(table, request)
    assert _snapshots_of(stack, table, request) == [result.snapshot_id]
    assert _rows(reference, table) == before


def test_a_catalog_down_before_the_commit_keeps_the_files_and_the_commit_lands_when_it_is_back(
    stack: RestS3Stack, proxy: FaultProxy, table: Table, reference: ReferenceReader
) -> None:
    before = _rows(reference, table)
    request = _request(table)
    proxy.down()

    with pytest.raises(CommitPending):
        commit_rewrite(table, request)
    assert _stored(stack, request)

    proxy.up()
    result = commit_rewrite(table, request)
    assert result.attempts == 1 and _snapshots_of(stack, table, request) == [result.snapshot_id]
    assert _rows(reference, table) == before


def test_a_written_file_gone_before_the_commit_fails_it_and_nothing_is_committed(
    stack: RestS3Stack, proxy: FaultProxy, table: Table, reference: ReferenceReader
) -> None:
    before = _rows(reference, table)
    start = table.current_snapshot()
    request = _request(table)
    gone = request.added_files[0].file_path
    s3_filesystem(stack.moto.endpoint).delete_file(gone.removeprefix("s3://"))

    with pytest.raises(CommitConflict, match="gone from storage"):
        commit_rewrite(table, request)

    assert stack.client(CATALOG).load_table(table.name()).current_snapshot() == start
    assert _rows(reference, table) == before


def test_a_lost_answer_to_a_commit_of_two_snapshots_is_found_on_the_next_attempt(
    stack: RestS3Stack, proxy: FaultProxy, table: Table, reference: ReferenceReader
) -> None:
    # Segments whose equality deletes minor converts, next to fragments it rewrites.
    writer = Writer(stack.client(CATALOG).load_table(table.name()), seed=11)
    writer.next_id = 1000
    for _ in range(3):
        writer.append(4500)
    writer.upsert([1000, 1007, 5600, 10_100, 14_000])
    table.refresh()
    before = _rows(reference, table)
    request = _request(table, OptimizingType.MINOR)
    assert request.converted_data_paths and request.rewritten_data_paths
    lost = proxy.rule("POST", COMMIT_PATH, "drop_answer")

    result = commit_rewrite(table, request)

    assert lost.matched == 1 and result.attempts == 2
    assert _snapshots_of(stack, table, request) == list(result.snapshot_ids) and len(result.snapshot_ids) == 2
    fresh = stack.client(CATALOG).load_table(table.name())
    operations = [fresh.metadata.snapshot_by_id(s).summary.operation.value for s in result.snapshot_ids]  # type: ignore[union-attr]
    assert operations == ["replace", "delete"]
    for snapshot_id in result.snapshot_ids:
        assert _rows(reference, table, snapshot_id) == before
