"""The driver pod's entrypoint: Spark in client mode, the optimizer, and executor scaling.

``python -m floe_optimizer.driver`` starts a SparkSession from the group's properties file
(pyspark launches the JVM through spark-submit, in client mode: the driver is this process) and
keeps the optimizer serving the group with ``executors * executorCores`` threads. It follows the
executor count the operator decides (`DesiredExecutors`): the task service's answer, long-polled
so a decision arrives at once, and the scale file (the operator's ConfigMap, mounted, which the
kubelet refreshes only every minute or so) while the service has none or cannot be reached. When
the count changes it asks Spark for the new executor total and moves the optimizer threads with
it (`ExecutorScaler`): up, another registration beside the running ones; down, the newest ones
stop gracefully (running tasks finish, the rest go back to the queue without using a retry).
Spark and the driver pod stay up throughout; at zero executors the group has no optimizer
registered, which status reports. The registration token is the file the operator mounts
(``FLOE_REGISTRATION_TOKEN_FILE``).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from floe.api.units import parse_quantity
from floe.protocol.client import (
    RegistrationToken,
    RequestFailed,
    ServiceUnavailable,
    TaskServiceClient,
    Unauthorized,
    UnknownGroup,
    registration_token_from_env,
)
from floe.protocol.spark_properties import parse_properties
from floe_optimizer.app import Optimizer
from floe_optimizer.lifecycle import configure_logging, exit_code, serve_until_signalled, stop_spark
from floe_optimizer.python_daemon import DAEMON_MODULE, DAEMON_MODULE_PROPERTY
from floe_optimizer.startup_cpu import StartupCpuSettler, startup_limit_above

log = logging.getLogger("floe.driver")

SCALE_CHECK_S = 2.0
"""How often the scale file is read."""
COUNT_WAIT_S = 20.0
"""How long one request for the executor count waits for a change."""
COUNT_RETRY_S = 5.0
"""Pause after a failed request for the count (the service restarting, or too old to answer), and
after a failed resize of executor pods (the API server unreachable)."""
EXECUTOR_ROLE = "spark-role=executor"
EXECUTOR_INSTANCES = "spark.executor.instances"


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
        registered = registered_executors(sc)
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
        namespace = spark_namespace(sc)
        core = kubernetes_core_api()
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


class DesiredExecutors:
    """The executor count the driver follows: the task service's, as the operator decided it,
    else the scale file's.

    A thread long-polls the service (``GET /v1/executors``) and `changed` is set when an
    answer differs from the last; the main loop waits on it, so it scales as a decision arrives.
    While the service has no count (the operator restarted and has not decided yet) or cannot
    be reached, the scale file, re-read every `SCALE_CHECK_S`, stands in.
    """

    def __init__(self, client: TaskServiceClient, group: str, scale_file: Path, default: int) -> None:
        self._client = client
        self._group = group
        self._scale_file = scale_file
        self._default = default
        self._lock = threading.Lock()
        self._served: int | None = None
        self._stop = threading.Event()
        self.changed = threading.Event()
        """Set when the service answers a new count; cleared by whoever acts on it."""
        self._thread = threading.Thread(target=self._watch, name="floe-executor-count", daemon=True)

    def start(self) -> None:
        """Start following the service's count."""
        self._thread.start()

    def stop(self) -> None:
        """Stop following; an outstanding request is aborted."""
        self._stop.set()
        self._client.close()
        self._thread.join(timeout=5.0)

    def current(self) -> int:
        """The count to run now: the service's last answer, else the scale file's."""
        with self._lock:
            served = self._served
        return served if served is not None else read_executors(self._scale_file, self._default)

    def _watch(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                known = self._served
            try:
                served = self._client.executors(self._group, known=known, wait_s=COUNT_WAIT_S)
            except (ServiceUnavailable, RequestFailed, Unauthorized, UnknownGroup, OSError, ValueError) as e:
                if self._stop.is_set():
                    return
                log.info("no executor count from the task service (%s); following the scale file", e)
                with self._lock:
                    self._served = None
                self._stop.wait(COUNT_RETRY_S)
                continue
            if served != known:
                with self._lock:
                    self._served = served
                self.changed.set()
            if served is None:
                # Asked without a known count, the service answers at once: ask again later.
                self._stop.wait(COUNT_RETRY_S)


def kubernetes_core_api() -> Any:
    """The core API of the cluster the driver runs in (its ServiceAccount), else of ``$KUBECONFIG``."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
    return client.CoreV1Api()


def spark_namespace(sc: SparkContext) -> str:
    """The namespace Spark creates the executor pods in."""
    return str(sc.getConf().get("spark.kubernetes.namespace", "default"))


def registered_executors(sc: SparkContext) -> list[str]:
    """The ids of the executors registered with the driver now."""
    # One call across the gateway, not one per executor: the driver asks every tick.
    listed = str(sc._jsc.sc().getExecutorIds().mkString(","))
    return listed.split(",") if listed else []


def _executor_order(executor_id: str) -> int:
    return int(executor_id) if executor_id.isdigit() else 0


def _java_list(jvm: Any, values: list[str]) -> Any:
    result = jvm.java.util.ArrayList()
    for value in values:
        result.add(value)
    return result


def start_session(master: str, properties: dict[str, str]) -> SparkSession:
    """The driver's SparkSession on `master` with `properties`, whatever its executor count.

    spark-submit, which pyspark runs to start the JVM, refuses ``spark.executor.instances`` 0
    ("Number of executors must be a positive number") though Spark's Kubernetes backend takes
    it and starts no executor pod: a group at zero executors (autoscaled) would never get a
    driver. So the JVM is started without the count, and the context is given it."""
    launch = SparkConf(loadDefaults=False).setMaster(master)
    launch.setAll([(k, v) for k, v in properties.items() if k != EXECUTOR_INSTANCES])
    conf = SparkConf(loadDefaults=False).setMaster(master).setAll(list(properties.items()))
    SparkContext(conf=conf, gateway=launch_gateway(launch))  # type: ignore[no-untyped-call]
    return SparkSession.builder.getOrCreate()


def startup_cpu_settler(
    spark: SparkSession, properties: dict[str, str], executor_cores: int
) -> StartupCpuSettler | None:
    """The resizer of executor pods that start with a CPU limit above ``executor_cores``, when
    they do (on Kubernetes only)."""
    sc = spark.sparkContext
    if not str(sc.master).startswith("k8s://") or not startup_limit_above(properties, executor_cores):
        return None
    return StartupCpuSettler(kubernetes_core_api(), spark_namespace(sc), sc.applicationId, executor_cores)


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
    # The executors of this image start their Python daemon beside the JVM (python_daemon).
    properties.setdefault(DAEMON_MODULE_PROPERTY, DAEMON_MODULE)
    spark = start_session(args.master, properties)
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
    initial = int(properties.get(EXECUTOR_INSTANCES, "1"))
    desired = DesiredExecutors(
        TaskServiceClient(args.service, registration_token=registration_token_from_env()),
        args.group,
        args.scale_file,
        initial,
    )
    desired.start()
    next_check = 0.0
    settler = startup_cpu_settler(spark, properties, args.executor_cores)
    settle_after = 0.0

    def follow_desired_count() -> None:
        nonlocal next_check, settle_after
        # Scaling first: resizing may list pods, and a new count's pods should not wait for that.
        if time.monotonic() >= next_check or desired.changed.is_set():
            desired.changed.clear()
            next_check = time.monotonic() + SCALE_CHECK_S
            try:
                scaler.scale(desired.current())
            except Exception:
                log.exception("scaling failed; retrying")
                scaler.executors = None
        if settler is not None and time.monotonic() >= settle_after:
            try:
                settler.settle(registered_executors(spark.sparkContext))
            except Exception:
                log.exception(
                    "resizing executor pods to their CPU limit failed; retrying in %g s", COUNT_RETRY_S
                )
                settle_after = time.monotonic() + COUNT_RETRY_S

    # A decision wakes the loop: the executor pods it asks for are on a waking group's path.
    signum = serve_until_signalled(follow_desired_count, wake=desired.changed)
    desired.stop()
    scaler.stop()
    stop_spark(spark)
    return exit_code(signum)


if __name__ == "__main__":
    raise SystemExit(main())
