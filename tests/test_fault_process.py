"""Processes killed with SIGKILL at the worst moments, and a disk that fills up: nothing is lost.

- an optimizer (``floe-optimizer``, a real subprocess with its own Spark) killed while it runs
  a task, and while its completion is on its way to the task service (held by `FaultProxy`);
- ``floe run`` killed while its tasks run, and while its commit is on its way to a REST
  catalog (held by `FaultProxy`, then either applied after the kill or lost), then started
  again;
- the table's storage full while the rewrite writes.

After each, Iceberg Java's reader must read the rows the table had, no process may have
committed twice, and no file may be left under the table's data directory that no snapshot
references, once floe cleaned up after itself or orphan cleanup ran.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fault_proxy import COMMIT_PATH, fault_proxy
from pyarrow.fs import FileSelector, LocalFileSystem
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession
from rest_s3 import RestS3Stack, rest_s3_stack, s3_filesystem
from test_correctness import LAYOUTS, MOR, SCHEMA, Writer, optimize

from floe.api.group import OptimizerGroup
from floe.api.models import OptimizedTable
from floe.local.reference_reader import ReferenceReader
from floe.maintenance.orphans import remove_orphan_files
from floe.maintenance.reachable import referenced_files
from floe.optimizing.commit_request import ProcessFailed
from floe.optimizing.engine import OptimizingEngine
from floe.optimizing.table_state import TableRuntime, TableState
from floe.planning.plan import OptimizingType
from floe.service.http import TaskServiceServer
from floe.service.task_service import TaskService
from floe.tables.history import SUMMARY_PROCESS_ID
from floe_optimizer.app import Optimizer

BIN = Path(sys.executable).parent
GROUP = "g"
TABLE_ID = "default/t"
ORPHAN_AGE_S = 3600.0


class Child:
    """A subprocess in a session of its own, so SIGKILL reaches it and its Spark JVM at once."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def kill(self) -> None:
        """SIGKILL the whole process group (its Spark JVM too), as a lost node would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def children() -> Iterator[Callable[[list[str], Path], Child]]:
    started: list[Child] = []

    def start(args: list[str], log: Path) -> Child:
        child = Child(args, log)
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()


def _wait(done: Callable[[], bool], what: str, timeout_s: float = 180, child: Child | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if child is not None and child.process.poll() is not None:
            raise AssertionError(
                f"{what}: the child exited with {child.process.returncode}:\n{child.output()}"
            )
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def _small_files_table(catalog: Any, name: str) -> Table:
    """Five partitions of small files with upserts: five or more tasks at a 16 KiB target."""
    table = catalog.create_table(name, SCHEMA, partition_spec=LAYOUTS["bucket"], properties=MOR)
    writer = Writer(table)
    for _ in range(10):
        writer.append(40)
    writer.upsert([1, 2, 3, 50, 120, 301])
    return table


def _data_files(table: Table) -> set[str]:
    """Every file under the table's data directory, as the metadata spells locations."""
    location = f"{table.metadata.location.rstrip('/')}/data"
    if location.startswith("s3://"):
        raise ValueError("use _s3_data_files")
    root = location.removeprefix("file://")
    infos = LocalFileSystem().get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
    return {f"file://{info.path}" for info in infos if info.is_file}


def _s3_data_files(data: RestS3Stack, table: Table) -> set[str]:
    root = f"{table.metadata.location.removeprefix('s3://').rstrip('/')}/data"
    infos = s3_filesystem(data.moto.endpoint).get_file_info(FileSelector(root, recursive=True))
    return {f"s3://{info.path}" for info in infos if info.is_file}


def _referenced(table: Table) -> set[str]:
    return set(referenced_files(table.io, table.snapshots(), live_only=False).content_files)


def _process_snapshots(table: Table) -> Counter[str]:
    return Counter(
        s.summary[SUMMARY_PROCESS_ID]
        for s in table.metadata.snapshots
        if s.summary is not None and s.summary.get(SUMMARY_PROCESS_ID)
    )


def _written_by_floe(files: set[str], table_name: str) -> list[str]:
    return sorted(f for f in files if Path(f).name.startswith(f"{table_name}-2"))


def _check(
    table: Table, reference: ReferenceReader, catalog: str, before: Counter[Any], stored: set[str]
) -> None:
    """Rows kept, no process committed twice, nothing stored that no snapshot references."""
    table.refresh()
    assert reference.rows(catalog, ".".join(table.name())) == before
    assert all(n == 1 for n in _process_snapshots(table).values()), _process_snapshots(table)
    assert sorted(stored - _referenced(table)) == []


