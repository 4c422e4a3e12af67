"""The rewrite benchmark's engines, each rewriting the table of a `Layout` catalog, timed with its CPU.

- `SparkEngines.floe`: ``optimize_once(..., forced=FULL)`` with a 128 MiB target on the run's
  Spark session, its plan, rewrite and commit phases apart;
- `SparkEngines.iceberg`: ``CALL <catalog>.system.rewrite_data_files(...)``, binpack, on the
  same session;
- `rewrite_bins`: the bound, bare pyarrow in a pool of processes reading and rewriting the
  data files in bins of 128 MiB (`bound_bins`) with no Iceberg logic: what the bytes alone cost.

`profile_largest_task` runs floe's largest task alone under cProfile, `warm_up` warms the engines.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from floe.local.optimize import OptimizeResult, optimize_once
from floe.local.reference_jars import reference_jars
from floe.local.reference_reader import ReferenceReader
from floe.optimizing.specs import build_process
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingType
from floe.planning.planner import plan_optimizing
from floe.rewrite.task import run_rewrite_task
from floe.tables.scan import scan_table
from floe_optimizer.spark_session import get_spark
from harness import MiB
from harness.pristine import Layout
from harness.profiling import Listing, profiled
from harness.timing import timed
from harness.variants import TABLE, add_equality_deletes, register, write_base

TARGET_FILE_BYTES = 128 * MiB
BOUND_ROW_GROUP_BYTES = 64 * MiB
ICEBERG_OPTIONS = {
    "target-file-size-bytes": str(TARGET_FILE_BYTES),
    "rewrite-all": "true",
    "delete-file-threshold": "1",
    "remove-dangling-deletes": "true",
}
WARMUP_SCALE = 0.004


def rewrite_config() -> OptimizingConfig:
    """floe's configuration in this benchmark: the 128 MiB target, tasks of at most that."""
    return OptimizingConfig(target_size=TARGET_FILE_BYTES, max_task_size_bytes=TARGET_FILE_BYTES)


class SparkEngines:
    """The run's one Spark session, with floe's and Iceberg's rewrites on it."""

    def __init__(self, cores: int) -> None:
        session = get_spark(master=f"local[{cores}]", app_name="floe-bench", extra_jars=reference_jars())
        self._session = session
        self.reader = ReferenceReader(session)
        """Iceberg Java on the session: the content checks and Spark's DELETE use it too."""

    def floe(self, layout: Layout, name: str) -> dict[str, Any]:
        """Time floe's full optimizing of the table in catalog ``name`` and its plan, rewrite and commit."""
        marks: dict[str, float] = {}

        def mark(event: str) -> Callable[[Any], None]:
            return lambda _: marks.__setitem__(event, time.perf_counter())

        with layout.catalog(name) as catalog:
            table = catalog.load_table(TABLE)
            config = rewrite_config()

            def run() -> OptimizeResult:
                marks["start"] = time.perf_counter()
                result = optimize_once(
                    table,
                    TABLE,
                    config,
                    spark=lambda: self._session,
                    forced=OptimizingType.FULL,
                    on_plan=mark("planned"),
                    on_task_done=mark("rewritten"),
                )
                marks["end"] = time.perf_counter()
                return result

            optimized = timed(run)
        return {
            "seconds": optimized.seconds,
            "cpu_seconds": optimized.cpu_seconds,
            "tasks": len(optimized.value.plan.tasks),
            "check_seconds": optimized.value.check_seconds,
            "floe_bytes_read": optimized.value.bytes_read,
            "phases": [
                marks["planned"] - marks["start"],
                marks["rewritten"] - marks["planned"],
                marks["end"] - marks["rewritten"],
            ],
        }

    def iceberg(self, layout: Layout, name: str) -> dict[str, Any]:
        """Time Iceberg's rewrite_data_files procedure on the table in catalog ``name``."""
        register(self.reader, layout, name)
        options = ", ".join(f"'{key}', '{value}'" for key, value in ICEBERG_OPTIONS.items())
        call = (
            f"CALL {name}.system.rewrite_data_files(table => '{name}.{TABLE}', strategy => 'binpack', "
            f"options => map({options}))"
        )
        run = timed(lambda: self.reader.sql(call))
        return {
            "seconds": run.seconds,
            "cpu_seconds": run.cpu_seconds,
            "procedure_result": [list(row) for row in run.value],
        }

    def stop(self) -> None:
        """Stop the Spark session."""
        self._session.stop()


