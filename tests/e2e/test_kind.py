"""floe as users run it: ``helm install`` on a real cluster, a table in a REST catalog on S3,
compacted by Spark executor pods, scaled, interrupted, and cleaned up.

The tests run in file order and build on each other, as a user's session would: install,
compact, scale, kill the driver mid-process, break things on purpose, delete the group,
uninstall. Contents are checked with Iceberg's Java reader through the same REST catalog.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pyarrow.fs import FileSelector
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from rest_s3 import RestS3Stack, free_port, kind_network_gateway, s3_filesystem

from floe.api.table import OptimizedTableSpec
from floe.commit.row_delta import commit_row_delta
from floe.local.reference_reader import ReferenceReader
from floe.local.workload import OrderCdcStream
from floe.maintenance.orphans import remove_orphan_files
from floe.maintenance.reachable import referenced_files
from floe.planning.table_evaluation import evaluate_table
from floe.tables.scan import scan_table
from floe.tables.writer import conform, write_position_deletes

from .conftest import (
    EXAMPLES,
    RELEASE,
    RELEASE_NAMESPACE,
    E2ETools,
    Helm,
    Kubectl,
    install_floe,
    wait_for,
)

NAMESPACE = "analytics"
GROUP = "e2e"
TABLE = "e2e.orders"
CATALOG = "e2e_rest"
SECRET = "e2e-catalog"
PROCESS_ID_KEY = "floe.process-id"
GROUP_PODS = f"floe.dev/group={GROUP}"
EXECUTOR_PODS = f"{GROUP_PODS},floe.dev/role=executor"
TASK_LINE = re.compile(r"running task (\S+)-t\d{4} of analytics/orders")


@pytest.fixture(scope="module")
def release(helm: Helm, kubectl: Kubectl, e2e_tools: E2ETools) -> Iterator[None]:
    """floe installed by its chart, serving namespace ``analytics`` and external metrics."""
    install_floe(helm, kubectl, e2e_tools, NAMESPACE, "--set", "externalMetrics.enabled=true")
    yield
    if RELEASE in helm("list", "-n", RELEASE_NAMESPACE, "-q").split():
        helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait")


@pytest.fixture(scope="module")
def catalog(data_stack: RestS3Stack) -> RestCatalog:
    """The REST catalog, as the tests on the host reach it (the pods use the same URLs)."""
    client = data_stack.client(CATALOG)
    client.create_namespace("e2e")
    return client


@pytest.fixture(scope="module")
def orders(catalog: RestCatalog) -> OrderCdcStream:
    """CDC upserts (small files, equality deletes) plus a position delete: what floe is for."""
    stream = OrderCdcStream(catalog, TABLE, seed=17)
    for _ in range(6):
        stream.upsert_batch(inserts=400, updates=120)
    _add_position_delete(stream.table)
    return stream


def _add_position_delete(table: Table) -> None:
    """Delete rows 0 and 1 of one data file with a position-delete file."""
    table.refresh()
    scanned = scan_table(table)
    data = scanned.files.data_files[0]
    delete = write_position_deletes(
        table,
        [(data.path, 0), (data.path, 1)],
        data.partition.spec_id,
        scanned.partition_records[data.partition],
    )
    commit_row_delta(table, data_files=[], delete_files=[delete])


@pytest.fixture(scope="module")
def reader(reference: ReferenceReader, data_stack: RestS3Stack) -> ReferenceReader:
    """Iceberg Java's reader, with the REST catalog registered."""
    reference.register_catalog(CATALOG, data_stack.properties)
    return reference


def _catalog_secret(data_stack: RestS3Stack) -> dict[str, Any]:
    """The Secret holding the REST catalog's properties, as the tables' catalog.secretRef names it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "stringData": data_stack.properties,
    }


def _table_status(kubectl: Kubectl) -> dict[str, Any]:
    return dict(kubectl.json("get", "ot", "orders", "-n", NAMESPACE).get("status") or {})


def _group_status(kubectl: Kubectl) -> dict[str, Any]:
    return dict(kubectl.json("get", "og", GROUP, "-n", NAMESPACE).get("status") or {})


def _pods(kubectl: Kubectl, selector: str) -> list[dict[str, Any]]:
    return [
        p
        for p in kubectl.json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]
        if not p["metadata"].get("deletionTimestamp")
    ]


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p.get("status", {}).get("phase") == "Running"]


def _driver(kubectl: Kubectl) -> dict[str, Any] | None:
    pods = _running(_pods(kubectl, f"{GROUP_PODS},floe.dev/role=driver"))
    return pods[0] if pods else None


def _idle_on_floe_snapshot(kubectl: Kubectl, table: Table) -> tuple[dict[str, Any], Snapshot] | None:
    """The table's status and current snapshot, while floe is idle and made that snapshot."""
    status = _table_status(kubectl)
    table.refresh()
    current = table.current_snapshot()
    if current is None or status.get("state") != "IDLE":
        return None
    return (status, current) if PROCESS_ID_KEY in current.summary.additional_properties else None


def _compacted(kubectl: Kubectl, table: Table) -> dict[str, Any] | None:
    """The table's status once floe has optimized its current snapshot and is idle again."""
    idle = _idle_on_floe_snapshot(kubectl, table)
    return idle[0] if idle is not None and idle[0].get("deleteFiles") == 0 else None