# -- the optimizer killed --------------------------------------------------------------------


def _engine_stack(
    sql_catalog: SqlCatalog,
) -> tuple[TaskService, TaskServiceServer, OptimizingEngine, TableRuntime]:
    service = TaskService(clock=time.time, heartbeat_interval_s=0.5)
    server = TaskServiceServer(service, keeper_interval_s=0.2)
    server.start()
    engine = OptimizingEngine(service, refresh_interval_s=0.5)
    engine.apply_group(
        OptimizerGroup.model_validate(
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizerGroup",
                "metadata": {"name": GROUP},
                "spec": {"heartbeatTimeout": "3s"},
            }
        )
    )
    runtime = engine.apply_table(
        OptimizedTable.model_validate(
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizedTable",
                "metadata": {"name": "t"},
                "spec": {
                    "table": "db.t",
                    "catalog": {
                        "name": sql_catalog.name,
                        "properties": {
                            "type": "sql",
                            **{k: str(v) for k, v in sql_catalog.properties.items()},
                        },
                    },
                    "group": GROUP,
                    "targetSize": "16Ki",
                    "maxTaskSize": "16Ki",
                    "minPlanInterval": "0s",
                },
            }
        )
    )
    return service, server, engine, runtime


def _tick_until(
    engine: OptimizingEngine, done: Callable[[], bool], what: str, timeout_s: float = 240
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}: {engine.table_views()}"
        engine.tick()
        time.sleep(0.2)


@pytest.mark.parametrize("moment", ["running its task", "sending its completion"])
def test_an_optimizer_killed_mid_task_loses_nothing(
    moment: str,
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
    spark: SparkSession,
    children: Callable[[list[str], Path], Child],
    tmp_path: Path,
) -> None:
    table = _small_files_table(sql_catalog, "db.t")
    before = reference.rows(sql_catalog.name, "db.t")
    service, server, engine, runtime = _engine_stack(sql_catalog)
    with fault_proxy(server.url) as proxy:
        held = proxy.rule("POST", r"^/v1/tasks/[^/]+/complete$", "hold")
        url = proxy.url if moment == "sending its completion" else server.url
        doomed = children(
            [
                str(BIN / "floe-optimizer"),
                "--service",
                url,
                "--group",
                GROUP,
                "--threads",
                "1",
                "--master",
                "local[1]",
            ],
            tmp_path / "optimizer.log",
        )
        _tick_until(engine, lambda: runtime.process_id is not None, "the table was planned")
        scheduler = service.group(GROUP)
        if moment == "running its task":
            _wait(lambda: scheduler.stats(time.time())[TABLE_ID].running == 1, "a task runs", child=doomed)
        else:
            _wait(held.arrived.is_set, "a completion is on its way", child=doomed)
            assert _written_by_floe(_data_files(table), "db.t"), "the task wrote its files"

        doomed.kill()
        held.let_go(forward=False)

        assert scheduler.stats(time.time())[TABLE_ID].succeeded == 0
        rescuer = Optimizer(server.url, group=GROUP, threads=2, spark=spark, name="rescuer", poll_wait_s=1)
        rescuer.start()
        try:
            _tick_until(
                engine,
                lambda: runtime.state == TableState.IDLE and "committed snapshot" in runtime.last_result,
                "the process committed",
            )
        finally:
            rescuer.stop(grace_s=30)
            server.stop()
            engine.close()
    # The killed attempt's files were removed by floe itself, when the process committed.
    _check(table, reference, sql_catalog.name, before, _data_files(table))
    assert len(_process_snapshots(table)) == 1


# -- floe run killed -------------------------------------------------------------------------


def _manifests(
    directory: Path, table_name: str, catalog: str, properties: dict[str, str] | None = None
) -> Path:
    """A group of four task threads (on one local Spark core: tasks run one after another) and
    the table."""
    directory.mkdir(parents=True, exist_ok=True)
    table: dict[str, Any] = {
        "table": table_name,
        "catalog": {"name": catalog, **({"properties": properties} if properties else {})},
        "group": GROUP,
        "targetSize": "16Ki",
        "maxTaskSize": "16Ki",
        "minPlanInterval": "0s",
    }
    group = {"executors": 1, "executorCores": 4}
    documents = [
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizerGroup",
            "metadata": {"name": GROUP},
            "spec": group,
        },
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizedTable",
            "metadata": {"name": "t"},
            "spec": table,
        },
    ]
    (directory / "floe.yaml").write_text(yaml.safe_dump_all(documents))
    return directory


