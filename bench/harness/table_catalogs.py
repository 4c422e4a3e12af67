"""Where a benchmark's many small tables live: a SQL catalog kept from run to run, or a REST one made afresh.

The tables are `harness.small_tables`' (``db.t00000``..., 100 rows each); a benchmark picks
the catalog with ``--catalog`` (`CATALOGS`) and gets the pyiceberg properties to give floe.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.small_tables import catalog_properties, fill_catalog, make_catalog

TESTS = Path(__file__).resolve().parent.parent.parent / "tests"
"""Where ``rest_s3`` is: the tests' REST catalog server on moto's S3."""

CATALOGS = {
    "sql": "One SQL catalog (SQLite)",
    "rest": "One REST catalog (Iceberg 1.11's server, JDBC on SQLite, tables on moto's S3, on loopback)",
}
"""The catalogs, by ``--catalog`` value: how a results section describes each."""
REST_FILL_WORKERS = 4
"""Threads that make a REST catalog's tables: its server, S3 and the client each work in turn."""


@contextmanager
def tables_catalog(
    kind: str, directory: Path, tables: int, snapshots: int, clock_file: Path | None = None
) -> Iterator[dict[str, str]]:
    """The pyiceberg properties of a catalog of `tables` small tables, for the time it is used:
    the SQL catalog (one snapshot per table) is made once and kept; the REST one (its S3 is in
    memory) is made each run, with `snapshots` snapshots per table, its server's clock offset by
    `clock_file` where given (``rest_s3``'s ``_faked_clock``)."""
    if kind == "sql":
        make_catalog(directory, tables)
        yield catalog_properties(directory)
        return
    sys.path.insert(0, str(TESTS))
    from rest_s3 import rest_s3_stack

    # Its tables' files are in moto's memory: a database left by an earlier run names none of them.
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    with rest_s3_stack("127.0.0.1", directory, clock_file=clock_file) as stack:
        fill_catalog(stack.client("lake"), tables, snapshots, workers=REST_FILL_WORKERS)
        yield stack.properties


@dataclass
class ThrottledCatalog:
    """What floe is given of a catalog: its own properties, or a proxy's that answers 429 above a rate."""

    properties: dict[str, str]
    answered_429: Callable[[], int]
    """How many requests the proxy answered 429 so far."""


@contextmanager
def throttled(properties: dict[str, str], per_s: float | None) -> Iterator[ThrottledCatalog]:
    """The REST catalog of `properties` behind a proxy answering 429 (``Retry-After: 1``) to
    requests above `per_s` a second, as a managed catalog throttles; with None, as it is."""
    if per_s is None:
        yield ThrottledCatalog(properties, lambda: 0)
        return
    sys.path.insert(0, str(TESTS))
    from fault_proxy import fault_proxy

    with fault_proxy(properties["uri"]) as proxy:
        proxy.limit_rate(per_s, retry_after_s=1.0)
        yield ThrottledCatalog({**properties, "uri": proxy.url}, lambda: proxy.throttled)
