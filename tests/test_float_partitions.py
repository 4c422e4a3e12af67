"""Partitions on a double column as Iceberg Java tells them apart: every NaN is one partition, and
0.0 and -0.0 are two (Java compares partition values with ``Comparators``, that is
``Double.compare``; Python's ``==`` says the opposite of both).

A table written by Spark with NaN, 0.0, -0.0 and 1.5 partitions, position deletes (Spark's
merge-on-read DELETE) and equality deletes in them: planning, optimizing, dangling-delete removal
and data retention keep exactly the rows Iceberg Java reads.
"""

from __future__ import annotations

import math
from collections import Counter

import pyarrow as pa
import pytest
from conftest import JAN_1
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyspark.sql import SparkSession
from test_correctness import CONFIG

from floe.commit.row_delta import commit_row_delta
from floe.local.optimize import optimize_once, plan_table
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.maintenance.dangling import remove_dangling_deletes
from floe.maintenance.retention import expire_rows
from floe.planning.plan import OptimizingType
from floe.tables.scan import scan_table
from floe.tables.writer import write_equality_deletes

PARTITIONS = {value: f"CAST('{value}' AS DOUBLE)" for value in ("NaN", "0.0", "-0.0", "1.5")}
"""Each partition's value, and the Spark SQL that makes it."""
ROWS_PER_FILE = 20
FILES_PER_PARTITION = 2


def _first_id(partition: str) -> int:
    return 100 * list(PARTITIONS).index(partition)


def _rows(reference: ReferenceReader, catalog: SqlCatalog) -> Counter[tuple[int, str, int]]:
    """The rows Iceberg Java reads, the double as Spark prints it (NaN, -0.0 and 0.0 apart)."""
    name = qualified_name(catalog.name, "db.t")
    query = f"SELECT id, CAST(v AS STRING), CAST(unix_seconds(ts) AS BIGINT) FROM {name}"
    return Counter((row[0], row[1], row[2]) for row in reference.sql(query))


def _equality_delete(table: Table, ids: list[int], partition: float) -> None:
    deletes = write_equality_deletes(
        table, pa.table({"id": pa.array(ids, pa.int64())}), ["id"], 0, Record(partition)
    )
    commit_row_delta(table, delete_files=[deletes])


@pytest.fixture
def float_table(sql_catalog: SqlCatalog, spark: SparkSession, reference: ReferenceReader) -> Table:
    """``db.t`` partitioned by a double ``v``, each partition two files of 20 rows (``ts`` of row
    ``id`` is `JAN_1` + id % 100 hours); position and equality deletes in the NaN and -0.0
    partitions, and one in -0.0 naming a row of 0.0."""
    name = qualified_name(sql_catalog.name, "db.t")
    spark.sql(
        f"CREATE TABLE {name} (id bigint, v double, ts timestamp) USING iceberg PARTITIONED BY (v) "
        "TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read')"
    )
    for partition, value in PARTITIONS.items():
        for batch in range(FILES_PER_PARTITION):
            start = _first_id(partition) + ROWS_PER_FILE * batch
            spark.sql(
                f"INSERT INTO {name} SELECT id, {value}, timestamp_seconds({JAN_1} + (id % 100) * 3600) "
                f"FROM range({start}, {start + ROWS_PER_FILE})"
            )
    nan, zero, negative_zero = _first_id("NaN"), _first_id("0.0"), _first_id("-0.0")
    spark.sql(f"DELETE FROM {name} WHERE id IN ({nan + 3}, {nan + 23}, {negative_zero + 5})")
    table = sql_catalog.load_table("db.t")
    _equality_delete(table, [nan + 4, nan + 24], float("nan"))
    _equality_delete(table, [negative_zero + 6], -0.0)
    # In Java's eyes this deletes nothing: row zero + 7 is in partition 0.0, not -0.0.
    _equality_delete(table, [zero + 7], -0.0)
    table.refresh()
    rows = _rows(reference, sql_catalog)
    assert len(rows) == len(PARTITIONS) * FILES_PER_PARTITION * ROWS_PER_FILE - 6, rows
    assert (zero + 7, "0.0", JAN_1 + 7 * 3600) in rows
    assert (negative_zero + 7, "-0.0", JAN_1 + 7 * 3600) in rows
    return table


def _partition_names(table: Table) -> list[str]:
    """The partitions of the live data files, each once, as Java separates them."""
    keys = {f.partition for f in scan_table(table).files.data_files}
    return sorted(str(key.values[0]) for key in keys)


def test_deletes_in_nan_and_negative_zero_partitions_apply_and_stay(
    float_table: Table, sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    before = _rows(reference, sql_catalog)
    # Every delete file applies to a live data file of its own partition: none is dangling.
    report = remove_dangling_deletes(float_table)
    assert report.files_removed == 0, report
    assert _rows(reference, sql_catalog) == before

    float_table.refresh()
    assert _partition_names(float_table) == ["-0.0", "0.0", "1.5", "nan"]
    _, plan = plan_table(float_table, CONFIG, OptimizingType.FULL)
    tasks = {str(task.partition.values[0]): task for task in plan.tasks}
    assert sorted(tasks) == ["-0.0", "0.0", "1.5", "nan"], plan.tasks
    # The NaN partition's task applies its position deletes and both equality deletes.
    assert len(tasks["nan"].data_files) == FILES_PER_PARTITION and len(tasks["nan"].delete_files) == 3
    assert len(tasks["0.0"].delete_files) == 0


def test_optimizing_keeps_nan_and_negative_zero_partitions_and_their_rows(
    float_table: Table, sql_catalog: SqlCatalog, reference: ReferenceReader, spark: SparkSession
) -> None:
    before = _rows(reference, sql_catalog)
    result = optimize_once(float_table, "db.t", CONFIG, spark=lambda: spark, forced=OptimizingType.FULL)
    assert result.commit is not None and not result.task_errors
    float_table.refresh()
    assert _rows(reference, sql_catalog) == before
    assert _partition_names(float_table) == ["-0.0", "0.0", "1.5", "nan"]
    by_sign = {
        math.copysign(1.0, f.partition.values[0])
        for f in scan_table(float_table).files.data_files
        if f.partition.values[0] == 0.0
    }
    assert by_sign == {1.0, -1.0}, "0.0 and -0.0 each keep their own files"


def test_retention_deletes_in_each_float_partition_of_its_own(
    float_table: Table, sql_catalog: SqlCatalog, reference: ReferenceReader
) -> None:
    before = _rows(reference, sql_catalog)
    cutoff = JAN_1 + 30 * 3600
    # Each partition's first file expires whole; its second straddles the cutoff.
    report = expire_rows(float_table, column="ts", older_than_s=86_400, now_s=cutoff + 86_400)
    assert report.snapshot_id is not None and report.files_with_row_deletes == len(PARTITIONS), report
    assert _rows(reference, sql_catalog) == Counter({row: n for row, n in before.items() if row[2] >= cutoff})
    float_table.refresh()
    deletes = scan_table(float_table).files.delete_files
    zeros = [d.partition.values[0] for d in deletes if d.partition.values[0] == 0]
    assert {math.copysign(1.0, value) for value in zeros} == {1.0, -1.0}, "a delete file in each of 0.0, -0.0"
