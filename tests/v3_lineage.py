"""Row lineage of the v3 test table ``db.t`` as Iceberg Java reads it, and a MERGE after floe."""

from __future__ import annotations

from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from floe.local.reference_reader import qualified_name

Row = tuple[Any, ...]


def lineage(spark: SparkSession, catalog: SqlCatalog) -> list[Row]:
    """Every row of ``db.t`` (id first) with its ``_row_id`` and ``_last_updated_sequence_number``
    last, ordered by id."""
    name = qualified_name(catalog.name, "db.t")
    spark.sql(f"REFRESH TABLE {name}")
    query = f"SELECT *, _row_id, _last_updated_sequence_number FROM {name} ORDER BY id"
    return [tuple(r) for r in spark.sql(query).collect()]


def merge_keeps_lineage(spark: SparkSession, catalog: SqlCatalog, before: list[Row]) -> list[int]:
    """Spark MERGEs rows 390..409 into ``db.t`` (``v`` doubled where they exist, inserted where
    not) and the result must read right: untouched rows as `before`, updated rows with their
    row ids, inserted rows with ids no row had. Returns the inserted rows' ids."""
    name = qualified_name(catalog.name, "db.t")
    spark.sql(
        f"MERGE INTO {name} t USING (SELECT id, CAST(id % 2 AS string) AS cat, id * 2.0 AS v "
        f"FROM range(390, 410)) s ON t.id = s.id "
        f"WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    )
    old = {row[0]: row for row in before}
    after = {row[0]: row for row in lineage(spark, catalog)}
    inserted = sorted(set(range(390, 410)) - set(old))
    assert set(after) == set(old) | set(inserted) and inserted
    assert all(after[i][2] == i * 2.0 for i in range(390, 410))
    assert all(after[i] == old[i] for i in old if i < 390), "untouched rows keep their lineage"
    assert all(after[i][-2] == old[i][-2] for i in old), "updated rows keep their row id"
    new_ids = [after[i][-2] for i in inserted]
    assert len(set(new_ids)) == len(inserted) and set(new_ids).isdisjoint(r[-2] for r in before)
    return new_ids