def _catalog_config(catalog: SqlCatalog, directory: Path) -> Path:
    """A catalog config file for `catalog`, under its own name: a SQL catalog keys its tables by
    the catalog's name, so floe must open it under the same one."""
    config = directory / "catalog.yaml"
    properties = {k: str(v) for k, v in catalog.properties.items()}
    config.write_text(yaml.safe_dump({"name": catalog.name, "type": "sql", **properties}))
    return config


def _floe_run(manifests: Path, *extra: str) -> list[str]:
    return [str(BIN / "floe"), "run", "-f", str(manifests), "--cores", "1", "--refresh-interval", "1", *extra]


def _floe_run_on(catalog: SqlCatalog, directory: Path) -> list[str]:
    """`floe run` over a manifest of `catalog`'s db.t, with a catalog config file for it."""
    manifests = _manifests(directory / "manifests", "db.t", catalog.name)
    return _floe_run(manifests, "--catalog-config", str(_catalog_config(catalog, directory)))


def _wait_mid_process(table: Table, child: Child) -> None:
    """Wait until a task of `child`'s optimizing process has written a file into db.t."""
    _wait(lambda: bool(_written_by_floe(_data_files(table), "db.t")), "a task wrote a file", child=child)


def test_floe_run_killed_mid_process_then_restarted_loses_nothing(
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
    children: Callable[[list[str], Path], Child],
    tmp_path: Path,
) -> None:
    table = _small_files_table(sql_catalog, "db.t")
    before = reference.rows(sql_catalog.name, "db.t")
    start = table.current_snapshot()
    run = _floe_run_on(sql_catalog, tmp_path)

    first = children(run, tmp_path / "run-1.log")
    _wait_mid_process(table, first)
    first.kill()

    table.refresh()
    assert table.current_snapshot() == start, "the kill came after the commit: the test must kill mid-process"
    leftovers = _written_by_floe(_data_files(table), "db.t")
    assert leftovers

    again = children([*run, "--once", "--timeout", "300"], tmp_path / "run-2.log")
    assert again.wait(360) == 0, again.output()

    table.refresh()
    assert _process_snapshots(table), "the restarted run committed"
    # The killed run's files belong to no process floe knows any more: orphan cleanup's.
    remove_orphan_files(table, older_than_s=ORPHAN_AGE_S, now_s=time.time() + 2 * ORPHAN_AGE_S)
    assert not any(Path(p.removeprefix("file://")).exists() for p in leftovers)
    _check(table, reference, sql_catalog.name, before, _data_files(table))


@pytest.fixture(scope="module")
def rest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestS3Stack]:
    with rest_s3_stack("127.0.0.1", tmp_path_factory.mktemp("fault-process")) as running:
        yield running


@pytest.mark.parametrize("commit", ["applied after the kill", "lost with the process"])
def test_floe_run_killed_mid_commit_then_restarted_commits_once(
    commit: str,
    rest: RestS3Stack,
    reference: ReferenceReader,
    children: Callable[[list[str], Path], Child],
    tmp_path: Path,
) -> None:
    catalog_name = "fault_run"
    reference.register_catalog(catalog_name, rest.properties)
    direct = rest.client(catalog_name)
    if ("db",) not in direct.list_namespaces():
        direct.create_namespace("db")
    name = "db.landed" if commit == "applied after the kill" else "db.lost"
    table = _small_files_table(direct, name)
    before = reference.rows(catalog_name, name)
    start = table.current_snapshot()

    with fault_proxy(rest.catalog.uri) as proxy:
        held = proxy.rule("POST", COMMIT_PATH, "hold")
        manifests = _manifests(
            tmp_path / "manifests", name, catalog_name, {**rest.properties, "uri": proxy.url}
        )
        first = children(_floe_run(manifests), tmp_path / "run-1.log")
        _wait(held.arrived.is_set, "floe run sent its commit", timeout_s=240, child=first)

        first.kill()
        applied = commit == "applied after the kill"
        held.let_go(forward=applied)
        if applied:
            _wait(lambda: any(m == "POST" and s == 200 for m, _, s in proxy.forwarded), "the commit landed")
        table.refresh()
        assert (table.current_snapshot() != start) == applied
        assert len(_process_snapshots(table)) == int(applied)

        again = children(_floe_run(manifests, "--once", "--timeout", "300"), tmp_path / "run-2.log")
        assert again.wait(360) == 0, again.output()

    table.refresh()
    assert len(_process_snapshots(table)) >= 1
    remove_orphan_files(table, older_than_s=ORPHAN_AGE_S, now_s=time.time() + 2 * ORPHAN_AGE_S)
    _check(table, reference, catalog_name, before, _s3_data_files(rest, table))


