"""The Flink side of the soak's Flink writer; runs in the Flink virtualenv (scripts/flink/build.sh),
not floe's, so it imports nothing but PyFlink and the standard library.

Usage: python flink_job.py CATALOG JDBC_URI WAREHOUSE

It opens the soak's JDBC catalog in a Flink TableEnvironment (batch mode, local mini-cluster),
prints ``ready``, then reads one JSON request a line, ``{"table": "ns.t", "rows": [[id, cat, v,
epoch_seconds, note], ...]}``, and upserts the rows with one bounded job through Iceberg's Flink
sink in upsert mode (equality deletes on the table's identifier fields plus inserts, committed
once at the end of input). It answers each request with one JSON line, ``{"ok": true}`` or
``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pyflink.table import EnvironmentSettings, TableEnvironment


def _environment(catalog: str, uri: str, warehouse: str) -> TableEnvironment:
    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    config = env.get_config()
    config.set("parallelism.default", "1")
    config.set("table.local-time-zone", "UTC")
    # As the reference reader opens the same SQLite catalog: pyiceberg made its tables, and a
    # cached table would hide the other engines' commits.
    options = {
        "type": "iceberg",
        "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "uri": uri,
        "warehouse": warehouse,
        "jdbc.init-catalog-tables": "false",
        "jdbc.schema-version": "V1",
        "cache-enabled": "false",
    }
    listed = ", ".join(f"'{k}' = '{v}'" for k, v in options.items())
    env.execute_sql(f"CREATE CATALOG `{catalog}` WITH ({listed})")
    return env


def _literal(row: list[Any]) -> str:
    key, cat, value, seconds, note = row
    ts = f"TO_TIMESTAMP_LTZ({int(seconds)}, 0)"
    return f"(CAST({int(key)} AS BIGINT), '{cat}', CAST({int(value)} AS BIGINT), {ts}, '{note}')"


def _upsert(env: TableEnvironment, catalog: str, request: dict[str, Any]) -> None:
    namespace, name = request["table"].split(".")
    values = ", ".join(_literal(row) for row in request["rows"])
    target = f"`{catalog}`.`{namespace}`.`{name}`"
    env.execute_sql(f"INSERT INTO {target} /*+ OPTIONS('upsert-enabled'='true') */ VALUES {values}").wait()


def main() -> int:
    """Serve upsert requests on stdin until it closes."""
    catalog, uri, warehouse = sys.argv[1:4]
    env = _environment(catalog, uri, warehouse)
    print("ready", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            _upsert(env, catalog, json.loads(line))
        except Exception as exc:  # the soak classifies it (a conflict, or a failure)
            print(json.dumps({"ok": False, "error": _first_lines(exc)}), flush=True)
        else:
            print(json.dumps({"ok": True}), flush=True)
    return 0


def _first_lines(exc: BaseException) -> str:
    """The exception and its Java causes ("Caused by" lines), without the stack frames."""
    lines = [line.strip() for line in str(exc).splitlines()]
    kept = [line for line in lines if line and not line.startswith("at ") and not line.startswith("...")]
    return " | ".join(kept[:12])[:2000]


if __name__ == "__main__":
    sys.exit(main())
