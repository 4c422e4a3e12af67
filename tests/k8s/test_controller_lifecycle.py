"""The operator's lifecycle against a real API server: restarts, two replicas, group deletion,
groups of the same name in two namespaces, the no-executor warning and catalog Secret changes.

How leadership works (the whole story is in `floe.controller.leader`): every replica runs kopf
with peering, each with its own priority, keeping a record (priority, lastseen, lifetime) in
the KopfPeering object of each watched namespace. kopf pauses every handler and timer of a
replica that sees a live record with a higher priority, so only the leader reconciles
OptimizerGroups and OptimizedTables; the engine's ticks and the status flush run in the
controller's own thread and only while `Leadership.is_leader` reads the same object and finds
this replica on top. A replica that stops cleanly removes its record at once; a crashed one's
record expires after its lifetime. Then the next replica is unpaused: its resume handlers
register every group and table (last optimizing times taken from status) and its engine
starts ticking, planning afresh: nothing the old leader had in flight is committed.

The replicas here run in-process (kopf in a thread each) with short peering lifetimes and
leader checks, and fast engine rounds; each test uses its own namespace(s).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession
from refused_tables import UNKNOWN_SORT

from floe.controller import kube as kube_module
from floe.controller.config import OperatorConfig
from floe.controller.controller import Controller
from floe.controller.main import run_kopf
from floe.controller.objects import DRIVER_SERVICE_ACCOUNT
from floe.controller.status import epoch, timestamp
from floe.local.reference_reader import ReferenceReader
from floe.optimizing.registry import EngineEvent
from floe.optimizing.table_state import TableRuntime, TableState
from floe.protocol.assignment import TaskAssignment
from floe.protocol.client import TaskServiceClient, Unauthorized
from floe.protocol.errors import UnknownGroup
from floe.protocol.wire import RegisterRequest, RegisterResponse
from floe.tables.scan import scan_table
from floe_optimizer.app import Optimizer

from .conftest import REPO_ROOT, K8sCluster

pytestmark = pytest.mark.k8s

PEERING_CRDS = REPO_ROOT / "operator" / "floe" / "controller" / "peering-crds.yaml"
PEERING_LIFETIME_S = 8
GHOST_LIFETIME_S = 6
TABLE = "db.t"
SECRET_MARK = "never-shown-3c1d"


# -- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def kubeconfig(k8s: K8sCluster) -> Iterator[None]:
    """CRDs installed (floe's and kopf's peering), and the kubeconfig the replicas log in with."""
    k8s.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    k8s.kubectl("apply", "-f", str(PEERING_CRDS))
    for crd in (
        "optimizergroups.floe.dev",
        "optimizedtables.floe.dev",
        "optimizedtablesets.floe.dev",
        "kopfpeerings.kopf.dev",
    ):
        k8s.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(k8s.kubeconfig)
    kube_module.load_config()
    yield
    if saved is None:
        os.environ.pop("KUBECONFIG", None)
    else:
        os.environ["KUBECONFIG"] = saved


def _namespace(k8s: K8sCluster, prefix: str) -> str:
    """A fresh namespace with the drivers' ServiceAccount (the chart's name), without which the API
    server refuses the driver pods. No Role: kwok runs the pods, and no Spark calls the API here."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    k8s.kubectl("create", "namespace", name)
    k8s.kubectl("create", "serviceaccount", DRIVER_SERVICE_ACCOUNT, "-n", name)
    return name


TOKEN = "lifecycle-registration-token"
"""Every replica's registration token: the chart gives all replicas of an install the same one."""