# -- the disk full ---------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of its own, to fill up; root only (mount)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small filesystem needs root")
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(mount_point: Path) -> Path:
    """Take every free byte of the filesystem with one file."""
    filler = mount_point / "filler"
    with filler.open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
            out.flush()
    return filler


@pytest.mark.parametrize("moment", ["the tasks write", "the commit writes its metadata"])
def test_a_full_disk_fails_the_process_cleanly_and_it_commits_once_there_is_room(
    moment: str, small_disk: Path, reference: ReferenceReader, spark: SparkSession, tmp_path: Path
) -> None:
    name = f"fault_disk_{moment.split()[1]}"
    catalog = SqlCatalog(name, uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=small_disk.as_uri())
    catalog.create_namespace("db")
    reference.register_sql_catalog(name, tmp_path / "catalog.db", small_disk.as_uri())
    table = _small_files_table(catalog, "db.t")
    before = reference.rows(name, "db.t")
    start = table.current_snapshot()
    filled: list[Path] = []
    tasks: list[int] = []
    done: list[object] = []

    def fill_once_every_task_is_done(outcome: object) -> None:
        done.append(outcome)
        if len(done) == tasks[0]:
            filled.append(_fill(small_disk))

    if moment == "the tasks write":
        filled.append(_fill(small_disk))
    with pytest.raises(ProcessFailed, match="No space left on device"):
        optimize(
            table,
            spark,
            OptimizingType.FULL,
            num_retries=1,
            on_plan=lambda plan: tasks.append(len(plan.tasks)),
            on_task_done=None if moment == "the tasks write" else fill_once_every_task_is_done,
        )
    if moment == "the commit writes its metadata":
        assert len(done) == tasks[0] and all(getattr(o, "result", None) for o in done), "every task succeeded"

    table.refresh()
    assert table.current_snapshot() == start
    _check(table, reference, name, before, _data_files(table))

    filled[0].unlink()
    result = optimize(table, spark, OptimizingType.FULL)
    assert result.commit is not None
    _check(table, reference, name, before, _data_files(table))
    catalog.engine.dispose()


# -- stopped by a signal ---------------------------------------------------------------------


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_floe_optimize_stopped_mid_task_abandons_the_process_and_says_so(
    signum: int,
    code: int,
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
    children: Callable[[list[str], Path], Child],
    tmp_path: Path,
) -> None:
    table = _small_files_table(sql_catalog, "db.t")
    before = reference.rows(sql_catalog.name, "db.t")
    start = table.current_snapshot()
    config = _catalog_config(sql_catalog, tmp_path)
    command = [str(BIN / "floe"), "optimize", "--catalog-config", str(config), "db.t", "--type", "full"]
    cli = children([*command, "--target-size", "16Ki", "--cores", "1"], tmp_path / "cli.log")
    _wait_mid_process(table, cli)

    cli.process.send_signal(signum)

    assert cli.wait(120) == code, cli.output()
    last = cli.output().strip().splitlines()[-1]
    name = signal.Signals(signum).name
    assert last.startswith(f"interrupted by {name}: optimizing of db.t abandoned, nothing committed;"), last
    assert "Traceback" not in cli.output()
    table.refresh()
    assert table.current_snapshot() == start
    assert _written_by_floe(_data_files(table), "db.t") == []
    _check(table, reference, sql_catalog.name, before, _data_files(table))


def test_floe_run_stopped_mid_process_abandons_it_and_says_so(
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
    children: Callable[[list[str], Path], Child],
    tmp_path: Path,
) -> None:
    table = _small_files_table(sql_catalog, "db.t")
    before = reference.rows(sql_catalog.name, "db.t")
    start = table.current_snapshot()
    run = children(_floe_run_on(sql_catalog, tmp_path), tmp_path / "run.log")
    _wait_mid_process(table, run)

    run.process.send_signal(signal.SIGTERM)

    assert run.wait(120) == 143, run.output()
    last = run.output().strip().splitlines()[-1]
    assert last.startswith("interrupted by SIGTERM: 1 optimizing process(es) abandoned, nothing committed"), (
        last
    )
    table.refresh()
    assert table.current_snapshot() == start
    assert _written_by_floe(_data_files(table), "db.t") == []
    _check(table, reference, sql_catalog.name, before, _data_files(table))
