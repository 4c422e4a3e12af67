"""The ``floe`` command line: ``floe optimize`` (one table, once), ``demo``, ``run``, ``operator``
and ``history`` (`floe.cli.history`)."""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import ValidationError
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from floe.api.manifests import ManifestError
from floe.api.table_properties import InvalidTableProperty
from floe.cli.console import REDACT, console
from floe.cli.errors import ClusterUnreachable, UnknownTable, UsageError
from floe.cli.explain import add_explain_parser
from floe.cli.history import add_history_parser, table_identifier
from floe.commit.request import CommitAbandoned, CommitConflict, CommitPending
from floe.controller.objects import DRIVER_SERVICE_ACCOUNT
from floe.kit.redaction import RedactingFilter
from floe.local.interrupt import Interrupted, reinstall, stop_on_signals
from floe.maintenance.job import MaintenanceRefused
from floe.optimizing.commit_request import ProcessFailed
from floe.planning.plan import OptimizingPlan, OptimizingType
from floe.tables.catalog import TableAccessError, catalog_ref_from_file, load_table, open_catalog
from floe.tables.support import UnsupportedTableError

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from floe.controller.config import OperatorConfig


_TYPES = {t.label: t for t in OptimizingType}
_MAINTENANCE_TYPES = ("expire", "orphans", "manifests", "dangling-deletes", "retention")


def _optimize(args: argparse.Namespace) -> int:
    out, err = console(stderr=False), console(stderr=True)
    from floe.api.table import OptimizedTableSpec
    from floe.local.optimize import optimize_once, plan_table
    from floe.local.report import human_bytes
    from floe.local.report import plan_table as render_plan

    ref = catalog_ref_from_file(Path(args.catalog_config))
    REDACT.add(ref.properties, ref.secret_properties)
    catalog = open_catalog(ref)
    table = load_table(catalog, args.table)
    if args.type in _MAINTENANCE_TYPES:
        return _maintain(args, table, ref.name)
    overrides = {"targetSize": args.target_size} if args.target_size else {}
    try:
        spec = OptimizedTableSpec.model_validate(
            {"table": args.table, "catalog": {"name": ref.name}, **overrides}
        )
    except ValidationError as exc:
        raise UsageError(f"invalid --target-size {args.target_size!r}: {exc.errors()[0]['msg']}") from exc
    try:
        config = spec.optimizing_config(table.metadata.properties)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    forced = _TYPES[args.type] if args.type else None
    if args.dry_run:
        scanned, plan = plan_table(table, config, forced)
        if plan.is_empty:
            out.print(f"{args.table}: nothing to optimize on snapshot {plan.snapshot_id}")
        else:
            out.print(render_plan(plan, scanned, table.metadata))
        return 0

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    ) as progress:
        bar = progress.add_task(f"optimizing {args.table}", total=None)

        def on_plan(plan: OptimizingPlan) -> None:
            progress.update(bar, total=len(plan.tasks))

        result = optimize_once(
            table,
            args.table,
            config,
            spark=lambda: _local_spark(args.cores),
            forced=forced,
            on_plan=on_plan,
            on_task_done=lambda _outcome: progress.advance(bar),
        )
    if result.commit is None:
        out.print(f"{args.table}: nothing to optimize")
        return 0
    c = result.commit
    kind = result.plan.optimizing_type.label if result.plan.optimizing_type else "-"
    out.print(
        f"{args.table}: {kind} optimizing committed snapshot {c.snapshot_id}: "
        f"{c.changes}; read {human_bytes(result.bytes_read)} in {result.seconds:.1f}s"
    )
    return 0


def _local_spark(cores: int) -> SparkSession:
    """Local Spark for one command; SIGINT back to floe's handler, which SparkContext took."""
    from floe_optimizer.spark_session import get_spark

    session = get_spark(master=f"local[{cores}]")
    reinstall()
    return session


