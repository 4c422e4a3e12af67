"""The sizes a rewrite task reads, buffers and writes in: its memory bounds.

The other modules of `floe.rewrite` read them as ``X`` when they run, so a test may
lower one with ``monkeypatch.setattr(limits, ...)``.
"""

READ_BATCH_ROWS = 64 * 1024
"""Rows per record batch read from a data or delete file."""

ROW_GROUP_MAX_BYTES = 256 * 1024 * 1024
"""Arrow (in-memory) bytes buffered at most before a row group is written: a task's write memory.

A row group's rows are held as Arrow data until it is written, and each row group repeats
its columns' dictionaries, so fewer, larger row groups make smaller files: this bound lets a
row group reach Iceberg's default 128 MiB written at the compression ratios of typical
tables (about a third of the Arrow size), one row group for most files, as Iceberg writes them.
"""

EQUALITY_CHUNK_FACTOR = 4
"""Data rows matched per call against equality deletes, as a multiple of the delete rows.

Each call hashes the delete keys again; matching at least 4 data rows per delete row keeps
that from dominating when data files are small next to the delete set.
"""

EQUALITY_CHUNK_MAX_BYTES = 64 * 1024 * 1024
"""Arrow bytes of data rows collected at most before they are matched against equality deletes."""

ROLL_AT_FRACTION = 0.9
"""A file is closed once this fraction of the target size has been written to it."""
