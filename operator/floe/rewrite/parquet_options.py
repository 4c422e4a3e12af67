"""How a task writes Parquet: the table's ``write.parquet.*`` and ``write.metadata.metrics.*``
properties first, then floe's defaults.

A property the table does not set leaves floe's default in place (pyarrow's, for page and
dictionary sizes and the codec's level); column encodings are floe's own choice either way
(`floe.rewrite.encodings`). Bad values are refused when the process is planned
(`InvalidTableProperty` names the property), never in the middle of a task.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.io.pyarrow import compute_statistics_plan, parquet_path_to_id_mapping
from pyiceberg.schema import Schema, sanitize_column_names

from floe.api.table_properties import InvalidTableProperty, integer_property

COMPRESSION_CODEC = "write.parquet.compression-codec"
COMPRESSION_LEVEL = "write.parquet.compression-level"
ROW_GROUP_SIZE_BYTES = "write.parquet.row-group-size-bytes"
PAGE_SIZE_BYTES = "write.parquet.page-size-bytes"
PAGE_ROW_LIMIT = "write.parquet.page-row-limit"
DICT_SIZE_BYTES = "write.parquet.dict-size-bytes"
BLOOM_FILTER_ENABLED = "write.parquet.bloom-filter-enabled.column."
BLOOM_FILTER_FPP = "write.parquet.bloom-filter-fpp.column."
BLOOM_FILTER_MAX_BYTES = "write.parquet.bloom-filter-max-bytes"
METRICS_PREFIX = "write.metadata.metrics."
_PREFIXES = ("write.parquet.", METRICS_PREFIX)

DEFAULT_CODEC = "zstd"
DEFAULT_ROW_GROUP_BYTES = 128 * 1024 * 1024
"""Iceberg's default ``write.parquet.row-group-size-bytes``."""
DEFAULT_PAGE_ROWS = 20_000
"""pyarrow's (and Iceberg's) rows-per-page bound."""
# Iceberg's defaults for a bloom filter whose table gives no false-positive rate or size bound.
DEFAULT_BLOOM_FPP = 0.01
DEFAULT_BLOOM_MAX_BYTES = 1024 * 1024
_CODECS = {
    "zstd": "zstd",
    "gzip": "gzip",
    "snappy": "snappy",
    "lz4": "lz4",
    "brotli": "brotli",
    "uncompressed": "none",
}


def write_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The table properties that say how Parquet files are written: what a task needs of them."""
    return {k: v for k, v in properties.items() if k.startswith(_PREFIXES)}


def check_write_properties(properties: Mapping[str, str], schema: Schema) -> None:
    """Raise `InvalidTableProperty`, naming the property, when a table's write properties have a
    value a task could not apply."""
    ParquetOptions.from_properties(write_properties(properties), schema)


def metrics_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The ``write.metadata.metrics.*`` properties: which column metrics files report."""
    return {k: v for k, v in properties.items() if k.startswith(METRICS_PREFIX)}


def task_parquet_options(codec: str, properties: Mapping[str, str], table_schema: Schema) -> ParquetOptions:
    """A task's options: its codec (`RewriteTaskSpec.parquet_compression`, which drivers of every
    version send) and its table's write properties."""
    return ParquetOptions.from_properties({**properties, COMPRESSION_CODEC: codec}, table_schema)


