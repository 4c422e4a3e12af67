"""What floe's benchmarks share, one idea per module; each benchmark script keeps only what it measures.

The scripts run as ``python bench/<name>.py``, which puts ``bench/`` on ``sys.path``, so
they import these modules as ``harness.<module>``.
"""

MiB = 1024 * 1024
"""Bytes in a mebibyte: every results section gives sizes in MiB."""
