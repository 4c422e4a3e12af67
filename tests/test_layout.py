"""Output row order: tables with a sort order, and z-order clustering.

The unit tests check the order `OrderedRows` and `zorder_codes` produce against orders
computed in plain Python. The table tests optimize real tables whose files all overlap
(random values) and measure how much the output files' [min, max] ranges still overlap,
check the rows through Iceberg's Java reader and the files' sort order id in manifests.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, TruncateTransform
from pyiceberg.types import DoubleType, ListType, LongType, NestedField, StringType, TimestampType
from pyspark.sql import SparkSession
from test_correctness import MOR, rows_at

from floe.api.table import ClusteringSpec
from floe.commit.row_delta import commit_row_delta
from floe.local.optimize import optimize_once
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.optimizing.specs import output_order
from floe.planning.config import MiB, OptimizingConfig
from floe.planning.plan import OptimizingType
from floe.protocol.rewrite_task import OutputOrder, RewriteTaskSpec
from floe.rewrite.layout import OrderedRows, zorder_codes
from floe.tables.writer import conform, write_equality_deletes_by_partition

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "x", LongType(), required=False),
    NestedField(3, "y", DoubleType(), required=False),
    NestedField(4, "s", StringType(), required=False),
    NestedField(5, "ts", TimestampType(), required=False),
)
# One task (bins of 8 MiB) written into many small files, so the files' ranges can be compared.
CONFIG = OptimizingConfig(target_size=24 * 1024, max_task_size_bytes=8 * MiB)
ZORDER = ClusteringSpec.model_validate({"strategy": "zorder", "columns": ["x", "y"]})


def random_rows(rng: random.Random, first_id: int, count: int) -> pa.Table:
    """Rows whose x, y, s and ts are uniform over their whole range, so every file spans it all."""

    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.02 else value

    ids = range(first_id, first_id + count)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array([maybe(rng.randrange(-(10**9), 10**9)) for _ in ids], pa.int64()),
            "y": pa.array([maybe(rng.uniform(-1e6, 1e6)) for _ in ids], pa.float64()),
            "s": pa.array([maybe(f"key-{rng.randrange(10**7):07d}") for _ in ids], pa.string()),
            "ts": pa.array(
                [maybe(datetime(2024, 1, 1) + timedelta(seconds=rng.randrange(86400 * 60))) for _ in ids],
                pa.timestamp("us"),
            ),
        }
    )


def random_table(
    catalog: SqlCatalog, sort_order: SortOrder | None = None, partition: PartitionSpec | None = None
) -> Table:
    """Six appended files of random rows, all spanning the same ranges."""
    extra: dict[str, Any] = {"sort_order": sort_order} if sort_order is not None else {}
    table = catalog.create_table(
        "db.t", SCHEMA, partition_spec=partition or PartitionSpec(), properties=MOR, **extra
    )
    rng = random.Random(11)
    for chunk in range(6):
        table.append(conform(table, random_rows(rng, chunk * 2500, 2500)))
    return table


def live_data_files(table: Table) -> list[DataFile]:
    """The data files of the current snapshot, read from its manifests (pyiceberg's scan rejects
    tables with equality deletes)."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [
        entry.data_file
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
        if entry.data_file.content == DataFileContent.DATA
    ]


def file_ranges(table: Table, column: str) -> list[tuple[Any, Any]]:
    """[lower, upper] bound on `column` of every live data file (files with only nulls left out)."""
    field = table.schema().find_field(column)
    ranges = []
    for data_file in live_data_files(table):
        lower = (data_file.lower_bounds or {}).get(field.field_id)
        upper = (data_file.upper_bounds or {}).get(field.field_id)
        if lower is not None and upper is not None:
            ranges.append((from_bytes(field.field_type, lower), from_bytes(field.field_type, upper)))
    return ranges


def overlap(ranges: list[tuple[Any, Any]]) -> tuple[float, float]:
    """(average number of other files a file's range intersects, fraction of file pairs that intersect)."""
    count = len(ranges)
    if count < 2:
        return 0.0, 0.0
    pairs = sum(
        1
        for i in range(count)
        for j in range(i + 1, count)
        if ranges[i][0] <= ranges[j][1] and ranges[j][0] <= ranges[i][1]
    )
    return 2 * pairs / count, pairs / (count * (count - 1) / 2)