@dataclass(frozen=True)
class ParquetOptions:
    """What a task's Parquet writer does, decided from the table's write properties."""

    compression: str = "zstd"
    """pyarrow's name of the codec."""
    compression_level: int | None = None
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    """Row groups close at about this many written bytes (or at the task's memory bound)."""
    page_bytes: int | None = None
    page_rows: int | None = None
    dictionary_page_bytes: int | None = None
    bloom_filters: dict[str, float] = field(default_factory=dict)
    """Parquet column path → false-positive probability of its bloom filter."""
    bloom_filter_max_bytes: int = DEFAULT_BLOOM_MAX_BYTES
    metrics_properties: dict[str, str] = field(default_factory=dict)
    """The ``write.metadata.metrics.*`` properties: which column statistics reach the manifests."""

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], schema: Schema) -> ParquetOptions:
        """Options for the table of `schema` (its own column names, not sanitized ones) from its
        properties; others than ``write.*`` are ignored."""
        codec = properties.get(COMPRESSION_CODEC, DEFAULT_CODEC).strip().lower()
        if codec not in _CODECS:
            raise InvalidTableProperty(
                f"table property {COMPRESSION_CODEC}={codec!r}: expected one of {', '.join(sorted(_CODECS))}"
            )
        metrics = metrics_properties(properties)
        try:
            compute_statistics_plan(schema, metrics)
        except ValueError as exc:
            raise InvalidTableProperty(f"table property {METRICS_PREFIX}*: {exc}") from exc
        return cls(
            compression=_CODECS[codec],
            compression_level=integer_property(properties, COMPRESSION_LEVEL, minimum=None),
            row_group_bytes=integer_property(properties, ROW_GROUP_SIZE_BYTES) or DEFAULT_ROW_GROUP_BYTES,
            page_bytes=integer_property(properties, PAGE_SIZE_BYTES),
            page_rows=integer_property(properties, PAGE_ROW_LIMIT),
            dictionary_page_bytes=integer_property(properties, DICT_SIZE_BYTES),
            bloom_filters=_bloom_filters(properties, schema),
            bloom_filter_max_bytes=(
                integer_property(properties, BLOOM_FILTER_MAX_BYTES) or DEFAULT_BLOOM_MAX_BYTES
            ),
            metrics_properties=metrics,
        )

    def writer_options(
        self, rows_per_row_group: int, columns: bool = True, widest_row_bytes: float = 0.0
    ) -> dict[str, Any]:
        """Keyword arguments of `pyarrow.parquet.ParquetWriter` for a file whose row groups hold
        about `rows_per_row_group` rows (what bloom filters are sized for); without `columns`,
        only the codec and its level (for files whose columns are not the table's).

        pyarrow checks a page's size only every 1,024 rows, and a delta-encoded page's not
        before it closes: with `widest_row_bytes` (the widest column's bytes per row), pages
        also close after as many rows as fit the page size at that width."""
        options: dict[str, Any] = {"compression": self.compression}
        if self.compression_level is not None:
            options["compression_level"] = self.compression_level
        if not columns:
            return options
        if self.page_bytes is not None:
            options["data_page_size"] = self.page_bytes
        page_rows = self.page_rows
        if self.page_bytes is not None and widest_row_bytes > 0:
            fitting = max(1, int(self.page_bytes / widest_row_bytes))
            page_rows = min(page_rows or DEFAULT_PAGE_ROWS, fitting)
        if page_rows is not None:
            options["max_rows_per_page"] = page_rows
        if self.dictionary_page_bytes is not None:
            options["dictionary_pagesize_limit"] = self.dictionary_page_bytes
        if self.bloom_filters:
            options["bloom_filter_options"] = {
                path: {"ndv": self._bloom_ndv(rows_per_row_group, fpp), "fpp": fpp}
                for path, fpp in self.bloom_filters.items()
            }
        return options

    def _bloom_ndv(self, rows: int, fpp: float) -> int:
        """Distinct values to size a filter for: every row distinct, as for a key column, but no
        more than a filter of `bloom_filter_max_bytes` holds at `fpp` (bits per value:
        -ln(fpp) / ln(2)^2)."""
        fitting = int(self.bloom_filter_max_bytes * 8 * math.log(2) ** 2 / -math.log(fpp))
        return max(1, min(rows, fitting))


def _bloom_filters(properties: Mapping[str, str], schema: Schema) -> dict[str, float]:
    # Properties name columns as the table does; Parquet paths use the sanitized names files carry.
    sanitized = sanitize_column_names(schema)
    paths = {field_id: path for path, field_id in parquet_path_to_id_mapping(sanitized).items()}
    filters = {}
    for name, enabled in properties.items():
        if not name.startswith(BLOOM_FILTER_ENABLED):
            continue
        if enabled.strip().lower() not in ("true", "false"):
            raise InvalidTableProperty(f"table property {name}={enabled!r}: expected true or false")
        if enabled.strip().lower() == "false":
            continue
        column = name.removeprefix(BLOOM_FILTER_ENABLED)
        try:
            field_id: int | None = schema.find_field(column, case_sensitive=True).field_id
        except ValueError:
            field_id = None
        if field_id is None or field_id not in paths:
            raise InvalidTableProperty(f"table property {name}: the table has no primitive column {column!r}")
        fpp_name = BLOOM_FILTER_FPP + column
        fpp_text = properties.get(fpp_name, str(DEFAULT_BLOOM_FPP))
        try:
            fpp = float(fpp_text)
        except ValueError:
            fpp = math.nan
        if not 0.0 < fpp < 1.0:
            raise InvalidTableProperty(
                f"table property {fpp_name}={fpp_text!r}: expected a number between 0 and 1"
            )
        filters[paths[field_id]] = fpp
    return filters