def _stop_local_spark() -> None:
    """Stop the local Spark the command started, if any, so its last log lines come before floe's."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is not None:
        context.stop()


def _maintenance_spec(args: argparse.Namespace) -> dict[str, Any]:
    """The ``spec.maintenance`` the flags describe (unset flags keep the defaults)."""
    retention: dict[str, Any] = {}
    if args.max_age is not None:
        retention["maxAge"] = args.max_age
    if args.min_snapshots is not None:
        retention["minSnapshots"] = args.min_snapshots
    maintenance: dict[str, Any] = {"snapshotRetention": retention}
    orphans: dict[str, Any] = {}
    if args.type == "orphans" and args.older_than is not None:
        orphans["olderThan"] = args.older_than
    if args.location:
        if args.type != "orphans":
            raise UsageError("--location applies to --type orphans only")
        orphans["locations"] = args.location
    if orphans:
        maintenance["orphanFiles"] = orphans
    if args.manifest_trigger is not None:
        maintenance["manifests"] = {"triggerSmallManifests": args.manifest_trigger}
    if args.type == "retention":
        if args.column is None or args.older_than is None:
            raise UsageError("--type retention needs --column and --older-than (e.g. --older-than 30d)")
        maintenance["dataRetention"] = {"column": args.column, "olderThan": args.older_than}
    return maintenance


def _maintain(args: argparse.Namespace, table: Table, catalog_name: str) -> int:
    """`floe optimize --type expire|orphans|manifests|dangling-deletes|retention`: one run, now."""
    import time

    from floe.api.table import OptimizedTableSpec
    from floe.local.report import human_bytes
    from floe.maintenance.job import MaintenanceJob
    from floe.maintenance.jobs import run_maintenance_job

    try:
        spec = OptimizedTableSpec.model_validate(
            {"table": args.table, "catalog": {"name": catalog_name}, "maintenance": _maintenance_spec(args)}
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"][1:])
        raise UsageError(f"invalid option for {where}: {error['msg']}") from exc
    try:
        report = run_maintenance_job(
            table, MaintenanceJob(args.type), spec.maintenance, now_s=time.time(), dry_run=args.dry_run
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    out = console(stderr=False)
    for path in report.paths:
        out.print(f"{'would remove' if report.dry_run else 'removed'} {path}", highlight=False)
    out.print(
        f"{args.table}: {report.summary} ({report.files_removed} files, {human_bytes(report.bytes_removed)}"
        f"{', dry run: nothing changed' if report.dry_run else ''})",
        highlight=False,
    )
    return 0


def _demo(args: argparse.Namespace) -> int:
    from floe.local.demo import run_demo

    return run_demo(
        Path(args.dir),
        cores=args.cores,
        scale=args.scale,
        console=console(stderr=False),
        write_only=args.write_only,
    )


def _run(args: argparse.Namespace) -> int:
    from floe.local.run import run_engine

    catalog = catalog_ref_from_file(Path(args.catalog_config)) if args.catalog_config else None
    if catalog is not None:
        REDACT.add(catalog.properties, catalog.secret_properties)
    if args.history_table and catalog is None:
        raise UsageError("--history-table needs --catalog-config: the catalog the history table is in")
    return run_engine(
        Path(args.file),
        catalog,
        once=args.once,
        console=console(stderr=False),
        redact=REDACT,
        cores=args.cores,
        refresh_interval_s=args.refresh_interval,
        timeout_s=args.timeout,
        history_table=args.history_table,
        ui_port=args.ui_port,
        notice_token=_notice_token(args),
    )


def _add_notice_token_file(parser: argparse.ArgumentParser) -> None:
    """``--notice-token-file``, which `floe run` and `floe operator` both take (`_notice_token`)."""
    parser.add_argument(
        "--notice-token-file",
        metavar="PATH",
        help="file holding the token that change notices (POST /v1/tables/NAMESPACE/TABLE/changed on "
        "the task service) must present; without it, notices are refused",
    )


def _notice_token(args: argparse.Namespace) -> str | None:
    """The token of ``--notice-token-file``; None without one (change notices off)."""
    from floe.protocol.client import read_token_file

    if not args.notice_token_file:
        return None
    try:
        return read_token_file(Path(args.notice_token_file))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--notice-token-file: {exc}") from exc


def _operator(args: argparse.Namespace) -> int:
    from floe.controller.main import run_operator

    return run_operator(operator_config(args))


def operator_config(args: argparse.Namespace) -> OperatorConfig:
    """The operator's configuration from ``floe operator`` arguments (and the environment)."""
    from floe.controller.config import HistoryTableConfig, OperatorConfig, operator_namespaces
    from floe.controller.external_metrics import ExternalMetricsConfig
    from floe.protocol.client import read_token_file

    token = ""
    if args.registration_token_file:
        try:
            token = read_token_file(Path(args.registration_token_file))
        except (OSError, ValueError) as exc:
            raise UsageError(f"--registration-token-file: {exc}") from exc
    history = None
    if args.history_table or args.history_catalog_config:
        if not (args.history_table and args.history_catalog_config):
            raise UsageError("--history-table and --history-catalog-config go together")
        catalog = catalog_ref_from_file(Path(args.history_catalog_config))
        REDACT.add(catalog.properties, catalog.secret_properties)
        history = HistoryTableConfig(args.history_table, catalog)
    return OperatorConfig(
        history=history,
        namespaces=operator_namespaces(args.namespace),
        service_port=args.service_port,
        standalone=args.standalone,
        registration_token=token,
        notice_token=_notice_token(args),
        peering_lifetime_s=args.peering_lifetime,
        create_peering_objects=not args.no_create_peering,
        secret_interval_s=args.secret_interval,
        refresh_interval_s=args.refresh_interval,
        liveness_endpoint=args.liveness,
        driver_service_account=args.driver_service_account,
        ui_port=args.ui_port,
        external_metrics=(
            ExternalMetricsConfig(args.external_metrics_port, Path(args.external_metrics_cert_dir))
            if args.external_metrics_port
            else None
        ),
    )