def add_deletes(table: Table, catalog: SqlCatalog, reference: ReferenceReader) -> None:
    """Position deletes through Iceberg Java and an equality delete through floe's writer."""
    reference.sql(f"DELETE FROM {qualified_name(catalog.name, 'db.t')} WHERE id % 7 = 3")
    table.refresh()
    doomed = pa.table({"id": pa.array(range(0, 15000, 11), pa.int64())})
    commit_row_delta(table, delete_files=write_equality_deletes_by_partition(table, doomed, ["id"]))


def optimize(table: Table, spark: SparkSession, clustering: ClusteringSpec | None = None) -> None:
    result = optimize_once(
        table, "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.FULL, clustering=clustering
    )
    assert result.commit is not None and not result.task_errors


def written_files_in_order(table: Table) -> list[pa.Table]:
    """The live files' rows, files in the order the task wrote them (their names end in a counter)."""
    paths = sorted(f.file_path for f in live_data_files(table))
    return [pq.read_table(path.removeprefix("file://")) for path in paths]


def report(
    label: str, before: tuple[float, float], after: tuple[float, float], files: tuple[int, int]
) -> str:
    text = (
        f"{label}: {files[0]} input files overlap {before[0]:.2f} others on average "
        f"({before[1]:.0%} of pairs); {files[1]} output files overlap {after[0]:.2f} ({after[1]:.0%})"
    )
    print(text)
    return text


# -- unit tests of the ordering ------------------------------------------------------------


def _ordered(rows: pa.Table, order: OutputOrder, schema: Schema) -> pa.Table:
    out: list[pa.RecordBatch] = []
    buffer = OrderedRows(order, schema, out.append)
    for batch in rows.to_batches(max_chunksize=97):
        buffer.add(batch)
    buffer.flush()
    return pa.Table.from_batches(out, schema=rows.schema)


def _null_key(value: Any, ascending: bool, nulls_first: bool) -> tuple[Any, ...]:
    """A Python sort key of one Iceberg sort field (NaN above every number)."""
    if value is None:
        return (0 if nulls_first else 2,)
    nan = isinstance(value, float) and math.isnan(value)
    magnitude = 0.0 if nan else value
    if not ascending:
        return (1, 0 if nan else 1, _Reversed(magnitude))
    return (1, 1 if nan else 0, magnitude)


