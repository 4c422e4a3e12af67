"""The driver pod's entrypoint: Spark in client mode, the optimizer, and executor scaling.

``python -m floe_optimizer.driver`` starts a SparkSession from the group's properties file
(pyspark launches the JVM through spark-submit, in client mode: the driver is this
process) and keeps the optimizer serving the group with ``executors * executorCores``
threads. It re-reads the scale file (the operator's ConfigMap, mounted) every few seconds;
when the count changes it asks Spark for the new executor total and moves the optimizer
threads with it (`ExecutorScaler`): up, another registration beside the running ones; down,
the newest ones stop gracefully (running tasks finish, the rest go back to the queue without
using a retry). Spark and the driver pod stay up throughout;
at zero executors the group has no optimizer registered, which status reports. The
registration token is the file the operator mounts (``FLOE_REGISTRATION_TOKEN_FILE``).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from floe.api.units import parse_quantity
from floe.optimizer.spark_properties import parse_properties
from floe.service.client import RegistrationToken, registration_token_from_env
from floe_optimizer.app import Optimizer
from floe_optimizer.lifecycle import configure_logging, exit_code, serve_until_signalled, stop_spark

log = logging.getLogger("floe.driver")

SCALE_CHECK_S = 2.0
EXECUTOR_ROLE = "spark-role=executor"


class ExecutorScaler:
    """Moves a running SparkContext to a new executor total, and the optimizer threads with it.

    The threads are served by one optimizer registration per step up, each with its step's
    executors' threads. Scaling up registers another one beside those running, so their tasks
    go on; scaling down stops the newest registrations first, each draining (running tasks
    finish within the grace period, the rest go back to the queue without using a retry), and
    registers the difference when it stopped more than the step down.
    """

    def __init__(
        self,
        spark: SparkSession,
        service: str,
        group: str,
        executor_cores: int,
        executor_memory: int,
        name: str,
        grace_s: float,
        poll_wait_s: float,
        registration_token: RegistrationToken | None = None,
    ) -> None:
        self.spark = spark
        self.service = service
        self.group = group
        self.executor_cores = executor_cores
        self.executor_memory = executor_memory
        self.name = name
        self.grace_s = grace_s
        self.poll_wait_s = poll_wait_s
        self.registration_token = registration_token
        self.executors: int | None = None
        """The total last reached; None before the first and after a failed scaling (tried again)."""
        self.optimizers: list[tuple[int, Optimizer]] = []
        """The registrations serving the group, oldest first, each with its executors."""

    def scale(self, executors: int) -> None:
        """Serve the group with ``executors`` executors from now on."""
        if executors == self.executors:
            return
        log.info("scaling executors %s → %d", self.executors, executors)
        held = sum(count for count, _ in self.optimizers)
        while self.optimizers and held > executors:
            count, optimizer = self.optimizers.pop()
            optimizer.stop(self.grace_s)
            held -= count
        self._request_total(executors)
        if executors > held:
            self._register(executors - held)
        self.executors = executors

    def stop(self) -> None:
        """Stop every optimizer registration gracefully."""
        while self.optimizers:
            _, optimizer = self.optimizers.pop()
            optimizer.stop(self.grace_s)
            optimizer.join(timeout=10.0)

    def _register(self, executors: int) -> None:
        # The first keeps the driver's name; later ones are told apart in the service's listings.
        name = self.name if not self.optimizers else f"{self.name}+{len(self.optimizers)}"
        optimizer = Optimizer(
            self.service,
            self.group,
            executors * self.executor_cores,
            spark=self.spark,
            memory_bytes=executors * self.executor_memory,
            name=name,
            poll_wait_s=self.poll_wait_s,
            registration_token=self.registration_token,
        )
        optimizer.start()
        self.optimizers.append((executors, optimizer))

    def _request_total(self, executors: int) -> None:
        sc = self.spark.sparkContext
        jvm: Any = sc._jvm
        jsc: Any = sc._jsc.sc()
        utils = jvm.org.apache.spark.api.python.PythonUtils
        if not jsc.master().startswith("k8s://"):
            return  # local mode: the executor count is fixed by the master URL
        ids = jsc.getExecutorIds()
        registered = [str(ids.apply(i)) for i in range(ids.size())]
        excess = sorted(registered, key=_executor_order)[executors:]
        if excess:
            jsc.killExecutors(utils.toSeq(_java_list(jvm, excess)))
        jsc.requestTotalExecutors(executors, 0, utils.toScalaMap(jvm.java.util.HashMap()))
        self._drop_unregistered(set(registered), executors)

    def _drop_unregistered(self, registered: set[str], executors: int) -> None:
        """Delete executor pods beyond the total that never registered with the driver.

        Spark kills only executors it knows; a pod that is up but never connected back
        (unreachable driver, or a simulated node) would otherwise outlive a scale-down.
        Spark sees the deletion and, being at its total, does not replace it.
        """
        sc = self.spark.sparkContext
        conf = sc.getConf()
        namespace = conf.get("spark.kubernetes.namespace", "default")
        try:
            from kubernetes import client, config
        except ImportError:
            return
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
        core = client.CoreV1Api()
        selector = f"spark-app-selector={sc.applicationId},{EXECUTOR_ROLE}"
        listed = core.api_client.sanitize_for_serialization(
            core.list_namespaced_pod(namespace, label_selector=selector).items
        )
        pods: list[dict[str, Any]] = [
            p["metadata"] for p in listed if not p["metadata"].get("deletionTimestamp")
        ]
        surplus = len(pods) - executors
        unknown = [p for p in pods if p.get("labels", {}).get("spark-exec-id") not in registered]
        unknown.sort(
            key=lambda p: _executor_order(p.get("labels", {}).get("spark-exec-id", "0")), reverse=True
        )
        for pod in unknown[: max(0, surplus)]:
            log.info("deleting executor pod %s: beyond the total and never registered", pod["name"])
            core.delete_namespaced_pod(pod["name"], namespace)


def _executor_order(executor_id: str) -> int:
    return int(executor_id) if executor_id.isdigit() else 0


def _java_list(jvm: Any, values: list[str]) -> Any:
    result = jvm.java.util.ArrayList()
    for value in values:
        result.add(value)
    return result


def read_executors(path: Path, default: int) -> int:
    """The desired executor count in the scale file; ``default`` while it is missing or unreadable."""
    try:
        return max(0, int(path.read_text().strip()))
    except (OSError, ValueError):
        return default


def parser() -> argparse.ArgumentParser:
    """The command line of the driver entrypoint."""
    p = argparse.ArgumentParser(
        prog="floe-driver", description="An OptimizerGroup's Spark driver and optimizer."
    )
    p.add_argument("--master", required=True, help="e.g. k8s://https://kubernetes.default.svc")
    p.add_argument("--properties-file", required=True, type=Path, help="spark.* properties (key=value lines)")
    p.add_argument("--scale-file", required=True, type=Path, help="file holding the desired executor count")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="override a property")
    p.add_argument("--service", required=True, help="task service base URL")
    p.add_argument("--group", required=True, help="the group to serve, as the task service knows it")
    p.add_argument("--executor-cores", type=int, required=True)
    p.add_argument("--executor-memory", type=parse_quantity, required=True, help="e.g. 2Gi")
    p.add_argument("--name", default=socket.gethostname(), help="shown in status (default: the host name)")
    p.add_argument("--grace-period", type=float, default=60.0, help="seconds running tasks get on a stop")
    p.add_argument("--poll-wait", type=float, default=20.0, help="seconds one poll waits for a task")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run until SIGTERM or SIGINT; returns 143 or 130 after a graceful stop."""
    args = parser().parse_args(argv)
    configure_logging(logging.INFO)
    properties = parse_properties(args.properties_file.read_text())
    for item in args.conf:
        key, _, value = item.partition("=")
        properties[key] = value
    builder = SparkSession.builder.master(args.master)
    for key, value in properties.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    log.info(
        "Spark %s started (master %s, app %s)", spark.version, args.master, spark.sparkContext.applicationId
    )

    scaler = ExecutorScaler(
        spark,
        args.service,
        args.group,
        args.executor_cores,
        args.executor_memory,
        args.name,
        args.grace_period,
        args.poll_wait,
        registration_token_from_env(),
    )
    initial = int(properties.get("spark.executor.instances", "1"))
    next_check = 0.0

    def follow_scale_file() -> None:
        nonlocal next_check
        if time.monotonic() < next_check:
            return
        next_check = time.monotonic() + SCALE_CHECK_S
        try:
            scaler.scale(read_executors(args.scale_file, initial))
        except Exception:
            log.exception("scaling failed; retrying")
            scaler.executors = None

    signum = serve_until_signalled(follow_scale_file)
    scaler.stop()
    stop_spark(spark)
    return exit_code(signum)


if __name__ == "__main__":
    raise SystemExit(main())