def _settled(kubectl: Kubectl, table: Table) -> dict[str, Any] | None:
    """The table's status once floe has evaluated its current snapshot, made by floe, and found
    nothing to optimize by the table's own settings. Equality deletes may remain: batches that
    land while a process runs can leave a partition below the minor trigger."""
    idle = _idle_on_floe_snapshot(kubectl, table)
    if idle is None:
        return None
    status, current = idle
    if status.get("snapshotId") != current.snapshot_id or _triggered(status, table):
        return None
    return status


def _triggered(status: dict[str, Any], table: Table) -> list[str]:
    """What floe's evaluator, with the table's effective settings from `status`, would optimize
    in the current snapshot: one line per triggered partition."""
    spec = OptimizedTableSpec.model_validate(
        {**status["effectiveSpec"], "table": TABLE, "group": GROUP, "catalog": {"name": CATALOG}}
    )
    last_minor, last_full = (
        _seconds(status[key]) if status.get(key) else None
        for key in ("lastMinorOptimizing", "lastFullOptimizing")
    )
    evaluations = evaluate_table(
        scan_table(table).files, spec.optimizing_config(table.properties), time.time(), last_minor, last_full
    )
    return [f"{e.partition}: {e.optimizing_type} ({e.reason})" for e in evaluations if e.optimizing_type]


def _why_not_compacted(kubectl: Kubectl, table: Table) -> str:
    """What the table, floe's status, its Events and the operator's and driver's logs say, for a
    failed wait on `_compacted` or `_settled`."""
    table.refresh()
    files = scan_table(table).files
    deletes = Counter(d.kind.name for d in files.delete_files)
    events = [
        f"{e.get('lastTimestamp')} {e['reason']}: {e['message']}"
        for e in kubectl.events(NAMESPACE, "OptimizedTable", "orders")
    ]
    operator_log = kubectl("logs", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/name=floe", "--tail=80")
    driver = _driver(kubectl)
    driver_log = kubectl("logs", "-n", NAMESPACE, driver["metadata"]["name"], "--tail=40") if driver else ""
    current = table.current_snapshot()
    return "\n".join(
        [
            f"status: {json.dumps(_table_status(kubectl))}",
            f"current snapshot: {current.summary if current else None}",
            f"live files: {len(files.data_files)} data, deletes {dict(deletes)}",
            f"triggered: {_triggered(_table_status(kubectl), table)}",
            "events:",
            *events[-15:],
            "operator log:",
            operator_log,
            "driver log:",
            driver_log,
        ]
    )


def _live_files(table: Table) -> tuple[int, int]:
    table.refresh()
    files = scan_table(table).files
    return len(files.data_files), len(files.delete_files)


def _rows(reader: ReferenceReader, snapshot_id: int | None = None) -> Counter[tuple[Any, ...]]:
    return Counter(reader.rows(CATALOG, TABLE, snapshot_id))


def _new_process(kubectl: Kubectl, driver: str, started: set[str]) -> str | None:
    """A process the driver has run a task of, other than those in `started`."""
    running = set(TASK_LINE.findall(kubectl("logs", "-n", NAMESPACE, driver))) - started
    return next(iter(running), None)


def _floe_snapshots(table: Table) -> Counter[str]:
    """How many snapshots each floe process committed."""
    table.refresh()
    return Counter(
        s.summary.additional_properties[PROCESS_ID_KEY]
        for s in table.snapshots()
        if s.summary is not None and PROCESS_ID_KEY in s.summary.additional_properties
    )


# --------------------------------------------------------------------------------------------------


def test_helm_install_runs_the_operator_as_a_pod(
    release: None, kubectl: Kubectl, e2e_tools: E2ETools
) -> None:
    pods = kubectl.json("get", "pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/name=floe")["items"]
    assert _running(pods), f"no operator pod is running: {[p['status'] for p in pods]}"
    assert pods[0]["spec"]["containers"][0]["image"] == e2e_tools.operator_image
    # The task service's Service selects the leading replica, which labels itself.
    slices = f"kubernetes.io/service-name={RELEASE}-operator"
    wait_for(
        "the task service's Service to select the leader",
        lambda: [
            e
            for s in kubectl.json("get", "endpointslices", "-n", RELEASE_NAMESPACE, "-l", slices)["items"]
            for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready")
        ],
        timeout_s=120,
    )


def test_table_is_compacted_by_executor_pods(
    release: None,
    kubectl: Kubectl,
    data_stack: RestS3Stack,
    orders: OrderCdcStream,
    reader: ReferenceReader,
) -> None:
    table = orders.table
    table.refresh()
    before_snapshot = table.current_snapshot()
    assert before_snapshot is not None
    before_rows = _rows(reader, before_snapshot.snapshot_id)
    data_before, deletes_before = _live_files(table)
    assert data_before >= 12 and deletes_before >= 10

    kubectl.apply(
        [
            _catalog_secret(data_stack),
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizerGroup",
                "metadata": {"name": GROUP, "namespace": NAMESPACE},
                "spec": {
                    "executors": 1,
                    "executorCores": 1,
                    "executorCpuRequest": "200m",
                    "executorStartupCpuLimit": "2",
                    "executorMemory": "1536Mi",
                    "heartbeatTimeout": "20s",
                },
            },
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizedTable",
                "metadata": {"name": "orders", "namespace": NAMESPACE},
                "spec": {
                    "table": TABLE,
                    "group": GROUP,
                    "catalog": {"name": CATALOG, "secretRef": SECRET},
                    # Four upsert batches (four files and four equality deletes a partition) trigger.
                    "minor": {"triggerFileCount": 6},
                    "minPlanInterval": "5s",
                },
            },
        ]
    )
    status = wait_for(
        "floe to compact e2e.orders",
        lambda: _compacted(kubectl, table),
        timeout_s=480,
        explain=lambda: _why_not_compacted(kubectl, table),
    )

    data_after, deletes_after = _live_files(table)
    assert deletes_after == 0 and data_after < data_before
    assert (status["dataFiles"], status["deleteFiles"]) == (data_after, 0)
    assert _rows(reader) == before_rows, "Iceberg Java reads other rows after floe's commit"

    # The rewrite ran in the executor pod: its JVM ran each Spark task in a Python worker and
    # sent the result back; the driver only handed floe's tasks to Spark.
    executors = _running(_pods(kubectl, EXECUTOR_PODS))
    assert len(executors) == 1
    executor_log = kubectl("logs", "-n", NAMESPACE, executors[0]["metadata"]["name"])
    finished = re.findall(
        r"Executor: Finished task .* \(TID \d+\)\. \d+ bytes result sent to driver", executor_log
    )
    assert finished and "PythonRunner" in executor_log, executor_log[-3000:]
    # Its JVM mapped the image's class archive: one made for another class path is dropped in
    # silence, and the pod would start as slowly as without it.
    mapped = kubectl(
        "exec",
        "-n",
        NAMESPACE,
        executors[0]["metadata"]["name"],
        "--",
        "sh",
        "-c",
        "grep -l /opt/floe/spark-classes.jsa /proc/[0-9]*/maps || true",
    )
    assert mapped.strip(), "the executor JVM does not map /opt/floe/spark-classes.jsa"
    # It started with the group's startup CPU limit, and the driver resized it to its one core
    # once it registered: in the pod, in the kubelet's status and in the container's cgroup.
    executor = executors[0]["metadata"]["name"]
    wait_for(
        "the executor pod resized to 1 CPU",
        lambda: _cpu_limits(kubectl, executor) == ("1", "1"),
        timeout_s=60,
        explain=lambda: str(_cpu_limits(kubectl, executor)),
    )
    quota = kubectl(
        "exec", "-n", NAMESPACE, executor, "--", "sh", "-c",
        "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us",
    )  # fmt: skip
    assert quota.split()[0] == "100000", quota  # 1 CPU of the default 100 ms period
    driver = _driver(kubectl)
    assert driver is not None
    driver_log = kubectl("logs", "-n", NAMESPACE, driver["metadata"]["name"])
    assert f"executor pod {executor} resized to its CPU limit of 1" in driver_log
    handed = re.findall(r"running task e2e\.orders-\S+ of analytics/orders", driver_log)
    assert 0 < len(handed) <= len(finished), (handed, finished)

    table_line = kubectl("get", "ot", "-n", NAMESPACE).splitlines()
    assert re.search(
        rf"\borders\s+{GROUP}\s+{re.escape(TABLE)}\s+IDLE\b.*\s{data_after}\s+0\s", table_line[1]
    ), table_line