class _Reversed:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: _Reversed) -> bool:
        return bool(self.value > other.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and self.value == other.value

    __hash__ = None  # type: ignore[assignment]


def test_sort_order_with_transforms_directions_and_null_orders() -> None:
    rng = random.Random(3)
    count = 2000
    rows = pa.table(
        {
            "id": pa.array(range(count), pa.int64()),
            "x": pa.array([rng.choice([None, rng.randrange(-50, 50)]) for _ in range(count)], pa.int64()),
            "y": pa.array(
                [rng.choice([None, math.nan, -0.5, rng.uniform(-5, 5)]) for _ in range(count)], pa.float64()
            ),
            "s": pa.array([rng.choice([None, f"k{rng.randrange(300)}"]) for _ in range(count)], pa.string()),
            "ts": pa.array(
                [datetime(2024, 1, 1) + timedelta(hours=rng.randrange(24 * 10)) for _ in range(count)],
                pa.timestamp("us"),
            ),
        }
    )
    fields = [
        (
            SortField(source_id=5, transform=DayTransform(), direction=SortDirection.DESC),
            lambda r: r["ts"].date(),
        ),
        (
            SortField(source_id=4, transform=TruncateTransform(2), null_order=NullOrder.NULLS_LAST),
            lambda r: None if r["s"] is None else r["s"][:2],
        ),
        (
            SortField(
                source_id=2,
                transform=BucketTransform(4),
                direction=SortDirection.DESC,
                null_order=NullOrder.NULLS_FIRST,
            ),
            lambda r: None if r["x"] is None else BucketTransform(4).transform(LongType())(r["x"]),
        ),
        (
            SortField(source_id=3, transform=IdentityTransform(), null_order=NullOrder.NULLS_LAST),
            lambda r: r["y"],
        ),
    ]
    sort_order = SortOrder(*(f for f, _ in fields), order_id=4)
    ordered = _ordered(rows, OutputOrder(sort_order_json=sort_order.model_dump_json()), SCHEMA)

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(
            _null_key(value(row), f.direction == SortDirection.ASC, f.null_order == NullOrder.NULLS_FIRST)
            for f, value in fields
        )

    # Python's sort is stable too, so even rows equal on every key come out alike.
    expected = sorted(rows.to_pylist(), key=key)
    assert ordered.column("id").to_pylist() == [r["id"] for r in expected]


def test_zorder_codes_preserve_each_columns_order() -> None:
    columns: list[tuple[pa.Array, list[Any]]] = []
    longs = [-(2**63), -5, -1, 0, 1, 7, 2**62, 2**63 - 1]
    columns.append((pa.array(longs, pa.int64()), longs))
    doubles = [-math.inf, -1e300, -2.5, -0.0, 1e-300, 3.0, math.inf]
    columns.append((pa.array(doubles, pa.float64()), doubles))
    days = [date(1900, 1, 1), date(1969, 12, 31), date(1970, 1, 1), date(2024, 2, 29)]
    columns.append((pa.array(days, pa.date32()), days))
    stamps = [datetime(1960, 1, 1), datetime(2024, 1, 1), datetime(2024, 1, 1, 0, 0, 1)]
    columns.append((pa.array(stamps, pa.timestamp("us")), stamps))
    # A long common prefix: the bytes after it decide.
    words = ["customer-000000", "customer-000001", "customer-0000010", "customer-1", "customer-9z"]
    columns.append((pa.array(words, pa.string()), words))
    for array, values in columns:
        codes = zorder_codes([array]).tolist()
        assert codes == sorted(codes), values
        assert len(set(codes)) == len(codes), values


def test_zorder_codes_interleave_two_columns_into_the_z_curve() -> None:
    xs = [x for x in range(4) for _ in range(4)]
    ys = [y for _ in range(4) for y in range(4)]
    codes = zorder_codes([pa.array(xs, pa.int64()), pa.array(ys, pa.int32())])
    # Ranks of the cells (x, y) along the curve: 2x2 quadrants, each a Z, x the major bit.
    ranked = sorted(range(16), key=lambda i: int(codes[i]))
    assert [(xs[i], ys[i]) for i in ranked[:8]] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        (0, 2),
        (0, 3),
        (1, 2),
        (1, 3),
    ]
    # Nulls take the smallest value of their column.
    with_null = zorder_codes([pa.array([None, 0, 3], pa.int64()), pa.array([0, 0, 0], pa.int64())])
    assert with_null[0] == with_null[1] < with_null[2]


def test_planning_rejects_unknown_or_nested_clustering_columns(sql_catalog: SqlCatalog) -> None:
    schema = Schema(*SCHEMA.fields, NestedField(6, "tags", ListType(7, StringType()), required=False))
    table = sql_catalog.create_table("db.nested", schema)
    with pytest.raises(ValueError, match="clustering column 'nope' is not a column"):
        output_order(
            table.metadata, ClusteringSpec.model_validate({"strategy": "zorder", "columns": ["x", "nope"]})
        )
    with pytest.raises(ValueError, match="clustering column 'tags'"):
        output_order(
            table.metadata, ClusteringSpec.model_validate({"strategy": "zorder", "columns": ["tags"]})
        )
    assert output_order(table.metadata, None) is None
    assert output_order(table.metadata, ZORDER) == OutputOrder(zorder_field_ids=[2, 3])


def test_a_task_spec_without_an_order_serializes_as_before() -> None:
    spec = RewriteTaskSpec(
        task_id="t",
        io_properties={},
        table_schema_json=SCHEMA.model_dump_json(),
        partition_spec_json=PartitionSpec().model_dump_json(),
        output_dir="file:///tmp/out",
        data_files=[],
        target_file_size_bytes=1,
        delete_memory_limit_bytes=1,
        file_name_prefix="p",
    )
    assert "output_order" not in spec.model_dump_json()
    ordered = spec.model_copy(update={"output_order": OutputOrder(zorder_field_ids=[2])})
    assert RewriteTaskSpec.model_validate_json(ordered.model_dump_json()) == ordered
    with pytest.raises(ValueError, match="either sort_order_json or zorder_field_ids"):
        OutputOrder()


# -- real tables -----------------------------------------------------------------------------


