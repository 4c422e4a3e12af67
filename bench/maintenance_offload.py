"""What one orphan cleanup of a big table costs the operator: done there, or on the group's executors.

The same orphan cleanup of one table of ``--files`` data files (``--snapshots`` commits) with
``--orphans`` orphan files, both ways, in one run:

- ``operator``: `run_maintenance_job` as the operator runs it below ``executorsAtFiles``: it
  lists the table's files, reads every manifest and deletes the orphans itself;
- ``executors``: the same call with the group's executors (`ExecutorPool` over a real task
  service, an in-process optimizer and local Spark, whose Python workers are processes of their
  own, as executor pods are): the operator only reloads the table and checks the scan.

Measured per side: the CPU of the job's own thread (what the operator's maintenance thread
spends), the CPU of this whole process (which here also holds the task service's HTTP server
and the optimizer's driver threads: on Kubernetes those are the operator's server and the
driver pod), and the wall time. Orphans are made afresh for each side, aged past the cutoff.

Run: ``.venv/bin/python bench/maintenance_offload.py [--files 20000] [--orphans 5000]``.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from harness.cli import benchmark_parser
from harness.report import times
from harness.results import BenchResult, Figures, new_result, report_result

DAY = 86400.0
GROUP = "bench"
TABLE = "db.big"


def _catalog(directory: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("lake", uri=f"sqlite:///{directory}/catalog.db", warehouse=(directory / "wh").as_uri())


def make_table(directory: Path, files: int, snapshots: int) -> None:
    """Table ``db.big`` with `files` small data files added in `snapshots` commits, made once."""
    marker = directory / f"done-{files}-{snapshots}"
    if marker.exists():
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    catalog = _catalog(directory)
    catalog.create_namespace("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    table = catalog.create_table(TABLE, schema)
    data = Path(table.location().removeprefix("file://")) / "data"
    data.mkdir(parents=True)
    started = time.perf_counter()
    per_commit = -(-files // snapshots)
    for start in range(0, files, per_commit):
        paths = []
        for index in range(start, min(files, start + per_commit)):
            path = data / f"file-{index:06d}.parquet"
            pq.write_table(pa.table({"id": [index], "v": [str(index)]}, schema=schema), path)
            paths.append(path.as_uri())
        table.add_files(paths)
    print(f"made {files} files in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    marker.write_text("")


def make_orphans(table: Any, count: int, side: str) -> None:
    """`count` files under the table's data directory that no metadata names, four days old."""
    directory = Path(table.location().removeprefix("file://")) / "data" / f"orphans-{side}"
    directory.mkdir(parents=True, exist_ok=True)
    when = time.time() - 4 * DAY
    for index in range(count):
        path = directory / f"orphan-{index:06d}.parquet"
        path.write_bytes(b"orphan")
        os.utime(path, (when, when))


def measure(table: Any, executors: Any) -> dict[str, float]:
    """One orphan cleanup, with `executors` or without; its CPU and wall time."""
    from floe.api.table import MaintenanceSpec
    from floe.maintenance.job import MaintenanceJob
    from floe.maintenance.jobs import run_maintenance_job

    process_before = resource.getrusage(resource.RUSAGE_SELF)
    thread_before, wall_before = time.thread_time(), time.perf_counter()
    report = run_maintenance_job(
        table, MaintenanceJob.ORPHANS, MaintenanceSpec(), now_s=time.time(), executors=executors
    )
    thread_s, wall_s = time.thread_time() - thread_before, time.perf_counter() - wall_before
    after = resource.getrusage(resource.RUSAGE_SELF)
    process_s = (after.ru_utime + after.ru_stime) - (process_before.ru_utime + process_before.ru_stime)
    print(f"  {report.summary}", file=sys.stderr)
    return {"thread": thread_s, "process": process_s, "wall": wall_s, "removed": report.files_removed}


