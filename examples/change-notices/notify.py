"""Tell floe that a table changed, right after a writer's commit: the table is read at once
instead of at its next check (which backs off to `refresh.maxInterval` on a quiet table).

Call it as a pipeline's last step, or from a job after its commit:

    # after a Spark job's write to lake.sales.orders
    python examples/change-notices/notify.py sales.orders

or from Python, e.g. at the end of a Spark or Flink job's driver:

    from notify import notify_table_changed
    df.writeTo("lake.sales.orders").append()
    notify_table_changed("sales.orders")

The task service's URL and the notice token come from the environment: FLOE_NOTICE_URL (e.g.
http://floe-operator.floe-system.svc:7070, the chart's Service) and FLOE_NOTICE_TOKEN or
FLOE_NOTICE_TOKEN_FILE (the Secret the chart's changeNotices.existingSecret names). A notice is a
hint: if it is lost, floe still sees the commit at the table's next check. So this never fails the
job: it reports what went wrong and exits 0 (1 only with --strict).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path


def notify_table_changed(
    identifier: str,
    catalog: str | None = None,
    url: str | None = None,
    token: str | None = None,
    timeout_s: float = 5.0,
) -> list[str]:
    """POST a change notice for `identifier` (``namespace.table``; a nested namespace with dots);
    returns the OptimizedTables floe refreshes. Raises urllib's errors (HTTPError: 401, 404, 422)."""
    url = url or os.environ["FLOE_NOTICE_URL"]
    token = token or _token_from_environment()
    namespace, _, table = identifier.rpartition(".")
    if not namespace:
        raise ValueError(f"{identifier!r} is not namespace.table")
    path = f"/v1/tables/{urllib.parse.quote(namespace, safe='')}/{urllib.parse.quote(table, safe='')}/changed"
    body = json.dumps({"catalog": catalog} if catalog else {}).encode()
    request = urllib.request.Request(
        url.rstrip("/") + path,
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return list(json.loads(response.read())["tables"])


def _token_from_environment() -> str:
    token = os.environ.get("FLOE_NOTICE_TOKEN")
    if token:
        return token
    path = os.environ.get("FLOE_NOTICE_TOKEN_FILE")
    if path:
        return Path(path).read_text().strip()
    raise KeyError("set FLOE_NOTICE_TOKEN or FLOE_NOTICE_TOKEN_FILE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", help="namespace.table, as the writer's catalog names it")
    parser.add_argument("--catalog", help="only floe's tables of this catalog name")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the notice is not taken")
    args = parser.parse_args(argv)
    try:
        tables = notify_table_changed(args.table, args.catalog)
    except urllib.error.HTTPError as exc:
        print(
            f"floe did not take the notice for {args.table}: {exc.code} {exc.read().decode()}",
            file=sys.stderr,
        )
        return 1 if args.strict else 0
    except (OSError, KeyError, ValueError) as exc:
        print(f"no notice sent for {args.table}: {exc}", file=sys.stderr)
        return 1 if args.strict else 0
    print(f"floe reads {', '.join(tables)} at its next round")
    return 0


if __name__ == "__main__":
    sys.exit(main())