MAX_CORES = 256
"""Most local Spark cores (threads) a command takes: far more than a machine running it has."""
MAX_INTERVAL_S = 86_400.0
"""Longest interval, lifetime or refresh period: a day."""
MAX_TIMEOUT_S = 7 * 86_400.0
MAX_DEMO_SCALE = 100.0


def _positive(kind: type[int] | type[float], most: float) -> Callable[[str], int | float]:
    """A number greater than 0 and at most `most` (NaN and infinities are no numbers here)."""
    return _bounded(kind, None, most)


def _bounded(kind: type[int] | type[float], least: float | None, most: float) -> Callable[[str], int | float]:
    """A number from `least` to `most` (None: greater than 0), refused in one line otherwise."""
    bounds = f"positive and at most {most:g}" if least is None else f"from {least:g} to {most:g}"
    what = "an integer" if kind is int else "a number"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, {bounds}; got {text!r}") from None
        low_ok = value > 0 if least is None else value >= least
        if not (math.isfinite(value) and low_ok and value <= most):
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
        return value

    return parse


def _cores(text: str) -> int:
    """Local Spark cores: 1 to `MAX_CORES`."""
    return int(_positive(int, MAX_CORES)(text))


class _Parser(argparse.ArgumentParser):
    """Bad arguments end in one line on stderr and exit code 2, not a usage dump."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE`` and where the options are described; exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _port_or_off(text: str) -> int:
    """A TCP port to listen on, or 0 for not at all."""
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port (1 to 65535) or 0 for off, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``floe`` command."""
    parser = _Parser(prog="floe", description="Keep Apache Iceberg tables compacted.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True)

    opt = sub.add_parser("optimize", help="optimize one table once")
    opt.add_argument("--catalog-config", required=True, help="YAML file of pyiceberg catalog properties")
    opt.add_argument("table", help="table identifier, namespace.table")
    opt.add_argument(
        "--type",
        choices=[*sorted(_TYPES), *_MAINTENANCE_TYPES],
        help="force this optimizing type, or run this maintenance job",
    )
    opt.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (or what a job would remove) and change nothing",
    )
    opt.add_argument("--max-age", help="expire: snapshots older than this expire (default 5d)")
    # --min-snapshots and --manifest-trigger are bounded by spec.maintenance's model (exit 2).
    opt.add_argument("--min-snapshots", type=int, help="expire: newest snapshots always kept (default 1)")
    opt.add_argument("--older-than", help="orphans: minimum file age (default 3d); retention: row age")
    opt.add_argument(
        "--location",
        action="append",
        default=[],
        help="orphans: also list this place the table writes to outside its location (its "
        "write.data.path or write.metadata.path, or inside one); repeatable",
    )
    opt.add_argument("--column", help="retention: the timestamp or date column rows are aged by")
    opt.add_argument("--manifest-trigger", type=int, help="manifests: small manifests that trigger (100)")
    opt.add_argument(
        "--target-size",
        help="output file size, e.g. 128Mi (default: the table's write.target-file-size-bytes, else 128Mi)",
    )
    opt.add_argument("--cores", type=_cores, default=2, help="local Spark cores (default 2)")
    opt.set_defaults(handler=_optimize)

    demo = sub.add_parser("demo", help="stream into local tables, optimize them, show before/after")
    demo.add_argument("--dir", default=".floe-demo", help="where the catalog and warehouse go")
    demo.add_argument("--cores", type=_cores, default=2, help="local Spark cores (default 2)")
    demo.add_argument(
        "--scale", type=_positive(float, MAX_DEMO_SCALE), default=1.0, help="multiply the demo's data volume"
    )
    demo.add_argument("--write-only", action="store_true", help="write the tables, do not optimize them")
    demo.set_defaults(handler=_demo)

    run = sub.add_parser("run", help="keep tables optimized: task service, scheduler, optimizers")
    run.add_argument("-f", "--file", required=True, help="manifest file or directory (re-read on change)")
    run.add_argument("--catalog-config", help="catalog properties for tables whose manifest gives none")
    run.add_argument("--once", action="store_true", help="exit when every table is idle")
    run.add_argument("--cores", type=_cores, default=2, help="local Spark cores (default 2)")
    run.add_argument(
        "--refresh-interval",
        type=_positive(float, MAX_INTERVAL_S),
        default=10.0,
        help="seconds between table refreshes",
    )
    run.add_argument(
        "--timeout", type=_positive(float, MAX_TIMEOUT_S), help="with --once: give up after this many seconds"
    )
    _add_notice_token_file(run)
    run.add_argument(
        "--history-table",
        type=table_identifier,
        metavar="NAMESPACE.TABLE",
        help="also append every optimizing and maintenance run to this Iceberg table of the "
        "--catalog-config catalog (created if missing), for `floe history` and any engine",
    )
    run.add_argument(
        "--ui-port",
        type=_port_or_off,
        default=0,
        metavar="PORT",
        help="serve the read-only web UI on 127.0.0.1:PORT (default 0: not served)",
    )
    run.set_defaults(handler=_run)

    op = sub.add_parser("operator", help="the Kubernetes operator: kopf handlers, task service, engine")
    op.add_argument("--namespace", action="append", help="watch only this namespace (repeatable)")
    op.add_argument(
        "--service-port",
        type=_bounded(int, 0, 65535),
        default=7070,
        help="task service port (default 7070; 0: any free port)",
    )
    op.add_argument("--standalone", action="store_true", help="no peering: this replica always leads")
    op.add_argument(
        "--no-create-peering",
        action="store_true",
        help="the peering objects are made by whoever installs floe (the Helm chart): wait for them "
        "instead of creating them, which would race the install",
    )
    op.add_argument(
        "--registration-token-file",
        metavar="PATH",
        help="file holding the token optimizers must present to register "
        "(default: $FLOE_REGISTRATION_TOKEN, else a random one for this process)",
    )
    op.add_argument(
        "--peering-lifetime",
        type=_positive(int, MAX_INTERVAL_S),
        default=60,
        metavar="SECONDS",
        help="how long a replica's peering record counts without renewal: a crashed leader's "
        "successor takes over after at most this long (default 60)",
    )
    op.add_argument(
        "--secret-interval",
        type=_positive(float, MAX_INTERVAL_S),
        default=30.0,
        metavar="SECONDS",
        help="how often the catalog Secrets of tables are re-read (default 30)",
    )
    op.add_argument(
        "--refresh-interval",
        type=_positive(float, MAX_INTERVAL_S),
        default=10.0,
        metavar="SECONDS",
        help="how often each table is checked for new snapshots (default 10): one query per catalog "
        "for SQL catalogs, one request per table for REST catalogs, which a longer interval makes cheaper",
    )
    op.add_argument(
        "--driver-service-account",
        default=DRIVER_SERVICE_ACCOUNT,
        metavar="NAME",
        help="the ServiceAccount the groups' driver pods run as, in each served namespace; it must "
        "exist there with a Role for Spark's executor pods, as the Helm chart makes it "
        f"(default {DRIVER_SERVICE_ACCOUNT})",
    )
    op.add_argument(
        "--liveness",
        metavar="URL",
        help="serve the liveness probe (kopf's loop and floe's engine loop) at this URL, "
        "e.g. http://0.0.0.0:8081/healthz",
    )
    op.add_argument(
        "--external-metrics-port",
        type=_port_or_off,
        default=0,
        metavar="PORT",
        help="serve each group's demand as external.metrics.k8s.io over HTTPS on this port, for "
        "HorizontalPodAutoscalers (default 0: not served)",
    )
    op.add_argument(
        "--ui-port",
        type=_port_or_off,
        default=8080,
        metavar="PORT",
        help="serve the read-only web UI on this port, for `kubectl port-forward` (default 8080; 0: "
        "not served)",
    )
    op.add_argument(
        "--external-metrics-cert-dir",
        default="/etc/floe/external-metrics",
        metavar="DIR",
        help="the serving certificate of the external metrics API: tls.crt and tls.key in DIR "
        "(default /etc/floe/external-metrics)",
    )
    _add_notice_token_file(op)
    op.add_argument(
        "--history-table",
        type=table_identifier,
        metavar="NAMESPACE.TABLE",
        help="also append every optimizing and maintenance run to this Iceberg table of the "
        "--history-catalog-config catalog (created if missing), for `floe history` and any engine",
    )
    op.add_argument(
        "--history-catalog-config",
        metavar="FILE",
        help="with --history-table: YAML file of the catalog the history table is in (the chart "
        "mounts it from history.catalogSecret)",
    )
    op.set_defaults(handler=_operator)
    add_history_parser(sub)
    add_explain_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for bad input or a table floe refuses, 1 for
    failures)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter(REDACT))
    try:
        if args.handler is _operator:
            code: int = args.handler(args)  # kopf stops on SIGTERM and SIGINT by itself
            return code
        with stop_on_signals():
            code = args.handler(args)
        return code
    except Interrupted as exc:
        _stop_local_spark()
        outcome = exc.outcome or "stopped before anything was written"
        console(stderr=True).print(
            f"interrupted by {exc.signal_name}: {escape(REDACT(outcome))}", highlight=False
        )
        return exc.exit_code
    except KeyboardInterrupt:  # SIGINT taken by Spark's handler before floe's came back
        console(stderr=True).print("interrupted by SIGINT", highlight=False)
        return 130
    except (
        TableAccessError,
        ManifestError,
        UsageError,
        UnsupportedTableError,
        InvalidTableProperty,
        MaintenanceRefused,
        UnknownTable,
    ) as exc:
        return _report("error", exc, 2)
    except ClusterUnreachable as exc:
        return _report("error", exc, 1)
    except (CommitConflict, CommitAbandoned, ProcessFailed) as exc:
        return _report("optimizing failed, nothing committed", exc, 1)
    except CommitPending as exc:
        return _report(
            "the commit's outcome is unknown",
            exc,
            1,
            ". If it landed, the table's history shows a snapshot with its floe.process-id; if not, "
            "orphan cleanup removes its files.",
        )


def _report(heading: str, exc: Exception, exit_code: int, after: str = "") -> int:
    """Print ``heading: exc`` (credentials masked, no traceback), then ``after``; return ``exit_code``."""
    console(stderr=True).print(f"[red]{heading}:[/red] {escape(REDACT(str(exc)))}{after}", highlight=False)
    return exit_code
