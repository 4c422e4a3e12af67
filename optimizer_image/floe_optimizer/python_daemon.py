"""An executor's Python daemon, started beside its JVM instead of after it.

Spark starts an executor's Python daemon (``pyspark.daemon``, which forks the Python workers)
when the first Python task reaches the executor, and the worker then imports floe's rewrite:
about a second, on the path of a group waking from zero to its first task. The executor pod's
entrypoint starts `serve` beside the JVM: it imports what floe's tasks need while the JVM starts
and then waits on a Unix socket. The driver names this module as Spark's daemon module
(``spark.python.daemon.module``), so when Spark starts its daemon, `main` runs: it hands the
JVM's pipes (its stdin, stdout and stderr) and environment to the waiting process, which from
then on is Spark's daemon (``pyspark.daemon.manager``: it tells the JVM its port, forks workers,
stops when the JVM closes its stdin). The process Spark started stays as the JVM's handle on the
daemon until the daemon ends, and passes a SIGTERM on to it.

Spark's own daemon runs instead, in the process Spark started, whenever the handover cannot be
made: no process waits (another pod entrypoint, or Spark restarting its daemon), or the waiting
one was started unlike the one Spark starts (another interpreter or hash seed), which it refuses.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from types import FrameType

DAEMON_MODULE_PROPERTY = "spark.python.daemon.module"
DAEMON_MODULE = "floe_optimizer.python_daemon"
SOCKET_ENV = "FLOE_PYTHON_DAEMON_SOCKET"
"""The Unix socket a started daemon waits on; set by the executor pod's entrypoint."""
HASH_SEED = "PYTHONHASHSEED"
MESSAGE_LIMIT = 1 << 20
"""The largest environment a handover carries, in bytes of JSON."""
HANDED_FDS = (0, 1, 2)
PARENT_CHECK_S = 1.0
"""How often a waiting daemon checks that its JVM still runs (it ends with it)."""


def serve(path: str) -> int:
    """Import floe's tasks and Spark's daemon, wait for the handover on `path`, and run as Spark's
    daemon from then on (this returns only when the handover is refused or fails)."""
    # Listening first: a JVM that asks for its daemon before the imports are done waits for
    # them (it would import as much itself) instead of finding no one and starting its own.
    jvm = os.getppid()  # the entrypoint execs the JVM: this process's parent
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    listener.bind(path)
    listener.listen(1)
    import pyspark.daemon  # noqa: F401  (these imports are what the early start saves)

    import floe_optimizer.spark_runner  # noqa: F401

    try:
        connection = _accept_while_parent_lives(listener, jvm)
    finally:
        listener.close()
        os.unlink(path)  # one handover: a daemon Spark restarts is its own
    if connection is None:
        return 0
    message, fds, _, _ = socket.recv_fds(connection, MESSAGE_LIMIT, len(HANDED_FDS))
    handed = json.loads(message)
    refusal = _refusal(handed, fds)
    if refusal is not None:
        for fd in fds:
            os.close(fd)
        connection.sendall(json.dumps({"refused": refusal}).encode())
        connection.close()
        print(f"floe python daemon: not taking over Spark's daemon: {refusal}", file=sys.stderr)
        return 1
    for fd, target in zip(fds, HANDED_FDS, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    _adopt_environment(handed["environ"])
    connection.sendall(json.dumps({"pid": os.getpid()}).encode())
    # The connection stays open, unread: the handing process waits for it to close, which it
    # does when this daemon (and every worker it forked) has exited.
    return _run_spark_daemon()


def _accept_while_parent_lives(listener: socket.socket, parent: int) -> socket.socket | None:
    """The handover's connection; None once `parent` (the JVM) has gone without one."""
    listener.settimeout(PARENT_CHECK_S)
    while os.getppid() == parent:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        connection.settimeout(None)
        return connection
    return None


def _refusal(handed: dict[str, object], fds: list[int]) -> str | None:
    """Why this process cannot stand in for the daemon Spark started; None if it can."""
    environ = handed.get("environ")
    if len(fds) != len(HANDED_FDS) or not isinstance(environ, dict):
        return "the handover carried no pipes or no environment"
    if handed.get("executable") != sys.executable:
        return f"Spark runs {handed.get('executable')}, this is {sys.executable}"
    if environ.get(HASH_SEED) != os.environ.get(HASH_SEED):
        return (
            f"Spark's {HASH_SEED} is {environ.get(HASH_SEED)!r}, this process started with "
            f"{os.environ.get(HASH_SEED)!r} (string hashes would differ)"
        )
    return None


def _adopt_environment(environ: dict[str, str]) -> None:
    """The environment Spark gave its daemon, for this one and the workers it forks; the
    entries of its PYTHONPATH go before this interpreter's path, as they would have at start."""
    os.environ.clear()
    os.environ.update(environ)
    entries = [entry for entry in environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:0] = [entry for entry in entries if entry not in sys.path]


def _run_spark_daemon() -> int:
    import pyspark.daemon

    pyspark.daemon.manager()  # type: ignore[no-untyped-call]  # exits when Spark closes its stdin
    return 0


def main() -> int:
    """Spark's daemon module: hand over to the daemon waiting on ``$FLOE_PYTHON_DAEMON_SOCKET``
    and stay until it ends, or run Spark's daemon here when none takes over."""
    path = os.environ.get(SOCKET_ENV)
    connection = _connect(path) if path else None
    if connection is None:
        return _run_spark_daemon()
    message = {"executable": sys.executable, "environ": dict(os.environ)}
    with connection:
        socket.send_fds(connection, [json.dumps(message).encode()], list(HANDED_FDS))
        reply = json.loads(connection.recv(MESSAGE_LIMIT) or b"{}")
        if "pid" not in reply:
            print(
                f"floe python daemon: running Spark's own: {reply.get('refused', 'no answer')}",
                file=sys.stderr,
            )
            return _run_spark_daemon()
        daemon = int(reply["pid"])

        def stop_daemon(signum: int, _: FrameType | None) -> None:
            # Spark stops its daemon with a SIGTERM to the process it started: this one.
            with contextlib.suppress(ProcessLookupError):
                os.kill(daemon, signum)
            os._exit(0)

        signal.signal(signal.SIGTERM, stop_daemon)
        # This process lets go of the pipes: the daemon's copies are the JVM's ends now.
        with open(os.devnull, "r+b") as null:
            for fd in HANDED_FDS:
                os.dup2(null.fileno(), fd)
        while connection.recv(4096):
            pass
    return 0


def _connect(path: str) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError:
        connection.close()
        return None
    return connection


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"] and len(sys.argv) == 3:
        raise SystemExit(serve(sys.argv[2]))
    if len(sys.argv) > 1:
        print("usage: python -m floe_optimizer.python_daemon [serve SOCKET]", file=sys.stderr)
        raise SystemExit(64)
    raise SystemExit(main())