class Replica:
    """One operator replica in-process: kopf in a thread, task service, engine thread."""

    def __init__(self, namespaces: list[str], priority: int, identity: str) -> None:
        self.config = OperatorConfig(
            namespaces=namespaces,
            service_port=0,
            service_url="http://floe-operator.floe-system.svc:7070",
            default_image="floe-optimizer:test",
            priority=priority,
            identity=identity,
            tick_interval_s=0.2,
            status_interval_s=0.5,
            refresh_interval_s=0.5,
            peering_lifetime_s=PEERING_LIFETIME_S,
            leader_check_interval_s=0.5,
            secret_interval_s=1.0,
            registration_token=TOKEN,
        )
        self.controller = Controller(self.config, kube_module.Kube())
        self.events: list[EngineEvent] = []
        self.controller.engine.subscribe(self.events.append)
        self._stop = threading.Event()
        self._kopf: threading.Thread | None = None
        self._engine_started = False

    def start_kopf(self) -> Replica:
        """kopf only: handlers run (as leader), but the engine does not tick yet."""
        self.controller.leadership.ensure_peering_objects()
        ready = threading.Event()
        self._kopf = threading.Thread(
            target=run_kopf, args=(self.controller, self._stop, ready), daemon=True, name=self.config.identity
        )
        self._kopf.start()
        assert ready.wait(60), "kopf did not start"
        return self

    def start_engine(self) -> Replica:
        """Task service and the engine thread (which ticks only while leading)."""
        self.controller.start()
        self._engine_started = True
        return self

    def start(self) -> Replica:
        return self.start_kopf().start_engine()

    @property
    def url(self) -> str:
        return self.controller.server.url

    def runtime(self, table_id: str) -> TableRuntime | None:
        return self.controller.engine.runtimes.get(table_id)

    def known(self, table_id: str) -> TableRuntime:
        runtime = self.runtime(table_id)
        assert runtime is not None, f"{table_id} is not registered"
        return runtime

    def stop(self) -> None:
        """The engine stops ticking first, then kopf stops (and removes its peering record)."""
        if self._engine_started:
            self.controller.stop()
            self._engine_started = False
        self._stop.set()
        if self._kopf is not None:
            self._kopf.join(60)
            assert not self._kopf.is_alive(), "kopf did not stop"
            self._kopf = None


@pytest.fixture
def replicas(kubeconfig: None) -> Iterator[Callable[..., Replica]]:
    """Makes replicas; whatever still runs at the end of the test is stopped."""
    made: list[Replica] = []

    def make(namespaces: list[str], priority: int = 100, identity: str = "") -> Replica:
        replica = Replica(namespaces, priority, identity or f"floe-test-{uuid.uuid4().hex[:6]}")
        made.append(replica)
        return replica

    yield make
    for replica in made:
        replica.stop()


def _apply(k8s: K8sCluster, manifest: dict[str, Any]) -> None:
    k8s.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def _group(name: str, namespace: str, executors: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizerGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"executors": executors, "executorCores": 1, "executorMemory": "1Gi"},
    }


def _catalog_properties(catalog: SqlCatalog) -> dict[str, str]:
    return {"type": "sql", **{k: str(v) for k, v in catalog.properties.items()}}


def _table(
    name: str, namespace: str, group: str, catalog: dict[str, Any], identifier: str = TABLE
) -> dict[str, Any]:
    """Four small appends trigger minor optimizing (triggerFileCount 3), and one pass settles it."""
    return {
        "apiVersion": "floe.dev/v1alpha1",
        "kind": "OptimizedTable",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "table": identifier,
            "catalog": catalog,
            "group": group,
            "minor": {"triggerFileCount": 3},
            "minPlanInterval": "0s",
        },
    }


def _inline(catalog: SqlCatalog) -> dict[str, Any]:
    return {"name": catalog.name, "properties": _catalog_properties(catalog)}


def _small_files(catalog: SqlCatalog, identifier: str = TABLE, files: int = 4) -> Table:
    schema = pa.schema([("id", pa.int64()), ("val", pa.string())])
    table = catalog.create_table(identifier, schema=schema)
    for i in range(files):
        ids = list(range(i * 5, i * 5 + 5))
        table.append(pa.table({"id": ids, "val": [f"v{n}" for n in ids]}, schema=schema))
    return table


def _append(table: Table, start: int) -> None:
    schema = pa.schema([("id", pa.int64()), ("val", pa.string())])
    table.append(pa.table({"id": [start], "val": [f"v{start}"]}, schema=schema))


def _snapshot(table: Table) -> int | None:
    current = table.refresh().current_snapshot()
    return current.snapshot_id if current else None


