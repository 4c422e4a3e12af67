"""``floe-optimizer``: the optimizer process, as the driver pod (or a developer) starts it.

It starts Spark, then serves its group until SIGTERM or SIGINT, when it stops gracefully
(running tasks finish and are completed within ``--grace-period``, then it unregisters)
and exits 143 (SIGTERM) or 130 (SIGINT). The registration token comes from the
environment, never the command line (which any process on the host can read):
``FLOE_REGISTRATION_TOKEN``, or the file named by ``FLOE_REGISTRATION_TOKEN_FILE``, read at
each registration.
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Sequence

from floe.api.units import parse_quantity
from floe.protocol.client import TaskServiceClient, registration_token_from_env
from floe_optimizer.app import Optimizer
from floe_optimizer.lifecycle import configure_logging, exit_code, serve_until_signalled, stop_spark
from floe_optimizer.runner import start_spark

log = logging.getLogger("floe_optimizer")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value:g}")
    return value


def _poll_wait(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 60:
        raise argparse.ArgumentTypeError(f"must be between 0 and 60 seconds, got {value:g}")
    return value


def _memory(text: str) -> int:
    try:
        return parse_quantity(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    """The command line of ``floe-optimizer``."""
    p = argparse.ArgumentParser(
        prog="floe-optimizer",
        description="Run floe rewrite tasks from the task service as Spark jobs, until SIGTERM or SIGINT.",
        epilog="The registration token, when the task service requires one, is read from "
        "$FLOE_REGISTRATION_TOKEN or from the file named by $FLOE_REGISTRATION_TOKEN_FILE.",
    )
    p.add_argument("--service", required=True, help="task service base URL, e.g. http://floe-operator:8080")
    p.add_argument("--group", required=True, help="the OptimizerGroup to serve")
    p.add_argument("--threads", type=_positive_int, required=True, help="tasks run in parallel")
    p.add_argument(
        "--memory",
        type=_memory,
        default=0,
        help="memory available to the tasks, e.g. 2Gi (reported to the service)",
    )
    p.add_argument(
        "--master",
        help="Spark master; default: spark-submit's, else $SPARK_MASTER, else local[THREADS]",
    )
    p.add_argument("--name", default=socket.gethostname(), help="shown in status (default: the host name)")
    p.add_argument(
        "--grace-period",
        type=_seconds,
        default=60.0,
        help="seconds running tasks get to finish on SIGTERM/SIGINT (default 60)",
    )
    p.add_argument(
        "--poll-wait", type=_poll_wait, default=20.0, help="seconds one poll waits for a task (default 20)"
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the optimizer until SIGTERM or SIGINT; returns 143 or 130 after stopping gracefully
    (running tasks finish within the grace period; those that do not are cancelled, and the task
    service removes their files when their process ends)."""
    cli = parser()
    args = cli.parse_args(argv)
    try:
        client = TaskServiceClient(args.service, registration_token=registration_token_from_env())
    except ValueError as exc:
        cli.error(f"--service: {exc}")
    configure_logging(args.log_level)
    spark = start_spark(args.master, args.threads)
    log.info("Spark %s started (master %s)", spark.version, spark.sparkContext.master)
    optimizer = Optimizer(
        client,
        args.group,
        args.threads,
        spark=spark,
        memory_bytes=args.memory,
        name=args.name,
        poll_wait_s=args.poll_wait,
    )
    optimizer.start()
    signum = serve_until_signalled()
    optimizer.stop(args.grace_period)
    if not optimizer.join(timeout=10.0):
        log.warning("some optimizer threads did not end; exiting anyway")
    stop_spark(spark)
    return exit_code(signum)


if __name__ == "__main__":
    raise SystemExit(main())
