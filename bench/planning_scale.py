"""Planning at scale: floe's ``scan_table`` + ``plan_optimizing`` against pyiceberg's ``plan_files``.

The table is synthesized as real Iceberg metadata in a pyiceberg SQLite catalog: by
default 100,000 data files and 20,000 position delete files over 1,000 day partitions,
committed in snapshots of 5,000 files each (one manifest per commit), every entry with
the column statistics a real writer records (sizes, value/null/NaN counts, lower and
upper bounds of all 13 columns). The Parquet files they name do not exist: planning
reads only metadata. Half of the delete files are file-scoped (their ``file_path``
bounds name one data file, as Iceberg 1.10 writes them), half partition-scoped.
Data file sizes mix fragments (60%), undersized segments (25%) and segments (15%) of
the 128 MiB target. The deletes are position deletes only because pyiceberg's
``plan_files`` refuses equality deletes.

Each measurement runs in a fresh child process, after the catalog is opened and the
table loaded (that time is reported apart): wall time with ``time.perf_counter`` and
peak RSS with ``resource.getrusage`` in one run, the peak of Python allocations with
``tracemalloc`` in another (tracing slows Python down, so its wall time is not used).
Measured engines:

- ``floe``: ``scan_table`` then ``plan_optimizing`` with the default (Amoro) thresholds,
  letting evaluation choose minor/major per partition, as the evaluator loop does;
- ``floe-full``: the same with ``forced=FULL``: every partition is packed into tasks;
- ``pyiceberg``: ``list(table.scan().plan_files())``, pyiceberg 0.12's own planning
  (data files matched with their position deletes).

Run: ``.venv/bin/python bench/planning_scale.py [--scale 0.01]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import resource
import shutil
import sys
import time
import tracemalloc
import uuid
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

from common import (
    CATALOG_NAME,
    EVENTS_SCHEMA,
    EVENTS_SPEC,
    NAMESPACE,
    TABLE_PROPERTIES,
    MiB,
    load_average,
    markdown_table,
    run_step,
    write_result,
)
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
)

from floe.commit.row_delta import commit_row_delta
from floe.planning.config import OptimizingConfig
from floe.planning.plan import OptimizingType
from floe.planning.planner import plan_optimizing
from floe.tables.history import optimizing_history
from floe.tables.scan import POS_DELETE_FILE_PATH_ID, scan_table

TABLE = f"{NAMESPACE}.planning"
FULL_DATA_FILES = 100_000
FULL_DELETE_FILES = 20_000
FULL_PARTITIONS = 1_000
FILES_PER_COMMIT = 5_000
FIRST_DAY = date(2022, 1, 1)
POS_DELETE_POS_ID = 2147483545
ENGINES = ("floe", "floe-full", "pyiceberg")
SYNTHESIS_VERSION = 2
"""Bumped whenever the synthesized metadata changes, so that an older table is not reused."""
TARGET_SECONDS = 10.0
TARGET_BYTES = 2 * 1024 * MiB


@dataclass(frozen=True)
class Shape:
    """How many files and partitions the synthesized table has."""

    data_files: int
    delete_files: int
    partitions: int
    seed: int

    @classmethod
    def at_scale(cls, scale: float, seed: int) -> Shape:
        """The default shape (100k data, 20k delete files, 1,000 partitions) times ``scale``."""
        return cls(
            data_files=max(1, round(FULL_DATA_FILES * scale)),
            delete_files=max(1, round(FULL_DELETE_FILES * scale)),
            partitions=max(1, round(FULL_PARTITIONS * scale)),
            seed=seed,
        )


def _catalog(work_dir: Path) -> SqlCatalog:
    warehouse = (work_dir / "warehouse").resolve().as_uri()
    return SqlCatalog(
        CATALOG_NAME, uri=f"sqlite:///{(work_dir / 'catalog.db').resolve()}", warehouse=warehouse
    )


class _StatsMaker:
    """Plausible per-column statistics of a data file of the events schema, Iceberg-serialized."""

    _STRING_BOUNDS: ClassVar[dict[int, tuple[str, str]]] = {
        4: ("0000a1b2c3d4e5f6", "fffe0d1c2b3a4958"),
        5: ("add_to_cart", "view"),
        6: ("AR", "ZA"),
        7: ("/account/settings", "/search?q=zz"),
        8: ("bing.com", "youtube.com"),
        9: ("desktop", "tv"),
    }

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def data_file_stats(self, records: int, size: int, day: date) -> dict[str, Any]:
        rng = self._rng
        ids = EVENTS_SCHEMA.field_ids
        first_id = rng.randrange(10**12)
        start = datetime.combine(day, datetime.min.time())
        lower: dict[int, bytes] = {
            1: to_bytes(LongType(), first_id),
            2: to_bytes(TimestampType(), _micros(start + timedelta(seconds=rng.randrange(3600)))),
            3: to_bytes(LongType(), rng.randrange(1000)),
            10: to_bytes(DecimalType(12, 2), Decimal(rng.randrange(100, 500)).scaleb(-2)),
            11: to_bytes(IntegerType(), 1),
            12: to_bytes(DoubleType(), round(rng.uniform(0.01, 1.0), 3)),
            13: to_bytes(BooleanType(), False),
        }
        upper: dict[int, bytes] = {
            1: to_bytes(LongType(), first_id + records),
            2: to_bytes(TimestampType(), _micros(start + timedelta(seconds=82800 + rng.randrange(3600)))),
            3: to_bytes(LongType(), 10_000_000 - rng.randrange(1000)),
            10: to_bytes(DecimalType(12, 2), Decimal(rng.randrange(90_000, 99_999)).scaleb(-2)),
            11: to_bytes(IntegerType(), 10),
            12: to_bytes(DoubleType(), round(rng.uniform(1_000.0, 60_000.0), 3)),
            13: to_bytes(BooleanType(), True),
        }
        for field_id, (low, high) in self._STRING_BOUNDS.items():
            lower[field_id] = to_bytes(StringType(), low)
            upper[field_id] = to_bytes(StringType(), high)
        per_column = size // len(ids)
        return {
            "column_sizes": {
                i: per_column + rng.randrange(-per_column // 4, per_column // 4 + 1) for i in ids
            },
            "value_counts": dict.fromkeys(ids, records),
            "null_value_counts": {i: (0 if i in (1, 2) else rng.randrange(records // 10 + 1)) for i in ids},
            "nan_value_counts": {12: 0},
            "lower_bounds": lower,
            "upper_bounds": upper,
            "split_offsets": [4],
        }


def _micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1)) // timedelta(microseconds=1)


def _data_file_size(rng: random.Random) -> int:
    """60% fragments (≤ 16 MiB), 25% undersized segments (≤ 96 MiB), 15% segments, of a 128 MiB target."""
    draw = rng.random()
    if draw < 0.60:
        return rng.randrange(MiB // 2, 16 * MiB)
    if draw < 0.85:
        return rng.randrange(16 * MiB + 1, 96 * MiB)
    return rng.randrange(96 * MiB + 1, 140 * MiB)


def _make_file(
    content: DataFileContent, path: str, day_index: int, records: int, size: int, stats: dict[str, Any]
) -> DataFile:
    data_file = DataFile.from_args(
        content=content,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(day_index),
        record_count=records,
        file_size_in_bytes=size,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **stats,
    )
    data_file.spec_id = 0
    return data_file


def build_table(work_dir: Path, shape: Shape) -> dict[str, Any]:
    """Create the table and commit the synthesized files; return what was built and how long it took."""
    started = time.perf_counter()
    work_dir.mkdir(parents=True, exist_ok=True)
    catalog = _catalog(work_dir)
    catalog.create_namespace(NAMESPACE)
    table = catalog.create_table(
        TABLE, EVENTS_SCHEMA, partition_spec=EVENTS_SPEC, properties=TABLE_PROPERTIES
    )
    rng = random.Random(shape.seed)
    stats = _StatsMaker(rng)
    epoch_day = (FIRST_DAY - date(1970, 1, 1)).days
    data_root = f"{table.metadata.location.rstrip('/')}/data"
    data_by_partition: list[list[str]] = [[] for _ in range(shape.partitions)]
    data_files: list[DataFile] = []
    # Files are written in time order, so each commit covers a run of consecutive days.
    for n in range(shape.data_files):
        p = n * shape.partitions // shape.data_files
        day = FIRST_DAY + timedelta(days=p)
        path = f"{data_root}/ts_day={day.isoformat()}/{uuid.UUID(int=rng.getrandbits(128))}-{n:06d}.parquet"
        size = _data_file_size(rng)
        records = max(1, size // 40)
        data_files.append(
            _make_file(
                DataFileContent.DATA,
                path,
                epoch_day + p,
                records,
                size,
                stats.data_file_stats(records, size, day),
            )
        )
        data_by_partition[p].append(path)
    delete_files = [
        _position_delete(rng, data_root, data_by_partition, n, shape, epoch_day)
        for n in range(shape.delete_files)
    ]
    commits = 0
    for files in (data_files, delete_files):
        for start in range(0, len(files), FILES_PER_COMMIT):
            chunk = files[start : start + FILES_PER_COMMIT]
            if files is data_files:
                commit_row_delta(table, data_files=chunk)
            else:
                commit_row_delta(table, delete_files=chunk)
            commits += 1
    catalog.engine.dispose()
    return {**asdict(shape), "commits": commits, "build_seconds": time.perf_counter() - started}


def _position_delete(
    rng: random.Random,
    data_root: str,
    data_by_partition: list[list[str]],
    n: int,
    shape: Shape,
    epoch_day: int,
) -> DataFile:
    """The ``n``-th delete file: even ones target one data file, odd ones their whole partition.

    Only every other partition has delete files, so that automatic evaluation (minor:
    fragments only, where no delete applies) and full optimizing plan differently.
    """
    p = 2 * (n * max(1, shape.partitions // 2) // shape.delete_files)
    targets = data_by_partition[p] or [f"{data_root}/missing.parquet"]
    if n % 2 == 0:
        low = high = rng.choice(targets)
    else:
        low, high = min(targets), max(targets)
    day = FIRST_DAY + timedelta(days=p)
    records = rng.randrange(1, 5_000)
    size = 1_500 + records * 12
    path_id, pos_id = POS_DELETE_FILE_PATH_ID, POS_DELETE_POS_ID
    delete_stats = {
        "column_sizes": {path_id: size // 2, pos_id: size // 2},
        "value_counts": {path_id: records, pos_id: records},
        "null_value_counts": {path_id: 0, pos_id: 0},
        "nan_value_counts": {},
        "lower_bounds": {path_id: low.encode(), pos_id: to_bytes(LongType(), 0)},
        "upper_bounds": {path_id: high.encode(), pos_id: to_bytes(LongType(), rng.randrange(records, 10**6))},
        "split_offsets": [4],
    }
    path = (
        f"{data_root}/ts_day={day.isoformat()}/{uuid.UUID(int=rng.getrandbits(128))}-deletes-{n:06d}.parquet"
    )
    return _make_file(DataFileContent.POSITION_DELETES, path, epoch_day + p, records, size, delete_stats)


def _peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(work_dir: Path, engine: str, trace: bool, profile_path: Path | None) -> dict[str, Any]:
    """Load the table, then time one engine's planning; with ``trace`` record tracemalloc's peak."""
    started = time.perf_counter()
    catalog = _catalog(work_dir)
    table = catalog.load_table(TABLE)
    load_seconds = time.perf_counter() - started
    rss_before = _peak_rss_bytes()
    profiler = cProfile.Profile() if profile_path is not None else None
    if trace:
        tracemalloc.start()
    if profiler is not None:
        profiler.enable()
    cpu_started = time.process_time()
    result = _plan(table, engine)
    cpu_seconds = time.process_time() - cpu_started
    if profiler is not None:
        profiler.disable()
    traced_peak = tracemalloc.get_traced_memory()[1] if trace else None
    if trace:
        tracemalloc.stop()
    if profiler is not None and profile_path is not None:
        _write_profile(profiler, profile_path)
    return {
        "engine": engine,
        "load_seconds": load_seconds,
        "rss_before_bytes": rss_before,
        "peak_rss_bytes": _peak_rss_bytes(),
        "tracemalloc_peak_bytes": traced_peak,
        "cpu_seconds": cpu_seconds,
        **result,
    }


def _plan(table: Table, engine: str) -> dict[str, Any]:
    started = time.perf_counter()
    if engine == "pyiceberg":
        tasks = list(table.scan().plan_files())
        scanned_at = time.perf_counter()
        return {
            "scan_seconds": scanned_at - started,
            "plan_seconds": 0.0,
            "data_files": len(tasks),
            "delete_files": len({d.file_path for task in tasks for d in task.delete_files}),
            "tasks": len(tasks),
            "planned_files": len(tasks),
        }
    scanned = scan_table(table)
    scanned_at = time.perf_counter()
    history = optimizing_history(table.metadata)
    plan = plan_optimizing(
        scanned.files,
        OptimizingConfig(),
        now_s=time.time(),
        last_minor_s=history.last_minor_s,
        last_full_s=history.last_full_s,
        forced=OptimizingType.FULL if engine == "floe-full" else None,
    )
    planned_at = time.perf_counter()
    return {
        "scan_seconds": scanned_at - started,
        "plan_seconds": planned_at - scanned_at,
        "data_files": len(scanned.files.data_files),
        "delete_files": len(scanned.files.delete_files),
        "tasks": len(plan.tasks),
        "planned_files": sum(len(t.data_files) for t in plan.tasks),
    }


def _write_profile(profiler: cProfile.Profile, path: Path) -> None:
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(35)
    stats.sort_stats("tottime").print_stats(25)
    path.write_text(text.getvalue())


def _prepare(work_dir: Path, shape: Shape, script: Path) -> dict[str, Any]:
    """Build the table in a child process, or reuse the one a previous run built with the same shape."""
    marker = work_dir / "build.json"
    if marker.is_file():
        built: dict[str, Any] = json.loads(marker.read_text())
        wanted = {**asdict(shape), "synthesis": SYNTHESIS_VERSION}
        if all(built.get(k) == v for k, v in wanted.items()):
            print(f"reusing the table built in {work_dir}")
            return built
    if work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    shape_args = [str(shape.data_files), str(shape.delete_files), str(shape.partitions), str(shape.seed)]
    built = run_step(
        script, ["--step", "build", "--dir", str(work_dir), "--shape", *shape_args], work_dir, "build"
    )
    built["synthesis"] = SYNTHESIS_VERSION
    marker.write_text(json.dumps(built))
    return built


def _report(built: dict[str, Any], runs: dict[str, dict[str, Any]], command: str) -> str:
    rows = []
    for engine, run in runs.items():
        total = run["scan_seconds"] + run["plan_seconds"]
        rows.append(
            [
                engine,
                f"{run['load_seconds']:.2f}",
                f"{run['scan_seconds']:.2f}",
                f"{run['plan_seconds']:.2f}",
                " / ".join(f"{wall:.2f}" for wall in run["walls"]),
                f"{run['cpu_seconds']:.2f}",
                f"{run['rss_before_bytes'] / MiB:.0f}",
                f"**{run['peak_rss_bytes'] / MiB:.0f}**",
                f"{run['tracemalloc_peak_bytes'] / MiB:.0f}",
                f"{run['data_files']:,} / {run['delete_files']:,}",
                f"{run['tasks']:,} ({run['planned_files']:,})",
            ]
        )
    table = markdown_table(
        [
            "engine",
            "load s",
            "scan s",
            "plan s",
            "scan+plan s (each run)",
            "CPU s",
            "RSS before MiB",
            "peak RSS MiB",
            "tracemalloc peak MiB",
            "data / delete files",
            "tasks (data files in them)",
        ],
        rows,
    )
    floe = runs.get("floe")
    verdict = ""
    if floe is not None:
        total, cpu = floe["scan_seconds"] + floe["plan_seconds"], floe["cpu_seconds"]
        verdict = (
            f"\nTargets for floe (at scale 1): scan+plan < {TARGET_SECONDS:.0f} s: "
            f"{_verdict(total < TARGET_SECONDS)} by wall time ({total:.2f} s), "
            f"{_verdict(cpu < TARGET_SECONDS)} by CPU time ({cpu:.2f} s); peak RSS < 2 GiB: "
            f"{_verdict(floe['peak_rss_bytes'] < TARGET_BYTES)} ({floe['peak_rss_bytes'] / MiB:.0f} MiB).\n"
        )
    return (
        "### Planning at scale\n\n"
        f"Command: `{command}`  \n"
        f"Table: {built['data_files']:,} data files, {built['delete_files']:,} position delete files, "
        f"{built['partitions']:,} partitions, {built['commits']} commits (one manifest each); "
        f"built in {built['build_seconds']:.0f} s. Load average at the end: {load_average()}.\n\n"
        f"{table}\n{verdict}\n"
        "load = open the SQLite catalog and load the table metadata (not part of planning); "
        "scan = read the manifests into live files (pyiceberg: all of `plan_files`); "
        "plan = evaluate and bin-pack (floe only). CPU s = CPU time of the planning process in the fastest "
        "run (all its threads): planning is single-threaded under the GIL, so this is what scan+plan takes "
        "on an idle core. RSS before = peak RSS after imports and table load. "
        "Wall time and RSS come from one child process per engine and run (the fastest run's scan, plan and "
        "RSS are shown), tracemalloc's peak from another one.\n"
    )


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def main() -> int:
    """Parse arguments and run the benchmark, or one of its child steps."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply file and partition counts (default 1)"
    )
    parser.add_argument(
        "--dir", default="bench/.work/planning", help="work directory (table is reused if same shape)"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the synthesized metadata")
    parser.add_argument(
        "--engines", default=",".join(ENGINES), help=f"comma-separated, from {', '.join(ENGINES)}"
    )
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per engine; the fastest is kept")
    parser.add_argument(
        "--profile", action="store_true", help="also run each engine under cProfile, print the top"
    )
    parser.add_argument("--markdown", help="write the results section to this markdown file")
    parser.add_argument("--step", choices=("build", "measure"), help=argparse.SUPPRESS)
    parser.add_argument("--shape", nargs=4, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    work_dir = Path(args.dir).resolve()

    if args.step == "build":
        write_result(Path(args.result), build_table(work_dir, Shape(*args.shape)))
        return 0
    if args.step == "measure":
        profile_out = Path(args.profile_out) if args.profile_out else None
        write_result(Path(args.result), measure(work_dir, args.engine, args.trace, profile_out))
        return 0

    engines = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engine(s) {unknown}; choose from {', '.join(ENGINES)}")
    script = Path(__file__).resolve()
    shape = Shape.at_scale(args.scale, args.seed)
    built = _prepare(work_dir, shape, script)
    print(
        f"table: {built['data_files']:,} data files, {built['delete_files']:,} delete files, "
        f"{built['partitions']:,} partitions (built in {built['build_seconds']:.0f} s)"
    )
    runs: dict[str, dict[str, Any]] = {}
    base = ["--step", "measure", "--dir", str(work_dir)]
    for engine in engines:
        attempts = [
            run_step(script, [*base, "--engine", engine], work_dir, f"measure-{engine}-{n}")
            for n in range(args.repeat)
        ]
        # The fastest attempt is the one least disturbed by other work on the machine.
        timed = min(attempts, key=lambda run: float(run["scan_seconds"] + run["plan_seconds"]))
        timed["walls"] = [run["scan_seconds"] + run["plan_seconds"] for run in attempts]
        traced = run_step(script, [*base, "--engine", engine, "--trace"], work_dir, f"trace-{engine}")
        runs[engine] = {**timed, "tracemalloc_peak_bytes": traced["tracemalloc_peak_bytes"]}
        print(
            f"{engine}: scan {timed['scan_seconds']:.2f} s, plan {timed['plan_seconds']:.2f} s, "
            f"peak RSS {timed['peak_rss_bytes'] / MiB:.0f} MiB, "
            f"tracemalloc peak {traced['tracemalloc_peak_bytes'] / MiB:.0f} MiB"
        )
        if args.profile:
            profile_path = work_dir / "logs" / f"profile-{engine}.txt"
            run_step(
                script,
                [*base, "--engine", engine, "--profile-out", str(profile_path)],
                work_dir,
                f"profile-{engine}",
            )
            print(f"cProfile of {engine} in {profile_path}:\n{profile_path.read_text()}")
    command = " ".join(["python", "bench/planning_scale.py", *sys.argv[1:]])
    section = _report(built, runs, command)
    print(section)
    if args.markdown:
        Path(args.markdown).write_text(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