def _get(k8s: K8sCluster, *args: str) -> Any:
    result = k8s.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def _status(k8s: K8sCluster, kind: str, name: str, namespace: str) -> dict[str, Any]:
    return dict((_get(k8s, kind, name, "-n", namespace) or {}).get("status") or {})


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def _events(k8s: K8sCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = _get(k8s, "events", "-n", namespace)["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


class HeldOptimizer:
    """An optimizer that takes a task and acks it, then never completes it (nor heartbeats)."""

    def __init__(self, url: str, group: str) -> None:
        self.client = TaskServiceClient(url, registration_token=TOKEN)
        self.session: RegisterResponse = self.client.register(
            RegisterRequest(group=group, threads=1, memory_bytes=1 << 30, name="held")
        )

    def take_task(self, k8s: K8sCluster) -> TaskAssignment:
        taken: list[TaskAssignment] = []

        def poll() -> bool:
            task = self.client.poll(self.session.token, 0, wait_s=1.0)
            if task is not None:
                self.client.ack(self.session.token, task.attempt_id)
                taken.append(task)
            return bool(taken)

        k8s.wait_for("a task handed out", poll, timeout=60, interval=0.1)
        return taken[0]


# -- 1. restarts -----------------------------------------------------------------------------


def test_restart_restores_schedule_state_and_does_not_commit_again(
    k8s: K8sCluster, replicas: Callable[..., Replica], sql_catalog: SqlCatalog, spark: SparkSession
) -> None:
    ns = _namespace(k8s, "restart")
    table = _small_files(sql_catalog)
    table_id = f"{ns}/t"
    first = replicas([ns]).start()
    _apply(k8s, _group("g", ns))
    _apply(k8s, _table("t", ns, "g", _inline(sql_catalog)))
    optimizer = Optimizer(
        first.url, group=f"{ns}/g", threads=1, spark=spark, name="first", registration_token=TOKEN
    )
    optimizer.start()
    try:

        def optimized_and_flushed() -> bool:
            runtime, status = first.runtime(table_id), _status(k8s, "ot", "t", ns)
            return (
                runtime is not None
                and runtime.settled
                and runtime.last_minor_s is not None
                and status.get("state") == "IDLE"
                and status.get("lastMinorOptimizing") == timestamp(runtime.last_minor_s)
            )

        k8s.wait_for("optimized, settled and in status", optimized_and_flushed, timeout=90)
    finally:
        optimizer.stop(grace_s=1)
    first.stop()
    optimized = _snapshot(table)
    status = _status(k8s, "ot", "t", ns)
    expected = tuple(
        epoch(status.get(k)) for k in ("lastMinorOptimizing", "lastMajorOptimizing", "lastFullOptimizing")
    )
    assert expected[0] is not None and sum(1 for s in table.snapshots()) == 5  # 4 appends + 1 replace

    # A new instance, handlers only (its engine does not tick yet, so nothing but status can
    # have given the runtime its times): the last optimizing times come back from status.
    second = replicas([ns]).start_kopf()

    def restored() -> bool:
        runtime = second.runtime(table_id)
        return (
            runtime is not None
            and (runtime.last_minor_s, runtime.last_major_s, runtime.last_full_s) == expected
        )

    k8s.wait_for("last optimizing times restored from status", restored, timeout=30)

    # Now ticking, with an optimizer ready: the already-optimized table is not optimized again.
    second.start_engine()
    optimizer = Optimizer(
        second.url, group=f"{ns}/g", threads=1, spark=spark, name="second", registration_token=TOKEN
    )
    optimizer.start()
    try:
        k8s.wait_for("the optimizer registered", lambda: optimizer.optimizer_id is not None, timeout=30)
        rounds = second.controller.rounds
        k8s.wait_for(
            "the new engine settled on the optimized snapshot",
            lambda: (
                (r := second.runtime(table_id)) is not None
                and r.settled
                and r.evaluated_snapshot_id == optimized
                and second.controller.rounds >= rounds + 10
            ),
            timeout=30,
        )
    finally:
        optimizer.stop(grace_s=1)
    assert _snapshot(table) == optimized
    assert not [e for e in second.events if e.reason in ("OptimizingStarted", "Committed")]
    assert epoch(_status(k8s, "ot", "t", ns).get("lastMinorOptimizing")) == expected[0]


def test_process_in_flight_at_restart_is_not_committed(
    k8s: K8sCluster,
    replicas: Callable[..., Replica],
    sql_catalog: SqlCatalog,
    reference: ReferenceReader,
    spark: SparkSession,
) -> None:
    ns = _namespace(k8s, "inflight")
    table = _small_files(sql_catalog)
    start = _snapshot(table)
    rows = reference.rows(sql_catalog.name, TABLE)
    first = replicas([ns]).start()
    _apply(k8s, _group("g", ns))
    _apply(k8s, _table("t", ns, "g", _inline(sql_catalog)))
    k8s.wait_for("group registered", lambda: f"{ns}/g" in first.controller.engine.groups, timeout=30)
    held = HeldOptimizer(first.url, f"{ns}/g")
    task = held.take_task(k8s)
    k8s.wait_for(
        "the process in status",
        lambda: _status(k8s, "ot", "t", ns).get("currentProcess") == task.process_id,
        timeout=30,
    )
    assert _status(k8s, "ot", "t", ns)["state"] == "MINOR_OPTIMIZING"
    first.stop()

    second = replicas([ns]).start()
    k8s.wait_for(
        "the table pending again under the new engine (no optimizer yet)",
        lambda: (r := second.runtime(f"{ns}/t")) is not None and r.state == TableState.PENDING,
        timeout=30,
    )
    k8s.wait_for(
        "status no longer shows the abandoned process",
        lambda: (
            (s := _status(k8s, "ot", "t", ns)).get("currentProcess") is None and s.get("state") == "PENDING"
        ),
        timeout=30,
    )
    assert _snapshot(table) == start
    # The held optimizer's session belonged to the old task service: the new one refuses it.
    with pytest.raises(Unauthorized):
        TaskServiceClient(second.url).heartbeat(held.session.token)

    optimizer = Optimizer(
        second.url, group=f"{ns}/g", threads=1, spark=spark, name="second", registration_token=TOKEN
    )
    optimizer.start()
    try:
        k8s.wait_for(
            "a fresh process committed",
            lambda: any(e.reason == "Committed" for e in second.events),
            timeout=90,
        )
    finally:
        optimizer.stop(grace_s=1)
    committed = [e for e in second.events if e.reason == "Committed"]
    assert len(committed) == 1 and not committed[0].message.startswith(task.process_id)
    replaces = [
        s for s in table.refresh().snapshots() if s.summary and s.summary.operation.value == "replace"
    ]
    assert len(replaces) == 1
    assert reference.rows(sql_catalog.name, TABLE) == rows


# -- 2. two replicas ---------------------------------------------------------------------------


def test_two_replicas_only_the_leader_works_and_the_other_takes_over(
    k8s: K8sCluster, replicas: Callable[..., Replica], sql_catalog: SqlCatalog
) -> None:
    ns = _namespace(k8s, "leader")
    table = _small_files(sql_catalog)
    table_id = f"{ns}/t"
    high = replicas([ns], priority=200, identity="replica-high").start()
    k8s.wait_for("the first replica leads", high.controller.leadership.is_leader, timeout=30)
    low = replicas([ns], priority=100, identity="replica-low").start()
    _apply(k8s, _group("g", ns))
    _apply(k8s, _table("t", ns, "g", _inline(sql_catalog)))

    k8s.wait_for(
        "the leader reconciled and flushed status",
        lambda: (
            _status(k8s, "ot", "t", ns).get("dataFiles") == 4
            and _get(k8s, "pod", "floe-g-driver", "-n", ns) is not None
        ),
        timeout=30,
    )
    rounds = high.controller.rounds
    k8s.wait_for("a few more leader rounds", lambda: high.controller.rounds >= rounds + 10, timeout=30)
    assert not low.controller.leadership.is_leader()
    assert low.controller.rounds == 0  # its engine never ticked
    assert not low.controller.engine.groups and not low.controller.engine.runtimes  # kopf paused it
    assert low.controller.flusher.patches == 0 and high.controller.flusher.patches > 0
    driver_uid = _get(k8s, "pod", "floe-g-driver", "-n", ns)["metadata"]["uid"]
    assert [e["reason"] for e in _events(k8s, ns, "g")].count("DriverCreated") == 1

    # The leader stops (cleanly: its peering record goes at once); the other takes over.
    high.stop()
    stopped = time.monotonic()
    _append(table, 100)  # a change only a working leader notices and writes to status
    k8s.wait_for(
        "the other replica leads, reconciles and flushes",
        lambda: (
            low.controller.leadership.is_leader()
            and f"{ns}/g" in low.controller.engine.groups
            and low.runtime(table_id) is not None
            and _status(k8s, "ot", "t", ns).get("dataFiles") == 5
            # counted once the flush's patches have all returned: a moment after the API server has them
            and low.controller.flusher.patches > 0
        ),
        timeout=PEERING_LIFETIME_S + 20,
    )
    assert time.monotonic() - stopped < PEERING_LIFETIME_S + 10
    assert low.controller.rounds > 0
    assert _get(k8s, "pod", "floe-g-driver", "-n", ns)["metadata"]["uid"] == driver_uid

    # A leader that crashed leaves its record behind; the others wait until it expires.
    now = datetime.datetime.now(datetime.UTC).isoformat()
    ghost = {"status": {"crashed-leader": {"priority": 1000, "lifetime": GHOST_LIFETIME_S, "lastseen": now}}}
    k8s.kubectl("patch", "kopfpeering", "floe", "-n", ns, "--type=merge", "-p", json.dumps(ghost))
    appeared = time.monotonic()
    k8s.wait_for("the replica yields", lambda: not low.controller.leadership.is_leader(), timeout=10)
    paused_rounds = low.controller.rounds
    time.sleep(1.0)
    assert low.controller.rounds == paused_rounds  # no engine rounds while the crashed leader's record lives
    k8s.wait_for(
        "the crashed leader's record expired and the replica leads again",
        lambda: low.controller.leadership.is_leader() and low.controller.rounds > paused_rounds,
        timeout=GHOST_LIFETIME_S + 15,
    )
    assert time.monotonic() - appeared >= GHOST_LIFETIME_S - 1.5


def test_a_standalone_operator_leads_at_once_and_reconciles(
    k8s: K8sCluster, kubeconfig: None, sql_catalog: SqlCatalog
) -> None:
    """``floe operator --standalone``, as a process of its own: no peering object anywhere, and the
    table is reconciled, refreshed and its status written (kopf used to wait for a peering forever)."""
    ns = _namespace(k8s, "standalone")
    _small_files(sql_catalog)
    env = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE")}
    env.update(KUBECONFIG=str(k8s.kubeconfig), FLOE_REGISTRATION_TOKEN=TOKEN)
    floe = Path(sys.executable).with_name("floe")
    command = [str(floe), "-v", "operator", "--standalone", f"--namespace={ns}", "--service-port=0"]
    log_path = k8s.work_dir / f"{ns}-operator.log"
    with log_path.open("wb") as log:
        operator = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _apply(k8s, _group("g", ns, executors=0))
        _apply(k8s, _table("t", ns, "g", _inline(sql_catalog)))

        def reconciled() -> bool:
            assert operator.poll() is None, f"the operator exited:\n{log_path.read_text()[-3000:]}"
            status = _status(k8s, "ot", "t", ns)
            return status.get("dataFiles") == 4 and status.get("state") == "PENDING"

        k8s.wait_for("the standalone operator to reconcile the table", reconciled, timeout=60)
        assert _condition(_status(k8s, "ot", "t", ns), "CatalogReady")["status"] == "True"
        assert _get(k8s, "pod", "floe-g-driver", "-n", ns) is not None  # the group was reconciled too
        assert _get(k8s, "kopfpeering", "-n", ns)["items"] == []  # standalone: no peering
    finally:
        operator.terminate()
        try:
            operator.wait(30)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait(10)


# -- 3. and 4. groups: deletion, namespaces, no executors ------------------------------------------


def test_deleting_a_group_removes_it_from_the_engine(
    k8s: K8sCluster, replicas: Callable[..., Replica], sql_catalog: SqlCatalog
) -> None:
    ns = _namespace(k8s, "gdel")
    table = _small_files(sql_catalog)
    start = _snapshot(table)
    operator = replicas([ns]).start()
    key = f"{ns}/g"
    _apply(k8s, _group("g", ns))
    _apply(k8s, _table("t", ns, "g", _inline(sql_catalog)))
    k8s.wait_for("group registered", lambda: key in operator.controller.engine.groups, timeout=30)
    held = HeldOptimizer(operator.url, key)
    task = held.take_task(k8s)  # the table now has a process in flight in this group

    k8s.kubectl("delete", "og", "g", "-n", ns, "--wait=true", "--timeout=60s")
    k8s.wait_for("the group gone from the engine", lambda: key not in operator.controller.engine.groups)
    with pytest.raises(UnknownGroup):
        operator.controller.service.group(key)
    with pytest.raises(Unauthorized):  # the group's optimizers were dropped with it
        held.client.heartbeat(held.session.token)
    cancelled = [e for e in operator.events if e.reason == "OptimizingCancelled"]
    assert len(cancelled) == 1 and cancelled[0].message.startswith(task.process_id)

    def waiting_for_the_group() -> bool:
        pending = _condition(_status(k8s, "ot", "t", ns), "Pending")
        return pending.get("status") == "True" and pending.get("message") == "group 'g' does not exist"

    k8s.wait_for("the table pending on a missing group", waiting_for_the_group, timeout=30)
    runtime = operator.runtime(f"{ns}/t")
    assert runtime is not None and runtime.process_id is None
    assert operator.controller.engine.stuck_tables() == {f"{ns}/t": "group 'g' does not exist"}
    assert _snapshot(table) == start


def test_same_named_groups_in_two_namespaces_stay_apart(
    k8s: K8sCluster, replicas: Callable[..., Replica], sql_catalog: SqlCatalog
) -> None:
    a, b = _namespace(k8s, "team-a"), _namespace(k8s, "team-b")
    _small_files(sql_catalog, "db.a")
    _small_files(sql_catalog, "db.b")
    operator = replicas([a, b]).start()
    engine, service = operator.controller.engine, operator.controller.service
    for ns, identifier in ((a, "db.a"), (b, "db.b")):
        _apply(k8s, _group("shared", ns, executors=0))
        _apply(k8s, _table("t", ns, "shared", _inline(sql_catalog), identifier))
    # kopf watches groups and tables apart: a table can be pending before its group is registered.
    k8s.wait_for(
        "both groups registered and both tables pending",
        lambda: (
            set(engine.groups) == {f"{a}/shared", f"{b}/shared"}
            and all(
                (r := operator.runtime(f"{ns}/t")) is not None and r.state == TableState.PENDING
                for ns in (a, b)
            )
        ),
        timeout=30,
    )
    assert set(service.group(f"{a}/shared").stats(time.time())) == {f"{a}/t"}
    assert set(service.group(f"{b}/shared").stats(time.time())) == {f"{b}/t"}

    # An optimizer of A's group serves A's table only.
    held = HeldOptimizer(operator.url, f"{a}/shared")
    task = held.take_task(k8s)
    assert task.process_id == operator.known(f"{a}/t").process_id
    runtime_b = operator.runtime(f"{b}/t")
    assert runtime_b is not None and runtime_b.state == TableState.PENDING
    assert runtime_b.pending_reason == "group 'shared' has no ready optimizer"

    # Deleting B's group leaves A's alone.
    k8s.kubectl("delete", "og", "shared", "-n", b, "--wait=true", "--timeout=60s")
    k8s.wait_for("B's group gone from the engine", lambda: set(engine.groups) == {f"{a}/shared"})
    k8s.wait_for(
        "B's table waits for its own group",
        lambda: operator.known(f"{b}/t").pending_reason == "group 'shared' does not exist",
        timeout=30,
    )
    assert operator.known(f"{a}/t").state == TableState.MINOR_OPTIMIZING
    assert set(service.group(f"{a}/shared").stats(time.time())) == {f"{a}/t"}


def test_pending_table_in_a_group_without_executors_gets_an_event(
    k8s: K8sCluster, replicas: Callable[..., Replica], sql_catalog: SqlCatalog
) -> None:
    ns = _namespace(k8s, "noexec")
    _small_files(sql_catalog, "db.t")
    _small_files(sql_catalog, "db.u")
    replicas([ns]).start()
    for group, table in (("idle", "db.t"), ("idle-too", "db.u")):
        _apply(k8s, _group(group, ns, executors=0))
        _apply(k8s, _table(group, ns, group, _inline(sql_catalog), table))

    def warned(group: str) -> list[dict[str, Any]]:
        return [e for e in _events(k8s, ns, group) if e["reason"] == "NoReadyExecutors"]

    k8s.wait_for(
        "a NoReadyExecutors event on each group",
        lambda: bool(warned("idle") and warned("idle-too")),
        timeout=30,
    )
    for group in ("idle", "idle-too"):
        events = warned(group)
        assert len(events) == 1, events  # once per group, not at every status round
        assert events[0]["type"] == "Warning" and events[0]["involvedObject"]["kind"] == "OptimizerGroup"
        assert events[0]["message"] == "pending: group has no ready executors (1 tables waiting)"
        assert _status(k8s, "og", group, ns).get("readyExecutors") == 0
        assert _status(k8s, "ot", group, ns).get("state") == "PENDING"


def test_a_refused_table_is_degraded_unsupported_with_one_event(
    k8s: K8sCluster, replicas: Callable[..., Replica], refused_table: SqlCatalog
) -> None:
    """A table floe cannot handle: a condition and an Event name the table and its features; no
    process starts; the Event is not repeated on later refreshes."""
    ns = _namespace(k8s, "refused")
    replicas([ns]).start()
    _apply(k8s, _group("g", ns, executors=0))
    _apply(k8s, _table("t", ns, "g", _inline(refused_table)))

    def degraded() -> dict[str, Any]:
        return _condition(_status(k8s, "ot", "t", ns), "Degraded")

    k8s.wait_for("Degraded: Unsupported", lambda: degraded().get("reason") == "Unsupported", timeout=60)
    message = degraded()["message"]
    assert message == f"table db.t is not optimized: it uses {UNKNOWN_SORT}, which floe does not support"
    status = _status(k8s, "ot", "t", ns)
    live = scan_table(refused_table.load_table("db.t")).files
    assert status["state"] == "IDLE" and status.get("currentProcess") is None
    assert status["dataFiles"] == len(live.data_files), "the live files are still shown"
    time.sleep(3)  # several refreshes later
    events = [e for e in _events(k8s, ns, "t") if e["reason"] in ("Unsupported", "OptimizingStarted")]
    assert [(e["type"], e["reason"], e["message"], e.get("count", 1)) for e in events] == [
        ("Warning", "Unsupported", message, 1)
    ]


# -- 5. catalog Secrets ------------------------------------------------------------------------


def _secret(namespace: str, properties: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "catalog", "namespace": namespace},
        "stringData": properties,
    }


def test_a_missing_catalog_secret_is_a_condition_until_it_can_be_read(
    k8s: K8sCluster, replicas: Callable[..., Replica], sql_catalog: SqlCatalog
) -> None:
    """The table names a Secret that does not exist: CatalogReady=False (SecretNotFound) and Degraded,
    on a table the engine never saw, and one Warning Event naming the Secret, while the operator keeps
    trying. A Secret that is not text is SecretUnreadable. Once it can be read, the table proceeds."""
    ns = _namespace(k8s, "nosecret")
    _small_files(sql_catalog)
    good = _catalog_properties(sql_catalog)
    replica = replicas([ns]).start()
    _apply(k8s, _group("g", ns, executors=0))
    _apply(k8s, _table("t", ns, "g", {"name": sql_catalog.name, "secretRef": "catalog"}))

    def catalog_ready() -> dict[str, Any]:
        return _condition(_status(k8s, "ot", "t", ns), "CatalogReady")

    def warnings(reason: str) -> list[dict[str, Any]]:
        return [e for e in _events(k8s, ns, "t") if e["reason"] == reason]

    k8s.wait_for("CatalogReady=False", lambda: catalog_ready().get("reason") == "SecretNotFound", timeout=30)
    where = f"catalog Secret 'catalog' in namespace {ns!r}"
    not_found = f"{where} not found"
    assert catalog_ready()["status"] == "False" and catalog_ready()["message"] == not_found
    degraded = _condition(_status(k8s, "ot", "t", ns), "Degraded")
    assert (degraded["status"], degraded["reason"], degraded["message"]) == (
        "True",
        "SecretNotFound",
        not_found,
    )
    assert replica.runtime(f"{ns}/t") is None  # it never reached the engine
    k8s.wait_for("a SecretNotFound Event", lambda: bool(warnings("SecretNotFound")), timeout=10)
    time.sleep(3 * replica.config.secret_interval_s)  # retried meanwhile, without an Event each time
    (event,) = warnings("SecretNotFound")
    assert event["type"] == "Warning" and event["message"] == not_found
    assert event["involvedObject"]["kind"] == "OptimizedTable"

    # A Secret whose value is not text: unreadable, its key named, its value never shown.
    binary = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "catalog", "namespace": ns},
        "data": {"uri": base64.b64encode(b"\xff\xfe" + SECRET_MARK.encode()).decode()},
    }
    _apply(k8s, binary)
    k8s.wait_for("SecretUnreadable", lambda: catalog_ready().get("reason") == "SecretUnreadable", timeout=30)
    unreadable = f"{where} cannot be read: the value of key 'uri' is not UTF-8 text"
    assert catalog_ready()["message"] == unreadable
    k8s.wait_for("a SecretUnreadable Event", lambda: bool(warnings("SecretUnreadable")), timeout=10)

    k8s.kubectl("delete", "secret", "catalog", "-n", ns)
    _apply(k8s, _secret(ns, good))
    k8s.wait_for(
        "CatalogReady=True and the table read",
        lambda: catalog_ready().get("status") == "True" and _status(k8s, "ot", "t", ns).get("dataFiles") == 4,
        timeout=30,
    )
    status = _status(k8s, "ot", "t", ns)
    assert catalog_ready()["reason"] == "CatalogAvailable"
    assert (
        catalog_ready()["message"]
        == f"catalog {sql_catalog.name!r} answered, with the properties of Secret 'catalog'"
    )
    assert _condition(status, "Degraded")["status"] == "False"
    assert status["state"] == "PENDING"  # read and evaluated; its group has no executors
    assert [e["type"] for e in _events(k8s, ns, "t") if e["reason"] == "SecretReadable"] == ["Normal"]
    everything = k8s.kubectl("get", "ot,og,events", "-n", ns, "-o", "yaml").stdout
    assert SECRET_MARK not in everything and good["uri"] not in everything


