"""An events table of Iceberg metadata only, for the planning benchmark: the files it names do not exist.

Planning reads nothing but metadata, so the table is built as real manifests in a pyiceberg
SQLite catalog, every entry carrying the column statistics a real writer records (sizes,
value / null / NaN counts, lower and upper bounds of all 13 columns). Data file sizes
mix fragments (60%), undersized segments (25%) and segments (15%) of the 128 MiB target.
Delete files are in every other partition; half are file-scoped (their ``file_path``
bounds name one data file, as Iceberg 1.10 writes them), half partition-scoped. They are
position deletes only because pyiceberg's ``plan_files`` refuses equality deletes.
"""

from __future__ import annotations

import json
import random
import shutil
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
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
from floe.tables.writer import POS_DELETE_FILE_PATH_ID, POS_DELETE_POS_ID
from harness import MiB
from harness.events import EVENTS_SCHEMA, EVENTS_SPEC, NAMESPACE, TABLE_PROPERTIES, epoch_micros
from harness.steps import run_step
from harness.warehouse import sql_catalog_properties

CATALOG_NAME = "bench"
TABLE = f"{NAMESPACE}.planning"
FULL_DATA_FILES = 100_000
FULL_DELETE_FILES = 20_000
FULL_PARTITIONS = 1_000
FILES_PER_COMMIT = 5_000
FIRST_DAY = date(2022, 1, 1)
SYNTHESIS_VERSION = 2
"""Bumped whenever the synthesized metadata changes, so that an older table is not reused."""


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


def catalog(work_dir: Path) -> SqlCatalog:
    """The catalog of the table synthesized in ``work_dir``."""
    return SqlCatalog(CATALOG_NAME, **sql_catalog_properties(work_dir / "catalog.db", work_dir / "warehouse"))


def reuse_or_build(work_dir: Path, shape: Shape, script: Path) -> dict[str, Any]:
    """Build the table with ``script --step build`` in a child process, or reuse the one a previous
    run built with the same shape; what was built, and how long it took."""
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


def build_table(work_dir: Path, shape: Shape) -> dict[str, Any]:
    """Create the table and commit the synthesized files; return what was built and how long it took."""
    started = time.perf_counter()
    work_dir.mkdir(parents=True, exist_ok=True)
    events = catalog(work_dir)
    events.create_namespace(NAMESPACE)
    table = events.create_table(TABLE, EVENTS_SCHEMA, partition_spec=EVENTS_SPEC, properties=TABLE_PROPERTIES)
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
    events.engine.dispose()
    return {**asdict(shape), "commits": commits, "build_seconds": time.perf_counter() - started}


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
        """The statistics of a data file of ``records`` rows and ``size`` bytes written on ``day``."""
        rng = self._rng
        ids = EVENTS_SCHEMA.field_ids
        first_id = rng.randrange(10**12)
        start = datetime.combine(day, datetime.min.time())
        lower: dict[int, bytes] = {
            1: to_bytes(LongType(), first_id),
            2: to_bytes(TimestampType(), epoch_micros(start + timedelta(seconds=rng.randrange(3600)))),
            3: to_bytes(LongType(), rng.randrange(1000)),
            10: to_bytes(DecimalType(12, 2), Decimal(rng.randrange(100, 500)).scaleb(-2)),
            11: to_bytes(IntegerType(), 1),
            12: to_bytes(DoubleType(), round(rng.uniform(0.01, 1.0), 3)),
            13: to_bytes(BooleanType(), False),
        }
        upper: dict[int, bytes] = {
            1: to_bytes(LongType(), first_id + records),
            2: to_bytes(
                TimestampType(), epoch_micros(start + timedelta(seconds=82800 + rng.randrange(3600)))
            ),
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
