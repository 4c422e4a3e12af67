"""``floe-optimizer``: the optimizer process, as the driver pod (or a developer) starts it.

It starts Spark, then serves its group until SIGTERM or SIGINT, when it stops gracefully
(running tasks finish and are completed within ``--grace-period``, then it unregisters)
and exits 0. The registration token comes from the environment, never the command line
(which any process on the host can read): ``FLOE_REGISTRATION_TOKEN``, or the file named
by ``FLOE_REGISTRATION_TOKEN_FILE``, read at each registration.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading
import time
from collections.abc import Sequence
from types import FrameType

from floe.api.units import parse_quantity
from floe.service.client import TaskServiceClient, registration_token_from_env
from floe_optimizer.app import Optimizer
from floe_optimizer.runner import start_spark

log = logging.getLogger("floe_optimizer")

SHUTDOWN_CHECK_S = 0.2


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
    """Run the optimizer until SIGTERM or SIGINT; returns the exit code (0 after a graceful stop)."""
    cli = parser()
    args = cli.parse_args(argv)
    try:
        client = TaskServiceClient(args.service, registration_token=registration_token_from_env())
    except ValueError as exc:
        cli.error(f"--service: {exc}")
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"
    )
    # py4j logs every closed gateway connection at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = start_spark(args.master, args.threads)
    log.info("Spark %s started (master %s)", spark.version, spark.sparkContext.master)

    shutdown = threading.Event()

    def request_shutdown(signum: int, _: FrameType | None) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        shutdown.set()

    # Installed once Spark runs: creating the SparkContext replaces the SIGINT handler.
    signal.signal(signal.SIGTERM, request_shutdown)
    signal.signal(signal.SIGINT, request_shutdown)

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
    # Sleeping rather than shutdown.wait(): the handler runs on this thread, and a signal
    # arriving while Event.wait briefly holds its lock would deadlock the handler's set().
    while not shutdown.is_set():
        time.sleep(SHUTDOWN_CHECK_S)
    optimizer.stop(args.grace_period)
    if not optimizer.join(timeout=10.0):
        log.warning("some optimizer threads did not end; exiting anyway")
    try:
        spark.stop()
    except Exception as exc:  # the JVM may be gone already, e.g. signalled along with its process group
        log.warning("could not stop Spark cleanly: %s", exc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
