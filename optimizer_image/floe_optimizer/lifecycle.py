"""The optimizer process's life, shared by ``floe-optimizer`` and the driver pod's entrypoint
(`floe_optimizer.driver`): logging, waiting for SIGTERM or SIGINT, stopping Spark."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

from pyspark.sql import SparkSession

log = logging.getLogger("floe_optimizer")

LOG_FORMAT = "%(asctime)s %(levelname)s [%(threadName)s] %(name)s: %(message)s"
CHECK_S = 0.2


def configure_logging(level: int | str) -> None:
    """Timestamped, thread-named log lines; py4j's chatter (a line per closed gateway connection) off."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    logging.getLogger("py4j").setLevel(logging.WARNING)


def serve_until_signalled(tick: Callable[[], None] | None = None, wake: threading.Event | None = None) -> int:
    """Block until SIGTERM or SIGINT, calling ``tick`` every `CHECK_S` seconds meanwhile, and at
    once when ``wake`` is set (``tick`` clears it); return the signal's number.

    Call it once Spark runs: creating the SparkContext replaces the SIGINT handler.
    """
    shutdown = threading.Event()
    received: list[int] = []

    def request_shutdown(signum: int, _: FrameType | None) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        received.append(signum)
        shutdown.set()

    signal.signal(signal.SIGTERM, request_shutdown)
    signal.signal(signal.SIGINT, request_shutdown)
    # Never shutdown.wait(): the handler runs on this thread, and a signal arriving while
    # Event.wait briefly holds that event's lock would deadlock the handler's set(). Waiting on
    # another event (`wake`, or one never set) is safe.
    pause = wake if wake is not None else threading.Event()  # never set: a plain pause
    while not shutdown.is_set():
        if tick is not None:
            tick()
        pause.wait(CHECK_S)
    return received[0]


def exit_code(signum: int) -> int:
    """How a process a signal stopped exits, as shells report it: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + signum


def stop_spark(spark: SparkSession) -> None:
    """Stop Spark, or say why it could not be stopped cleanly."""
    try:
        spark.stop()
    except Exception as exc:  # the JVM may be gone already, e.g. signalled along with its process group
        log.warning("could not stop Spark cleanly: %s", exc)