def _cpu_limits(kubectl: Kubectl, pod: str) -> tuple[str, str]:
    """The CPU limit of the pod's first container: in its spec, and as the kubelet applied it."""
    found = kubectl.json("get", "pod", pod, "-n", NAMESPACE)
    spec = found["spec"]["containers"][0]["resources"]["limits"]["cpu"]
    statuses = found["status"].get("containerStatuses") or [{}]
    return spec, statuses[0].get("resources", {}).get("limits", {}).get("cpu", "")


def test_orphan_cleanup_lists_on_the_executor_pods(release: None, kubectl: Kubectl) -> None:
    """A table at ``executorsAtFiles`` files has its orphan scan run by the group's executors,
    on S3 through the storage credentials of the mounted catalog Secret."""
    patched_at = time.time()
    settings = {"executorsAtFiles": 0, "orphanFiles": {"interval": "1m"}}
    kubectl(
        "patch",
        "ot",
        "orders",
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"maintenance": settings}}),
    )
    try:

        def scanned_on_executors() -> dict[str, Any] | None:
            run = _table_status(kubectl).get("maintenance", {}).get("orphans")
            if run is None or "listed on the group's executors" not in run["lastResult"]:
                return None
            return run if _seconds(run["lastRun"]) >= patched_at - 1 else None

        run = wait_for(
            "an orphan cleanup on the executors",
            scanned_on_executors,
            timeout_s=240,
            explain=lambda: json.dumps(_table_status(kubectl).get("maintenance"), indent=1),
        )
        assert run["lastResult"].startswith("removed 0 orphan files"), run
        executor_logs = [
            kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"])
            for pod in _running(_pods(kubectl, EXECUTOR_PODS))
        ]
        driver = _driver(kubectl)
        assert driver is not None
        driver_log = kubectl("logs", "-n", NAMESPACE, driver["metadata"]["name"])
        assert "running task orphan-scan of analytics/orders (orphan scan of 1 location(s))" in driver_log
        assert any("PythonRunner" in log for log in executor_logs)
    finally:
        kubectl(
            "patch", "ot", "orders", "-n", NAMESPACE, "--type=merge", "-p", '{"spec": {"maintenance": null}}'
        )