def _bound_bin(paths: list[str], output: str) -> tuple[int, int]:
    """Read whole files, concatenate, write one zstd file with ~64 MiB row groups; return rows and bytes."""
    data = pa.concat_tables([pq.read_table(path) for path in paths])
    row_bytes = max(1.0, data.nbytes / max(1, data.num_rows))
    pq.write_table(
        data, output, compression="zstd", row_group_size=max(1, int(BOUND_ROW_GROUP_BYTES / row_bytes))
    )
    return data.num_rows, os.path.getsize(output)


def rewrite_bins(bins: list[list[str]], out_dir: Path, cores: int) -> dict[str, Any]:
    """Time the bare pyarrow read-then-write of ``bins`` in ``cores`` processes, writing under ``out_dir``."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir()
    jobs = [(paths, str(out_dir / f"bin-{n:05d}.parquet")) for n, paths in enumerate(bins)]

    def run() -> list[tuple[int, int]]:
        pool = multiprocessing.get_context("fork").Pool(cores)
        try:
            written = pool.starmap(_bound_bin, jobs, chunksize=1)
        finally:
            pool.close()
            pool.join()
        return written

    bound = timed(run)
    shutil.rmtree(out_dir)
    return {
        "seconds": bound.seconds,
        "cpu_seconds": bound.cpu_seconds,
        "output_files": len(bound.value),
        "output_bytes": sum(size for _, size in bound.value),
        "rows": sum(rows for rows, _ in bound.value),
    }


def bound_bins(layout: Layout, name: str) -> list[list[str]]:
    """The data files of each partition, in path order, packed into bins of at most 128 MiB (local paths)."""
    by_partition: dict[Any, list[Any]] = defaultdict(list)
    with layout.catalog(name) as catalog:
        for f in scan_table(catalog.load_table(TABLE)).files.data_files:
            by_partition[f.partition].append(f)
    bins: list[list[str]] = []
    for files in by_partition.values():
        current: list[str] = []
        used = 0
        for f in sorted(files, key=lambda f: f.path):
            if current and used + f.size_bytes > TARGET_FILE_BYTES:
                bins.append(current)
                current, used = [], 0
            current.append(urlparse(f.path).path if f.path.startswith("file:") else f.path)
            used += f.size_bytes
        if current:
            bins.append(current)
    return bins


def profile_largest_task(layout: Layout, name: str, out: Path, tables: Listing) -> dict[str, Any]:
    """Run floe's largest full-optimizing task of the table in catalog ``name`` in this process, no Spark,
    under cProfile (its `listing` written to ``out``); the task's seconds and bytes read."""
    with layout.catalog(name) as catalog:
        table = catalog.load_table(TABLE)
        config = rewrite_config()
        scanned = scan_table(table)
        plan = plan_optimizing(
            scanned.files,
            config,
            now_s=time.time(),
            last_minor_s=None,
            last_full_s=None,
            forced=OptimizingType.FULL,
        )
        process = build_process(table, TABLE, scanned, plan, config)
        spec = max(process.specs, key=lambda s: sum(f.size_bytes for f in s.data_files))
        with profiled(out, tables):
            started = time.perf_counter()
            result = run_rewrite_task(spec)
            seconds = time.perf_counter() - started
        for written in result.files:
            table.io.delete(written.path)
    return {"seconds": seconds, "bytes_read": result.bytes_read}


def warm_up(spark: SparkEngines, root: Path, seed: int, engines: list[str]) -> None:
    """Run floe and Iceberg once on a small table with equality deletes, so that the timed runs are warm.

    This loads Iceberg's classes and JIT-compiles its read, delete and write paths, and
    starts Spark's Python workers with floe imported, as in a long-running optimizer.
    """
    warm = Layout(root)
    write_base(warm, "warm_build", WARMUP_SCALE, seed)
    add_equality_deletes(warm, "warm_build")
    warm.save("eq", "warm_build")
    for engine in engines:
        name = f"warm_{engine}"
        warm.restore("eq", name)
        if engine == "floe":
            spark.floe(warm, name)
        elif engine == "iceberg":
            spark.iceberg(warm, name)
    shutil.rmtree(root)