def _sorted_by_x(tables: list[pa.Table]) -> bool:
    """Whether the files' x values, read in write order, are ascending with nulls first."""
    values = [v for t in tables for v in t.column("x").to_pylist()]
    key: Callable[[Any], tuple[int, int]] = lambda v: (0, 0) if v is None else (1, v)  # noqa: E731
    return all(key(a) <= key(b) for a, b in itertools.pairwise(values))


def test_sort_order_narrows_file_ranges_and_keeps_rows(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    sort_order = SortOrder(SortField(source_id=2, transform=IdentityTransform()))
    table = random_table(sql_catalog, sort_order)
    add_deletes(table, sql_catalog, reference)
    start = table.current_snapshot()
    assert start is not None
    before = file_ranges(table, "x")
    optimize(table, spark)
    after = file_ranges(table, "x")
    message = report("sort order on x", overlap(before), overlap(after), (len(before), len(after)))
    assert overlap(before)[1] == 1.0 and overlap(after)[1] <= 0.05 and len(after) >= 8, message

    assert rows_at(reference, sql_catalog) == rows_at(reference, sql_catalog, start.snapshot_id)
    order_id = table.sort_order().order_id
    assert order_id == 1
    assert {f.sort_order_id for f in live_data_files(table)} == {order_id}
    files_table = f"{qualified_name(sql_catalog.name, 'db.t')}.files"
    assert set(reference.sql(f"SELECT DISTINCT sort_order_id FROM {files_table}")) == {(order_id,)}
    assert _sorted_by_x(written_files_in_order(table))


def test_sort_order_within_each_partition(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    sort_order = SortOrder(
        SortField(
            source_id=4,
            transform=IdentityTransform(),
            direction=SortDirection.DESC,
            null_order=NullOrder.NULLS_LAST,
        )
    )
    partition = PartitionSpec(PartitionField(1, 1000, BucketTransform(2), "id_bucket"))
    table = random_table(sql_catalog, sort_order, partition)
    add_deletes(table, sql_catalog, reference)
    start = table.current_snapshot()
    assert start is not None
    optimize(table, spark)
    assert rows_at(reference, sql_catalog) == rows_at(reference, sql_catalog, start.snapshot_id)
    by_partition: dict[Any, list[str]] = {}
    for data_file in live_data_files(table):
        assert data_file.sort_order_id == 1
        by_partition.setdefault(data_file.partition[0], []).append(data_file.file_path)
    assert len(by_partition) == 2
    for paths in by_partition.values():
        values = [
            v for p in sorted(paths) for v in pq.read_table(p.removeprefix("file://")).column("s").to_pylist()
        ]
        present = [v for v in values if v is not None]
        assert present == sorted(present, reverse=True)
        assert values[len(present) :] == [None] * (len(values) - len(present))


def test_zorder_narrows_both_columns_and_keeps_rows(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    # The table's sort order is replaced by the clustering.
    table = random_table(sql_catalog, SortOrder(SortField(source_id=4, transform=IdentityTransform())))
    add_deletes(table, sql_catalog, reference)
    start = table.current_snapshot()
    assert start is not None
    before = {column: file_ranges(table, column) for column in ("x", "y")}
    optimize(table, spark, ZORDER)
    after = {column: file_ranges(table, column) for column in ("x", "y")}
    messages = [
        report(
            f"z-order on x, y: column {c}",
            overlap(before[c]),
            overlap(after[c]),
            (len(before[c]), len(after[c])),
        )
        for c in ("x", "y")
    ]
    # The files are not equally many before and after, so the fraction of intersecting
    # pairs is what compares. Z-order spreads the order over both columns: each keeps
    # about half its pairs disjoint, where the sort order keeps all of one column's.
    for column in ("x", "y"):
        assert overlap(before[column])[1] == 1.0, messages
        assert overlap(after[column])[1] <= 0.6, messages
    assert rows_at(reference, sql_catalog) == rows_at(reference, sql_catalog, start.snapshot_id)
    assert {f.sort_order_id for f in live_data_files(table)} == {0}


def test_unknown_clustering_column_fails_planning(
    sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    table = random_table(sql_catalog)
    add_deletes(table, sql_catalog, reference)
    snapshots = len(table.snapshots())
    clustering = ClusteringSpec.model_validate({"strategy": "zorder", "columns": ["x", "missing"]})
    with pytest.raises(ValueError, match="'missing'"):
        optimize_once(
            table, "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.FULL, clustering=clustering
        )
    assert len(table.snapshots()) == snapshots