def _seconds(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def test_scale_brings_a_second_executor_without_restarting_the_driver(
    release: None, kubectl: Kubectl
) -> None:
    driver = _driver(kubectl)
    assert driver is not None
    kubectl("scale", "og", GROUP, "-n", NAMESPACE, "--replicas", "2")
    wait_for(
        "two executors ready and two threads registered",
        lambda: (s := _group_status(kubectl)).get("readyExecutors") == 2 and s.get("threads") == 2,
        timeout_s=240,
    )
    assert len(_running(_pods(kubectl, EXECUTOR_PODS))) == 2
    still = _driver(kubectl)
    assert still is not None and still["metadata"]["uid"] == driver["metadata"]["uid"]
    columns = kubectl("get", "og", GROUP, "-n", NAMESPACE).splitlines()
    assert re.search(rf"^{GROUP}\s+quota\s+2\s+2\s+2\s+1\s", columns[1]), columns


def _interrupt_a_process(
    kubectl: Kubectl, orders: OrderCdcStream, reader: ReferenceReader, interrupt: Callable[[str], None]
) -> str:
    """Start a new process on e2e.orders and call `interrupt` (with the driver pod's name) as soon
    as one of its tasks runs; wait until floe has settled the table again. Rows must be unchanged and
    no process may commit twice. Tried up to three times, as the process may commit before it
    could be interrupted; returns the interrupted process's id."""
    table = orders.table
    for _attempt in range(3):
        driver = _driver(kubectl)
        assert driver is not None
        driver_name = driver["metadata"]["name"]
        # Before writing: floe may start the new process while the batches are still landing.
        started = set(TASK_LINE.findall(kubectl("logs", "-n", NAMESPACE, driver_name)))
        # Enough rows that a task takes seconds in an executor: the interruption lands while it runs.
        for _ in range(4):
            orders.upsert_batch(inserts=250_000, updates=2_000)
        table.refresh()
        start = table.current_snapshot()
        assert start is not None
        # The driver logs each task it hands to Spark: interrupt as soon as one of a new process runs.
        process = wait_for(
            "the driver to run a task of a new process",
            functools.partial(_new_process, kubectl, driver_name, started),
            timeout_s=240,
            interval_s=0.5,
        )
        interrupted_at = time.time()
        interrupt(driver_name)
        expected = _rows(reader, start.snapshot_id)
        wait_for(
            "floe to settle the table after it",
            lambda: _settled(kubectl, table),
            timeout_s=600,
            explain=lambda: _why_not_compacted(kubectl, table),
        )
        committed = _floe_snapshots(table)
        assert all(count == 1 for count in committed.values()), f"a process committed twice: {committed}"
        assert _rows(reader) == expected, "rows changed across the interruption"
        mine = [
            s for s in table.snapshots() if s.summary.additional_properties.get(PROCESS_ID_KEY) == process
        ]
        if not mine or mine[0].timestamp_ms / 1000 > interrupted_at:
            return process  # in flight when interrupted: committed once later, or never
    pytest.fail("three times the process committed before it could be interrupted")


def _unreferenced_files_of(
    data_stack: RestS3Stack, table: Table, process: str
) -> tuple[list[str], list[str]]:
    """The files `process` wrote under the warehouse, and those of them no snapshot references."""
    data_dir = f"{data_stack.bucket}/warehouse"
    referenced = {
        p.split("://", 1)[1]
        for p in referenced_files(table.io, table.snapshots(), live_only=False).all_paths()
    }
    written = [
        info.path
        for info in s3_filesystem(data_stack.moto.endpoint).get_file_info(
            FileSelector(data_dir, recursive=True)
        )
        if info.base_name.startswith(f"{process}-t")
    ]
    return written, sorted(set(written) - referenced)


def test_driver_killed_mid_process_commits_once_and_loses_nothing(
    release: None, kubectl: Kubectl, data_stack: RestS3Stack, orders: OrderCdcStream, reader: ReferenceReader
) -> None:
    def kill_the_driver(driver_name: str) -> None:
        old_uid = kubectl.json("get", "pod", "-n", NAMESPACE, driver_name)["metadata"]["uid"]
        kubectl("delete", "pod", "-n", NAMESPACE, driver_name, "--grace-period=0", "--force")
        wait_for(
            "a new driver pod",
            lambda: (d := _driver(kubectl)) is not None and d["metadata"]["uid"] != old_uid,
            timeout_s=180,
        )

    process = _interrupt_a_process(kubectl, orders, reader, kill_the_driver)

    # The killed attempt's files were removed by floe: every file the process wrote is committed.
    written, left = _unreferenced_files_of(data_stack, orders.table, process)
    assert written and left == [], f"left behind: {left}"


def test_executors_killed_mid_task_commit_once_and_lose_nothing(
    release: None, kubectl: Kubectl, data_stack: RestS3Stack, orders: OrderCdcStream, reader: ReferenceReader
) -> None:
    def kill_the_executors(_: str) -> None:
        names = [p["metadata"]["name"] for p in _pods(kubectl, EXECUTOR_PODS)]
        assert names
        kubectl("delete", "pod", "-n", NAMESPACE, *names, "--grace-period=0", "--force")

    process = _interrupt_a_process(kubectl, orders, reader, kill_the_executors)

    # Spark asks for executors again; the task lost with its executor was retried by floe.
    wait_for("executors again", lambda: _group_status(kubectl).get("readyExecutors") == 2, timeout_s=240)
    # The executors read the storage credentials from the catalog Secret they mount: the tasks
    # of the table, whose catalog properties come from that Secret, no longer carry them.
    executor = _running(_pods(kubectl, EXECUTOR_PODS))[0]
    assert {"secretName": SECRET, "optional": True, "defaultMode": 0o440} in [
        v.get("secret") for v in executor["spec"]["volumes"]
    ], executor["spec"]["volumes"]
    started = [
        e["message"]
        for e in kubectl.events(NAMESPACE, "OptimizedTable", "orders")
        if e["reason"] == "OptimizingStarted"
    ]
    assert any(f"storage credentials from the mounted Secret {SECRET!r}" in m for m in started), started
    _, left = _unreferenced_files_of(data_stack, orders.table, process)
    assert left == [], f"left behind: {left}"


def test_operator_restarted_mid_process_commits_once_and_loses_nothing(
    release: None, kubectl: Kubectl, data_stack: RestS3Stack, orders: OrderCdcStream, reader: ReferenceReader
) -> None:
    def operator_pods() -> list[dict[str, Any]]:
        selector = "app.kubernetes.io/name=floe"
        return [
            p
            for p in kubectl.json("get", "pods", "-n", RELEASE_NAMESPACE, "-l", selector)["items"]
            if not p["metadata"].get("deletionTimestamp")
        ]

    def crash_the_operator(_: str) -> None:
        (old,) = operator_pods()
        kubectl(
            "delete", "pod", "-n", RELEASE_NAMESPACE, old["metadata"]["name"], "--grace-period=0", "--force"
        )
        wait_for(
            "a new operator pod",
            lambda: [p for p in _running(operator_pods()) if p["metadata"]["uid"] != old["metadata"]["uid"]],
            timeout_s=180,
        )

    process = _interrupt_a_process(kubectl, orders, reader, crash_the_operator)

    # The new operator never heard of the interrupted process: its files are orphans, which orphan
    # cleanup removes (a table's files are never orphans: only those no snapshot references).
    table = orders.table
    remove_orphan_files(table, older_than_s=3600, now_s=time.time() + 7200)
    _, left = _unreferenced_files_of(data_stack, table, process)
    assert left == [], f"left behind: {left}"
    # The driver outlived the operator and registered with the new one.
    assert _group_status(kubectl).get("threads") == 2


def test_unreachable_catalog_is_a_condition_and_an_event(release: None, kubectl: Kubectl) -> None:
    closed = f"http://{kind_network_gateway()}:{free_port(kind_network_gateway())}"
    kubectl.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "e2e-unreachable", "namespace": NAMESPACE},
                "stringData": {"type": "rest", "uri": closed},
            },
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizedTable",
                "metadata": {"name": "unreachable", "namespace": NAMESPACE},
                "spec": {
                    "table": "e2e.nothing",
                    "group": GROUP,
                    "catalog": {"name": "x", "secretRef": "e2e-unreachable"},
                },
            },
        ]
    )

    def degraded() -> dict[str, Any] | None:
        status = kubectl.json("get", "ot", "unreachable", "-n", NAMESPACE).get("status") or {}
        found = [c for c in status.get("conditions", []) if c["type"] == "Degraded" and c["status"] == "True"]
        return found[0] if found else None

    condition = wait_for("the table to be Degraded", degraded, timeout_s=120)
    assert closed.split("//")[1] in condition["message"] or "connect" in condition["message"].lower(), (
        condition
    )
    events = wait_for(
        "a Warning Event on the table",
        lambda: [
            e for e in kubectl.events(NAMESPACE, "OptimizedTable", "unreachable") if e["type"] == "Warning"
        ],
        timeout_s=60,
    )
    assert events
    kubectl("delete", "ot", "unreachable", "-n", NAMESPACE, "--wait=true")


