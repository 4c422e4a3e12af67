"""Row lineage (format v3): a rewrite keeps each row's ``_row_id`` and ``_last_updated_sequence_number``.

A v3 data file may store the two columns or leave them null (or out); a null ``_row_id`` is the
file's ``first_row_id`` plus the row's position, a null ``_last_updated_sequence_number`` the
file's data sequence number. A compaction moves rows to new positions in new files, so, as the
spec requires, it writes both values explicitly for every row; the new files' own
``first_row_id`` then names ids no row uses.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

ROW_ID = NestedField(2147483540, "_row_id", LongType(), required=False)
LAST_UPDATED_SEQUENCE_NUMBER = NestedField(
    2147483539, "_last_updated_sequence_number", LongType(), required=False
)


def with_lineage(schema: Schema) -> Schema:
    """`schema` with the two lineage columns after its own."""
    return Schema(
        *schema.fields,
        ROW_ID,
        LAST_UPDATED_SEQUENCE_NUMBER,
        schema_id=schema.schema_id,
        identifier_field_ids=schema.identifier_field_ids,
    )


def fill_lineage(
    batch: pa.RecordBatch, first_position: int, first_row_id: int | None, data_sequence_number: int
) -> pa.RecordBatch:
    """`batch` (rows of one file from `first_position` on, read as `with_lineage`) with the lineage
    its file leaves to inheritance written out. Without a `first_row_id` (a file from before the
    table's upgrade to v3) a null ``_row_id`` stays null: the row never had an id."""
    row_ids = batch.column(ROW_ID.name)
    sequence_numbers = batch.column(LAST_UPDATED_SEQUENCE_NUMBER.name)
    if row_ids.null_count and first_row_id is not None:
        start = first_row_id + first_position
        inherited = pa.array(np.arange(start, start + batch.num_rows, dtype=np.int64))
        row_ids = pc.coalesce(row_ids, inherited)
    if sequence_numbers.null_count:
        sequence_numbers = pc.coalesce(sequence_numbers, pa.scalar(data_sequence_number, pa.int64()))
    batch = batch.set_column(
        batch.schema.get_field_index(ROW_ID.name), batch.schema.field(ROW_ID.name), row_ids
    )
    index = batch.schema.get_field_index(LAST_UPDATED_SEQUENCE_NUMBER.name)
    return batch.set_column(index, batch.schema.field(index), sequence_numbers)