def main() -> int:
    parser = benchmark_parser(__doc__ or "", "offload")
    parser.add_argument("--files", type=int, default=20000, help="data files of the table")
    parser.add_argument("--snapshots", type=int, default=10, help="commits that added them")
    parser.add_argument("--orphans", type=int, default=5000, help="orphan files to remove")
    args = parser.parse_args()

    from floe.maintenance.orphans_on_executors import ExecutorPool
    from floe.service.file_tasks import FileTaskDispatcher
    from floe.service.http import TaskServiceServer
    from floe.service.task_service import TaskService
    from floe_optimizer.app import Optimizer
    from floe_optimizer.spark_session import get_spark

    make_table(args.dir, args.files, args.snapshots)
    table = _catalog(args.dir).load_table(TABLE)
    service = TaskService(clock=time.time, registration_token="bench")
    server = TaskServiceServer(service)
    server.start()
    scheduler = service.add_group(GROUP)
    spark = get_spark(master="local[2]", app_name="floe-bench-offload")
    optimizer = Optimizer(server.url, group=GROUP, threads=2, spark=spark, registration_token="bench")
    optimizer.start()
    while optimizer.optimizer_id is None:
        time.sleep(0.05)
    scheduler.upsert_table(TABLE, 1.0, None)
    dispatcher = FileTaskDispatcher(service, time.time)
    runs = iter(range(1_000_000))
    executors = ExecutorPool(
        run=lambda specs: dispatcher.run(scheduler, TABLE, f"orphans-{next(runs)}", specs),
        io_properties={k: str(v) for k, v in table.io.properties.items()},
        storage_secret=None,
    )
    results: dict[str, dict[str, float]] = {}
    try:
        for side, with_executors in (("operator", None), ("executors", executors)):
            make_orphans(table, args.orphans, side)
            print(f"{side}:", file=sys.stderr)
            results[side] = measure(table, with_executors)
    finally:
        optimizer.stop(grace_s=30)
        server.stop()
        spark.stop()

    report_result(result(results, args.files, args.snapshots, args.orphans), args.record)
    return 0


def result(results: dict[str, dict[str, float]], files: int, snapshots: int, orphans: int) -> BenchResult:
    """Both ways' CPU and wall time, and how much less CPU the operator spends with the executors."""
    operator, offloaded = results["operator"], results["executors"]
    rows = [
        [side, f"{r['thread']:.2f}", f"{r['process']:.2f}", f"{r['wall']:.2f}", f"{r['removed']:,.0f}"]
        for side, r in results.items()
    ]
    return new_result(
        "maintenance_offload",
        "Big tables' orphan cleanup: in the operator or on the group's executors",
        "What one orphan cleanup of a big table costs the operator when it lists, reads manifests and "
        "deletes itself, against the same cleanup on the group's executors, where the operator only "
        "reloads the table and checks the scan.",
        figures=[
            Figures(
                "One orphan cleanup, each way",
                ["side", "job thread CPU s", "process CPU s", "wall s", "files removed"],
                rows,
            ),
            Figures(
                "CPU with the executors, times less than in the operator",
                ["job thread CPU", "process CPU"],
                [[times(operator[cpu], offloaded[cpu]) for cpu in ("thread", "process")]],
            ),
        ],
        notes=[
            f"Orphan cleanup of {TABLE}: {files:,} data files (one small file per row, SQL catalog, local "
            f"files) added in {snapshots} commits, {orphans:,} orphans four days old. With the executors: a "
            "real task service and an in-process optimizer on local Spark with 2 threads, whose Python "
            "workers are processes of their own, as executor pods are.",
            "Process CPU is the whole benchmark process's: with the executors it also holds the task "
            "service's HTTP handling and the optimizer's driver threads, which on Kubernetes run in the "
            "driver pod, not the operator: an upper bound on the operator's share.",
        ],
    )


if __name__ == "__main__":
    sys.exit(main())