def test_fixing_the_catalog_secret_heals_the_table(
    k8s: K8sCluster, replicas: Callable[..., Replica], sql_catalog: SqlCatalog
) -> None:
    ns = _namespace(k8s, "secret")
    _small_files(sql_catalog)
    # A credential among the properties: masked wherever floe writes; the rest stays readable.
    good = {**_catalog_properties(sql_catalog), "credential": "client-id:hunter2-secret"}
    missing = str(sql_catalog.properties["uri"]).replace("catalog.db", "missing-dir/catalog.db")
    wrong = {**good, "uri": missing}

    def secret(properties: dict[str, str]) -> dict[str, Any]:
        return _secret(ns, properties)

    _apply(k8s, secret(wrong))
    replicas([ns]).start()
    _apply(k8s, _group("g", ns, executors=0))
    _apply(k8s, _table("t", ns, "g", {"name": sql_catalog.name, "secretRef": "catalog"}))

    k8s.wait_for(
        "Degraded: the catalog cannot be opened",
        lambda: _condition(_status(k8s, "ot", "t", ns), "Degraded").get("status") == "True",
        timeout=30,
    )
    degraded = _condition(_status(k8s, "ot", "t", ns), "Degraded")
    assert degraded["reason"] == "TableUnavailable"
    assert f"catalog {sql_catalog.name!r} is unreachable" in degraded["message"]
    # The Secret was read: the catalog it describes is what is not ready.
    catalog_ready = _condition(_status(k8s, "ot", "t", ns), "CatalogReady")
    assert (catalog_ready["status"], catalog_ready["reason"]) == ("False", "CatalogUnavailable")
    assert catalog_ready["message"] == degraded["message"]
    everything = k8s.kubectl("get", "ot,og,events", "-n", ns, "-o", "yaml").stdout
    assert "hunter2" not in everything

    _apply(k8s, secret(good))
    k8s.wait_for(
        "healthy once the Secret is fixed",
        lambda: (
            (s := _status(k8s, "ot", "t", ns)).get("dataFiles") == 4
            and _condition(s, "Degraded").get("status") == "False"
        ),
        timeout=30,
    )
    status = _status(k8s, "ot", "t", ns)
    assert _condition(status, "Degraded")["reason"] == "Healthy"
    assert _condition(status, "CatalogReady")["status"] == "True"
    assert status["state"] == "PENDING"  # read and evaluated; its group has no executors
    assert "CatalogSecretChanged" in {e["reason"] for e in _events(k8s, ns, "t")}
    everything = k8s.kubectl("get", "ot,og,events", "-n", ns, "-o", "yaml").stdout
    assert "hunter2" not in everything
