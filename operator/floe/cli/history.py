"""``floe history``: what floe did to a table and what it cost, run by run, with totals.

Against a cluster it reads the OptimizedTable's status, which keeps the last runs
(`floe.api.history.STATUS_HISTORY`); with ``--history-table`` every run, from the run history
table (`floe.tables.run_history_table`) that ``floe run --history-table`` appends to.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import StringConstraints, TypeAdapter, ValidationError
from rich.table import Table as RichTable

from floe.api.history import RunRecord, status_runs
from floe.api.meta import MAX_TABLE_IDENTIFIER_LENGTH, TABLE_IDENTIFIER
from floe.cli.console import REDACT, console
from floe.cli.errors import ClusterUnreachable, UnknownTable, UsageError

_IDENTIFIER = TypeAdapter(
    Annotated[str, StringConstraints(max_length=MAX_TABLE_IDENTIFIER_LENGTH, pattern=TABLE_IDENTIFIER)]
)
"""``namespace.table``, checked as a manifest's ``spec.table`` is (the pattern is RE2's, not `re`'s)."""


def table_identifier(text: str) -> str:
    """An argparse type: ``namespace.table``, as Iceberg names a table."""
    try:
        return _IDENTIFIER.validate_python(text)
    except ValidationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a table identifier, namespace.table") from None


def add_history_parser(sub: argparse._SubParsersAction[Any]) -> None:
    """The ``history`` subcommand."""
    history = sub.add_parser("history", help="what floe did to a table and what it cost, run by run")
    history.add_argument("table", help="the OptimizedTable's name")
    history.add_argument(
        "-n",
        "--namespace",
        help="the OptimizedTable's namespace (default: the kubeconfig context's; with "
        "--history-table, default)",
    )
    history.add_argument(
        "--history-table",
        type=table_identifier,
        metavar="NAMESPACE.TABLE",
        help="read every run from this run history table (`floe run --history-table`) instead of "
        "the last runs in the OptimizedTable's status",
    )
    history.add_argument(
        "--catalog-config", help="with --history-table: YAML file of the catalog the history table is in"
    )
    history.add_argument(
        "--limit", type=int, default=None, metavar="N", help="with --history-table: the last N runs only"
    )
    history.set_defaults(handler=_history)


def _history(args: argparse.Namespace) -> int:
    if args.history_table:
        return _history_from_table(args)
    namespace, resource = read_optimized_table(args.table, args.namespace)
    runs = status_runs(resource.get("status") or {})
    console(stderr=False).print(history_table(f"{namespace}/{args.table}", runs))
    return 0


def read_optimized_table(name: str, namespace: str | None) -> tuple[str, dict[str, Any]]:
    """The OptimizedTable `name` in `namespace` (default: the kubeconfig context's) from the
    cluster, with its namespace. Raises `ClusterUnreachable` or `UnknownTable`."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    from floe.api.models import TABLE_PLURAL
    from floe.controller.kube import Kube, load_config

    try:
        load_config()
        namespace = namespace or context_namespace()
        resource = Kube().get_custom(TABLE_PLURAL, name, namespace)
    except (ConfigException, ApiException, HTTPError, OSError) as exc:
        raise ClusterUnreachable(f"cannot read OptimizedTable {name!r}: {exc}") from exc
    if resource is None:
        raise UnknownTable(f"no OptimizedTable {name!r} in namespace {namespace!r}")
    return namespace, dict(resource)


def _history_from_table(args: argparse.Namespace) -> int:
    from pathlib import Path

    from floe.tables.catalog import catalog_ref_from_file, load_table, open_catalog
    from floe.tables.run_history_table import read_runs

    if not args.catalog_config:
        raise UsageError("--history-table needs --catalog-config: the catalog the history table is in")
    if args.limit is not None and args.limit <= 0:
        raise UsageError(f"--limit must be positive, not {args.limit}")
    ref = catalog_ref_from_file(Path(args.catalog_config))
    REDACT.add(ref.properties, ref.secret_properties)
    table = load_table(open_catalog(ref), args.history_table)
    name = f"{args.namespace or 'default'}/{args.table}"
    runs = read_runs(table, name, args.limit)
    if not runs:
        raise UnknownTable(f"no run of {name!r} in {args.history_table}")
    console(stderr=False).print(history_table(name, runs))
    return 0


def context_namespace() -> str:
    """The namespace of the kubeconfig's current context, else ``default`` (as kubectl does)."""
    from kubernetes import config

    try:
        _, context = config.list_kube_config_contexts()  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError):
        return "default"
    namespace = (context or {}).get("context", {}).get("namespace")
    return str(namespace) if namespace else "default"


def history_table(table: str, runs: Sequence[RunRecord]) -> RichTable:
    """The runs as a table, a totals row under them."""
    from floe.local.report import human_bytes  # floe.local loads only in the commands that use it

    # No borders, and headers of a word or two: a run's row fits a 160-column pipe.
    out = RichTable(title=f"{table}: {len(runs)} runs", title_justify="left", box=None, header_style="bold")
    # Every column but the last, the reason, keeps its cells on one line; the reason folds.
    for column in ("finished (UTC)", "kind", "outcome", "files in→out", "bytes in→out"):
        out.add_column(column, no_wrap=True)
    for column in ("retired", "queued s", "ran s", "exec s", "snapshot"):
        out.add_column(column, justify="right", no_wrap=True)
    out.add_column("why (trigger, or error)", min_width=24, overflow="fold")
    for run in runs:
        out.add_row(
            run.finished.replace("T", " ").removesuffix("Z"),
            run.kind,
            run.outcome,
            f"{run.files_in}→{run.files_out}",
            f"{human_bytes(run.bytes_in)}→{human_bytes(run.bytes_out)}",
            str(run.delete_files_retired),
            f"{run.phases.queued:.0f}",
            f"{run.phases.running:.0f}",
            f"{run.executor_seconds:.1f}",
            str(run.snapshot_id or "-"),
            run.error or run.trigger,
        )
    failed = sum(run.outcome == "failed" for run in runs)
    out.add_section()
    out.add_row(
        "total",
        "",
        f"{failed} failed" if failed else "",
        f"{sum(r.files_in for r in runs)}→{sum(r.files_out for r in runs)}",
        f"{human_bytes(sum(r.bytes_in for r in runs))}→{human_bytes(sum(r.bytes_out for r in runs))}",
        str(sum(r.delete_files_retired for r in runs)),
        "",
        "",
        f"{sum(r.executor_seconds for r in runs):.1f}",
        "",
        "",
    )
    return out