def test_missing_image_is_a_condition_and_an_event(release: None, kubectl: Kubectl) -> None:
    image = "localhost/floe-optimizer:no-such-tag"
    kubectl.apply(
        {
            "apiVersion": "floe.dev/v1alpha1",
            "kind": "OptimizerGroup",
            "metadata": {"name": "noimage", "namespace": NAMESPACE},
            "spec": {"executors": 1, "image": image},
        }
    )

    def degraded() -> dict[str, Any] | None:
        status = kubectl.json("get", "og", "noimage", "-n", NAMESPACE).get("status") or {}
        found = [c for c in status.get("conditions", []) if c["type"] == "Degraded" and c["status"] == "True"]
        return found[0] if found and found[0]["reason"] == "DriverImagePullFailed" else None

    condition = wait_for("the group to be Degraded by its image", degraded, timeout_s=120)
    assert image in condition["message"], condition
    events = wait_for(
        "a DriverImagePullFailed Event",
        lambda: [
            e
            for e in kubectl.events(NAMESPACE, "OptimizerGroup", "noimage")
            if e["reason"] == "DriverImagePullFailed"
        ],
        timeout_s=60,
    )
    assert image in events[0]["message"]
    kubectl("delete", "og", "noimage", "-n", NAMESPACE, "--wait=true")


def test_deleting_the_group_removes_every_pod_it_owned(release: None, kubectl: Kubectl) -> None:
    # The driver may be between two pods: a table naming another catalog Secret came and went
    # (test_unreachable_catalog_is_a_condition_and_an_event), and the driver's mounts changed twice.
    try:
        wait_for(
            "the group's driver to run",
            lambda: _driver(kubectl),
            timeout_s=300,
            explain=lambda: json.dumps(
                [(p["metadata"]["name"], p.get("status")) for p in _pods(kubectl, GROUP_PODS)]
            ),
        )
    finally:
        # Whatever happened, the group goes: later tests need the node's room.
        kubectl("delete", "og", GROUP, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    wait_for(
        "the group's pods to go",
        lambda: not kubectl.json("get", "pods", "-n", NAMESPACE, "-l", GROUP_PODS)["items"],
        timeout_s=180,
    )
    for kind in ("service", "configmap"):
        assert not kubectl.json("get", kind, "-n", NAMESPACE, "-l", GROUP_PODS)["items"], kind
    # The drivers' ServiceAccount is the chart's, shared by the namespace's groups: it stays.
    assert kubectl.json("get", "serviceaccount", "floe-driver", "-n", NAMESPACE)["metadata"]["name"]


def test_executor_oom_kill_is_an_event_and_the_task_is_retried(
    release: None, kubectl: Kubectl, data_stack: RestS3Stack, catalog: RestCatalog
) -> None:
    # A table with a sort order: a task sorts its rows in memory, in runs of up to 1 GiB of Arrow
    # data, which an executor with a 1Gi limit cannot hold, as one sized too small for its table.
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "payload", StringType()))
    wide = catalog.create_table(
        "e2e.wide",
        schema,
        sort_order=SortOrder(SortField(source_id=1, transform=IdentityTransform())),
        properties={"format-version": "2"},
    )
    rows = 700_000
    for part in range(2):
        ids = pa.array(range(part * rows, (part + 1) * rows), pa.int64())
        wide.append(conform(wide, pa.table({"id": ids, "payload": pa.array(["x" * 1000] * rows)})))
    kubectl.apply(_catalog_secret(data_stack))
    kubectl.apply(
        [
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizerGroup",
                "metadata": {"name": "small", "namespace": NAMESPACE},
                "spec": {"executors": 1, "executorCpuRequest": "200m", "executorMemory": "1Gi"},
            },
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizedTable",
                "metadata": {"name": "wide", "namespace": NAMESPACE},
                "spec": {
                    "table": "e2e.wide",
                    "group": "small",
                    "catalog": {"name": CATALOG, "secretRef": SECRET},
                    "minor": {"triggerFileCount": 2},
                    "execute": {"numRetries": 1},
                },
            },
        ]
    )
    # Removed however the test ends, so that the tests after it have the node's room.
    try:
        _expect_an_oom_kill_and_a_retry(kubectl, wide)
    finally:
        kubectl("delete", "ot", "wide", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
        kubectl("delete", "og", "small", "-n", NAMESPACE, "--wait=true", "--timeout=120s")


def _expect_an_oom_kill_and_a_retry(kubectl: Kubectl, wide: Table) -> None:
    # The kernel kills the largest process of the full cgroup: the rewrite's Python worker
    # (ExecutorOutOfMemory, from the task's failure) or, where the whole container goes (cgroup
    # v2, or the JVM), the executor (ExecutorOOMKilled, from the pod).
    memory_reasons = {"ExecutorOutOfMemory", "ExecutorOOMKilled"}
    events = wait_for(
        "an out-of-memory Event on the group",
        lambda: [
            e for e in kubectl.events(NAMESPACE, "OptimizerGroup", "small") if e["reason"] in memory_reasons
        ],
        timeout_s=480,
    )
    assert "executorMemory" in events[0]["message"], events[0]
    degraded = wait_for(
        "the group's Degraded condition to name the memory",
        lambda: [
            c
            for c in (kubectl.json("get", "og", "small", "-n", NAMESPACE).get("status") or {}).get(
                "conditions", []
            )
            if c["type"] == "Degraded" and c["status"] == "True" and c["reason"] in memory_reasons
        ],
        timeout_s=60,
    )
    assert "executorMemory" in degraded[0]["message"], degraded

    def failed() -> str | None:
        result = str(
            (kubectl.json("get", "ot", "wide", "-n", NAMESPACE).get("status") or {}).get("lastResult") or ""
        )
        return result if "failed 2 of 2 attempts" in result else None

    result = wait_for("the task to be retried, and the process to fail", failed, timeout_s=480)
    assert "ExecutorOutOfMemory" in result or "exit code 137" in result, result
    table_events = {e["reason"] for e in kubectl.events(NAMESPACE, "OptimizedTable", "wide")}
    assert "OptimizingFailed" in table_events, table_events
    assert wide.refresh().current_snapshot() is not None
    assert PROCESS_ID_KEY not in (wide.current_snapshot().summary.additional_properties), "the table changed"


ELASTIC = "elastic"
ELASTIC_PODS = f"floe.dev/group={ELASTIC}"
SCALED_LINE = re.compile(r"scaling executors (\S+) → (\d+)$", re.MULTILINE)


def test_an_autoscaled_group_wakes_from_zero_for_its_table_and_goes_back(
    release: None, kubectl: Kubectl, data_stack: RestS3Stack, catalog: RestCatalog, reader: ReferenceReader
) -> None:
    """No executor pod while nothing is due; a table that triggers brings one, which compacts it;
    the pod goes after the scale-down delay; the driver stays throughout. The driver hears each
    count from the task service, not from the ConfigMap the kubelet projects a minute later."""
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "note", StringType()))
    bursts = catalog.create_table("e2e.bursts", schema, properties={"format-version": "2"})

    def rows(start: int) -> pa.Table:
        ids = pa.array(range(start, start + 1_000), pa.int64())
        return conform(bursts, pa.table({"id": ids, "note": pa.array([f"n{i}" for i in range(1_000)])}))

    bursts.append(rows(0))
    kubectl.apply(_catalog_secret(data_stack))
    kubectl.apply(
        [
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizerGroup",
                "metadata": {"name": ELASTIC, "namespace": NAMESPACE},
                "spec": {
                    "autoscaling": {"minExecutors": 0, "maxExecutors": 1, "scaleDownDelay": "15s"},
                    "executorCpuRequest": "200m",
                    "executorMemory": "1536Mi",
                },
            },
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizedTable",
                "metadata": {"name": "bursts", "namespace": NAMESPACE},
                "spec": {
                    "table": "e2e.bursts",
                    "group": ELASTIC,
                    "catalog": {"name": CATALOG, "secretRef": SECRET},
                    "minor": {"triggerFileCount": 4},
                    "minPlanInterval": "5s",
                },
            },
        ]
    )

    # Removed however the test ends: the registration Secret goes with the last group owning it.
    try:

        def elastic_status() -> dict[str, Any]:
            return dict(kubectl.json("get", "og", ELASTIC, "-n", NAMESPACE).get("status") or {})

        def driver() -> dict[str, Any] | None:
            pods = _running(_pods(kubectl, f"{ELASTIC_PODS},floe.dev/role=driver"))
            return pods[0] if pods else None

        def executors() -> list[dict[str, Any]]:
            return _pods(kubectl, f"{ELASTIC_PODS},floe.dev/role=executor")

        def mounts_the_catalog_secret(pod: dict[str, Any] | None) -> bool:
            volumes = (pod or {}).get("spec", {}).get("volumes") or []
            return any((v.get("secret") or {}).get("secretName") == SECRET for v in volumes)

        # A driver made before the table joined the group is replaced once, to mount its catalog
        # Secret: the driver that stays is the one that mounts it.
        wait_for(
            "the driver up with the table's catalog Secret, at zero executors",
            lambda: (
                mounts_the_catalog_secret(driver())
                and elastic_status().get("desiredExecutors") == 0
                and not executors()
            ),
            timeout_s=300,
        )
        first_driver = driver()
        assert first_driver is not None
        driver_name = first_driver["metadata"]["name"]
        expected = Counter(reader.rows(CATALOG, "e2e.bursts"))
        assert sum(expected.values()) == 1_000

        # Three files in one catalog commit: the table goes from one file to four at once, so
        # the engine cannot plan a part of the burst between two appends.
        with bursts.transaction() as burst:
            for batch in range(1, 4):
                burst.append(rows(batch * 1_000))
        triggered_at = time.time()
        expected = Counter(reader.rows(CATALOG, "e2e.bursts"))

        def compacted() -> Any:
            bursts.refresh()
            current = bursts.current_snapshot()
            return (
                current
                if current is not None and PROCESS_ID_KEY in current.summary.additional_properties
                else None
            )

        snapshot = wait_for(
            "the autoscaled group to wake and compact e2e.bursts",
            compacted,
            timeout_s=480,
            explain=lambda: "\n".join(
                [
                    json.dumps(elastic_status()),
                    *[
                        f"{e['reason']}: {e['message']}"
                        for e in kubectl.events(NAMESPACE, "OptimizerGroup", ELASTIC)
                    ],
                    kubectl("logs", "-n", NAMESPACE, driver_name, "--tail=40"),
                ]
            ),
        )
        latency = snapshot.timestamp_ms / 1000 - triggered_at
        assert Counter(reader.rows(CATALOG, "e2e.bursts")) == expected, "rows changed"
        assert _live_files(bursts) == (1, 0)

        events = kubectl.events(NAMESPACE, "OptimizerGroup", ELASTIC)
        group_events = {e["reason"]: e["message"] for e in events}
        assert group_events.get("ScaledUp", "").startswith("executors 0 → 1: "), group_events

        def first_task_handed_out() -> str | None:
            events = kubectl.events(NAMESPACE, "OptimizerGroup", ELASTIC)
            return next((e["message"] for e in events if e["reason"] == "FirstTaskHandedOut"), None)

        woke = wait_for("the FirstTaskHandedOut Event", first_task_handed_out, timeout_s=60)
        assert re.fullmatch(
            r"a task was handed to Spark \d+ s after the group scaled up from zero executors; "
            r"it runs once an executor pod has started",
            woke,
        ), woke
        # The driver's log says how long the task waited for the executor pod it woke.
        began = re.search(
            rf"task {re.escape(snapshot.summary.additional_properties[PROCESS_ID_KEY])}-t\d{{4}} ended in "
            r"[\d.]+ s \(began on an executor after ([\d.]+) s\)",
            kubectl("logs", "-n", NAMESPACE, driver_name),
        )
        assert began is not None, "the driver logs the wait for an executor"

        wait_for(
            "the executor pod to go after the scale-down delay",
            lambda: elastic_status().get("desiredExecutors") == 0 and not executors(),
            timeout_s=240,
        )
        assert "ScaledDown" in {e["reason"] for e in kubectl.events(NAMESPACE, "OptimizerGroup", ELASTIC)}
        still = driver()
        assert still is not None and still["metadata"]["uid"] == first_driver["metadata"]["uid"], (
            "the driver stays"
        )
        # Each count came from the task service: never the scale file standing in.
        driver_log = kubectl("logs", "-n", NAMESPACE, driver_name)
        assert "no executor count from the task service" not in driver_log, driver_log[-3000:]
        assert SCALED_LINE.findall(driver_log)[-2:] == [("0", "1"), ("1", "0")], driver_log[-3000:]
        print(
            f"autoscaled from zero on kind: trigger to commit {latency:.1f} s; {woke}; the task began "
            f"on the executor {began.group(1)} s after it was handed to Spark"
        )
    finally:
        kubectl("delete", "ot", "bursts", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
        kubectl("delete", "og", ELASTIC, "-n", NAMESPACE, "--wait=true", "--timeout=120s")


DEMAND_METRIC = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/floe_group_demand_tasks"


def test_an_hpa_sizes_a_group_from_the_demand_the_operator_serves(
    release: None, kubectl: Kubectl, data_stack: RestS3Stack, catalog: RestCatalog
) -> None:
    """examples/hpa.yaml as a user applies it: the cluster's HPA controller reads
    floe_group_demand_tasks from the operator (external.metrics.k8s.io, through the API server's
    aggregation layer) and sets the group's executors from it: down to its minimum while no table
    waits, up when three do. The executors cannot be scheduled, so the tables keep waiting and
    the demand holds still for the HPA to read."""
    group, hpa = yaml.safe_load_all((EXAMPLES / "hpa.yaml").read_text())
    group["spec"].update(executors=3, executorCpuRequest="64")
    hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] = 0
    name, hpa_name = group["metadata"]["name"], hpa["metadata"]["name"]
    tables = {f"waiting-{i}": f"e2e.waiting_{i}" for i in range(3)}
    kubectl.apply(_catalog_secret(data_stack))
    kubectl.apply([group, hpa])

    def group_object() -> dict[str, Any]:
        return dict(kubectl.json("get", "og", name, "-n", NAMESPACE))

    def hpa_state() -> str:
        status = kubectl.json("get", "hpa", hpa_name, "-n", NAMESPACE).get("status") or {}
        return json.dumps({k: status.get(k) for k in ("currentMetrics", "conditions", "desiredReplicas")})

    def demand_of_three() -> dict[str, Any] | None:
        served = json.loads(kubectl("get", "--raw", f"{DEMAND_METRIC}?labelSelector=group%3D{name}"))
        return served if [i["value"] for i in served["items"]] == ["3"] else None

    try:
        wait_for(
            "the API server to serve floe's external metric",
            lambda: kubectl("get", "--raw", DEMAND_METRIC),
            timeout_s=120,
        )
        wait_for(
            "the HPA to scale the idle group down to 1",
            lambda: group_object()["spec"]["executors"] == 1,
            timeout_s=180,
            explain=hpa_state,
        )
        schema = Schema(NestedField(1, "id", LongType(), required=True))
        for table_name in tables.values():
            table = catalog.create_table(table_name, schema, properties={"format-version": "2"})
            for start in range(0, 40, 10):
                table.append(conform(table, pa.table({"id": pa.array(range(start, start + 10), pa.int64())})))
        spec = {
            "group": name,
            "catalog": {"name": CATALOG, "secretRef": SECRET},
            "minor": {"triggerFileCount": 4},
        }
        kubectl.apply(
            [
                {
                    "apiVersion": "floe.dev/v1alpha1",
                    "kind": "OptimizedTable",
                    "metadata": {"name": resource, "namespace": NAMESPACE},
                    "spec": {"table": table_name, **spec},
                }
                for resource, table_name in tables.items()
            ]
        )
        served = wait_for("a demand of 3 tasks in the external metric", demand_of_three, timeout_s=180)
        assert served["items"][0]["metricLabels"] == {"group": name}
        # 3 tasks at 2 per executor (the example's averageValue): 2 executors.
        wait_for(
            "the HPA to scale the group up to 2",
            lambda: group_object()["spec"]["executors"] == 2,
            timeout_s=180,
            explain=hpa_state,
        )
        wait_for(
            "the operator to follow the HPA's count",
            lambda: (group_object().get("status") or {}).get("desiredExecutors") == 2,
            timeout_s=60,
        )
    finally:
        kubectl("delete", "hpa", hpa_name, "-n", NAMESPACE, "--ignore-not-found")
        kubectl(
            "delete", "ot", *tables, "-n", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s"
        )
        kubectl("delete", "og", name, "-n", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s")
        for table_name in tables.values():
            if catalog.table_exists(table_name):
                catalog.drop_table(table_name)


def test_helm_uninstall_removes_the_rest(release: None, helm: Helm, kubectl: Kubectl) -> None:
    kubectl("delete", "ot", "--all", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait")
    selector = f"app.kubernetes.io/instance={RELEASE}"
    for namespace in (RELEASE_NAMESPACE, NAMESPACE):
        for kind in ("deployment", "pods", "service", "secret", "role", "rolebinding", "serviceaccount"):
            wait_for(
                f"no {kind} of the release in {namespace}",
                lambda kind=kind, namespace=namespace: (
                    not kubectl.json("get", kind, "-n", namespace, "-l", selector)["items"] or None
                ),
                timeout_s=120,
            )
    # The external metrics API's cluster-wide registration and its reader binding in kube-system.
    assert not kubectl.json("get", "apiservice", "-l", selector)["items"]
    assert not kubectl.json("get", "rolebinding", "-n", "kube-system", "-l", selector)["items"]
    # Helm never deletes CRDs; the users' resources are gone with them still installed.
    assert kubectl("get", "crd", "optimizergroups.floe.dev", "-o", "name").strip()
    # The registration Secret goes with the last group that owned it (garbage collection).
    wait_for(
        "the registration Secret to be garbage-collected",
        lambda: (
            not kubectl.json(
                "get", "secrets", "-n", NAMESPACE, "--field-selector", "metadata.name=floe-registration"
            )["items"]
        ),
        timeout_s=120,
    )
