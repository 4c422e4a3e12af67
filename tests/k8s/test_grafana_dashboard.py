"""The chart's Grafana dashboard (charts/floe/dashboards/floe.json): its shape, the ConfigMap that
carries it, and every panel's query evaluated by a real Prometheus scraping a running floe.

The running floe is the operator in-process against the real API server of tests/k8s (kopf, the
task service, the engine), with an OptimizerGroup and an OptimizedTable on a SQL-catalog table with
small files. A registered client first takes a task and completes it with a forged row count (the
service refuses it: a refused result, for real), then a real optimizer with Spark runs the tasks:
tasks complete, processes commit, executor time is counted, maintenance jobs run. Debian's
Prometheus (scripts/prometheus/build.sh unpacks it; ``make test`` runs that) scrapes the operator's
``/metrics`` every second meanwhile. Then each target of each panel, its variables substituted, goes
through Prometheus' ``/api/v1/query``: a query that errors or returns no series fails the test,
naming the panel. The ``group`` variable's own query must list the group.

Environment:
  FLOE_PROMETHEUS  the prometheus binary to run instead of scripts/prometheus/build.sh's
  FLOE_DASHBOARD_PREVIEW  a PNG to write: once every panel has a series, floe is kept busy a few
                   minutes more and the dashboard, drawn from what Prometheus scraped with
                   Grafana's panel components (tests/dashboard_preview.py), is photographed there
                   (scripts/docs/dashboard_preview.py)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboard_preview import (
    WIDTH,
    board_payload,
    dashboard,
    grafana_board,
    open_drawn,
    panel_series,
    write_page,
)
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession
from test_autoscale import append_to_each_partition, partitioned_small_files
from ui_stack import chromium

from floe.controller.config import OperatorConfig
from floe.controller.controller import Controller
from floe.protocol.client import RequestFailed, TaskServiceClient
from floe.protocol.rewrite_task import RewriteTaskSpec
from floe.protocol.wire import CompleteRequest, RegisterRequest
from floe.rewrite.task import run_rewrite_task
from floe_optimizer.app import Optimizer

from .conftest import FAKE_NODE_TAINT, REPO_ROOT, K8sCluster, _free_ports, _Process, _spawn
from .helm import CHART, RELEASE, Helm, apply_driver_rbac
from .in_process import operator_in_process

pytestmark = pytest.mark.k8s

PROMETHEUS_BUILD = REPO_ROOT / "scripts" / "prometheus" / "build.sh"
DEBIAN_PROMETHEUS = Path("/usr/bin/prometheus")
PEERING_CRDS = REPO_ROOT / "operator" / "floe" / "controller" / "peering-crds.yaml"
KWOK_TEMPLATE = {
    "tolerations": [{"key": FAKE_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"type": "kwok"},
}
GRAFANA_VARIABLES = {"$__rate_interval": "30s", "$__interval": "15s", "$__range": "1h"}
"""What Grafana puts for its built-in variables; 30 s holds many of the test's 1 s scrapes."""
DATASOURCE = "${datasource}"
SERIES_TIMEOUT_S = 60.0
"""How long a panel may take to show a series once floe did its work: a rate needs two scrapes."""


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel but the rows, those inside collapsed rows included."""
    found = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            found += panel.get("panels", [])
        else:
            found.append(panel)
    return found


def variable(board: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [v for v in board["templating"]["list"] if v["name"] == name]
    return dict(found)


def substitute(expr: str, group: str) -> str:
    """`expr` as Grafana sends it with `group` selected."""
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr.replace("$group", group).replace("${group}", group)


# --------------------------------------------------------------------------------------------------
# The dashboard and its ConfigMap, without a cluster


def test_the_dashboard_is_a_grafana_dashboard_on_a_chosen_prometheus() -> None:
    board = dashboard()
    assert board["uid"] == "floe" and board["title"] == "floe"
    assert board["schemaVersion"] >= 36  # the datasource-object era Grafana 9 and later read
    source = variable(board, "datasource")
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    group = variable(board, "group")
    assert group["type"] == "query" and group["datasource"]["uid"] == DATASOURCE
    assert group["definition"] == group["query"]["query"] == "label_values(floe_group_optimizers, group)"
    ids = [p["id"] for p in board["panels"]] + [q["id"] for p in board["panels"] for q in p.get("panels", [])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    shown = panels(board)
    assert len(shown) >= 15
    for panel in shown:
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE}, panel["title"]
        assert panel["targets"] and panel.get("description"), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE, panel["title"]
            # Only the variables this dashboard defines, or Grafana's own that the live test sets.
            leftover = re.findall(r"\$\{?\w+", substitute(target["expr"], "g"))
            assert not leftover, f"{panel['title']}: {leftover} in {target['expr']}"
    # Per-table series are bounded: a catalog of thousands of tables must not draw thousands of lines.
    for panel in shown:
        for target in panel["targets"]:
            expr = target["expr"]
            aggregated = expr.startswith(("count", "min by (group)", "quantile by (group)"))
            if "floe_table_" in expr and not aggregated:
                assert expr.startswith(("topk(", "bottomk(")), f"{panel['title']}: unbounded per-table query"


@pytest.fixture(scope="module")
def helm_offline(helm_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(helm_binary, tmp_path_factory.mktemp("helm-home"))


def _configmaps(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "ConfigMap"]


def test_the_chart_ships_the_dashboard_for_grafanas_sidecar_only_when_enabled(helm_offline: Helm) -> None:
    assert _configmaps(helm_offline.render("ops", {})) == []
    (default,) = _configmaps(helm_offline.render("ops", {"grafanaDashboard": {"enabled": True}}))
    assert default["metadata"]["namespace"] == "ops"
    assert default["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert default["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE  # uninstalled with it
    assert json.loads(default["data"]["floe.json"]) == dashboard()

    values = {
        "enabled": True,
        "namespace": "monitoring",
        "label": "example.com/dashboard",
        "labelValue": "floe",
        "labels": {"team": "data"},
        "annotations": {"grafana_folder": "floe"},
    }
    (configured,) = _configmaps(helm_offline.render("ops", {"grafanaDashboard": values}))
    metadata = configured["metadata"]
    assert metadata["namespace"] == "monitoring"
    assert {"example.com/dashboard": "floe", "team": "data"}.items() <= metadata["labels"].items()
    assert "grafana_dashboard" not in metadata["labels"]
    assert metadata["annotations"] == {"grafana_folder": "floe"}
    assert json.loads(configured["data"]["floe.json"]) == dashboard()

    bad = helm_offline.values_file({"grafanaDashboard": {"label": "a/b/c"}})
    result = helm_offline("template", RELEASE, str(CHART), "-f", bad, check=False)
    assert result.returncode != 0 and "/grafanaDashboard/label" in result.stderr, result.stderr


# --------------------------------------------------------------------------------------------------
# Every panel against a real Prometheus scraping a running floe


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    """``$FLOE_PROMETHEUS``, else scripts/prometheus/build.sh's unpacked copy, else Debian's installed one."""
    override = os.environ.get("FLOE_PROMETHEUS")
    if override:
        return override
    check = subprocess.run([str(PROMETHEUS_BUILD), "--check"], capture_output=True, text=True, check=False)
    if check.returncode == 0:
        return check.stdout.strip().splitlines()[-1]
    if DEBIAN_PROMETHEUS.is_file():
        return str(DEBIAN_PROMETHEUS)
    pytest.skip(
        "no prometheus binary: run `make prometheus-env` (make test runs it), install Debian's "
        "prometheus package, or set FLOE_PROMETHEUS"
    )


class PrometheusError(RuntimeError):
    """Prometheus refused a query or could not be reached."""


class Prometheus:
    """A real Prometheus scraping `target` (a base URL) every second, its data in `work_dir`."""

    def __init__(self, binary: str, work_dir: Path, target: str) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "floe",
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": [urllib.parse.urlsplit(target).netloc]}],
                }
            ],
        }
        (work_dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        (port,) = _free_ports(1)
        self.url = f"http://127.0.0.1:{port}"
        self.process: _Process = _spawn(
            "prometheus",
            [
                binary,
                f"--config.file={work_dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={work_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            work_dir / "prometheus.log",
            {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        # Loopback only: never through a proxy from the environment.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def get(self, path: str, **params: str) -> Any:
        """The ``data`` of Prometheus' answer to GET `path`; PrometheusError when it says error."""
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with self._opener.open(url, timeout=10) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:  # a bad query: 400 with Prometheus' error in JSON
            text = error.read()
            try:
                body = json.loads(text or b"{}")
            except ValueError:  # "Service Unavailable" while it starts: no JSON yet
                raise PrometheusError(f"{url}: {error.code} {text[:200]!r}") from error
        except OSError as error:
            raise PrometheusError(f"{url}: {error}; log:\n{self.process.tail()}") from error
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The series `expr` returns now (an instant query, as a stat panel or a range's last step)."""
        data = self.get("/api/v1/query", query=expr)
        result = data["result"]
        return [{"metric": {}, "value": result}] if data["resultType"] == "scalar" else list(result)

    def ready(self) -> bool:
        try:
            self.get("/api/v1/status/buildinfo")
        except PrometheusError:
            return False
        return True

    def stop(self) -> None:
        self.process.stop()


def _wait(k8s: K8sCluster, what: str, condition: Callable[[], bool], timeout: float) -> None:
    k8s.wait_for(what, condition, timeout=timeout, interval=0.5)


@pytest.fixture(scope="module")
def namespace(k8s: K8sCluster, helm_binary: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """floe's and kopf's CRDs, and a namespace with the chart's driver ServiceAccount and Role."""
    k8s.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    k8s.kubectl("apply", "-f", str(PEERING_CRDS))
    for crd in ("optimizergroups.floe.dev", "optimizedtables.floe.dev", "kopfpeerings.kopf.dev"):
        k8s.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    name = f"dash-{uuid.uuid4().hex[:6]}"
    k8s.kubectl("create", "namespace", name)
    _wait(
        k8s,
        "default ServiceAccount",
        lambda: k8s.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
        60,
    )
    apply_driver_rbac(k8s, Helm(helm_binary, tmp_path_factory.mktemp("helm-home")), name)
    return name


@pytest.fixture(scope="module")
def controller(k8s: K8sCluster, namespace: str) -> Iterator[Controller]:
    """The operator in-process, as tests/k8s/test_controller.py runs it: kopf in a thread, the task
    service (serving /metrics), the engine ticking fast, first maintenance runs not spread out."""
    config = OperatorConfig(
        namespaces=[namespace],
        service_port=0,
        service_url="http://floe-operator.floe-system.svc:7070",
        default_image="floe-optimizer:test",
        tick_interval_s=0.3,
        status_interval_s=1.0,
        refresh_interval_s=1.0,
        spread_first_maintenance=False,
    )
    with operator_in_process(k8s, config) as ctrl:
        yield ctrl


def _apply(k8s: K8sCluster, manifest: dict[str, Any]) -> None:
    k8s.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def _status(k8s: K8sCluster, kind: str, name: str, namespace: str) -> dict[str, Any]:
    result = k8s.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return dict(json.loads(result.stdout).get("status") or {}) if result.returncode == 0 else {}


def _refuse_a_forged_result(controller: Controller, group: str) -> None:
    """Take the group's first task as a registered optimizer, run its real rewrite, and complete it
    claiming one row more than it read: the service refuses the result (check ``rows``), deletes
    what the attempt wrote and puts the task back for a retry."""
    client = TaskServiceClient(
        controller.server.url, timeout=30, registration_token=controller.config.registration_token
    )
    try:
        session = client.register(RegisterRequest(group=group, threads=1, memory_bytes=0, name="forger"))
        deadline = time.monotonic() + 120
        assignment = None
        while assignment is None:
            assert time.monotonic() < deadline, "the table's first task was never handed out"
            assignment = client.poll(session.token, 0, wait_s=5)
        client.ack(session.token, assignment.attempt_id)
        assert isinstance(assignment.spec, RewriteTaskSpec), assignment.spec
        result = run_rewrite_task(assignment.spec)
        forged = result.model_copy(update={"rows_read": result.rows_read + 1})
        with pytest.raises(RequestFailed) as refused:
            client.complete(session.token, assignment.attempt_id, CompleteRequest(result=forged))
        assert refused.value.status == 422 and "result_refused" in str(refused.value), refused.value
        client.unregister(session.token)
    finally:
        client.close()


PREVIEW_ROUNDS = 5
PREVIEW_ROUND_S = 40.0
"""For the docs' picture: rounds of new small files, one every 40 s, so its lines have a shape."""
PREVIEW_STEP_S = 2.0


def _photograph(catalog: SqlCatalog, prometheus: Prometheus, group: str, started: float, out: Path) -> None:
    """Keep floe busy for a few minutes (new small files in each partition, every round), then
    draw the dashboard from Prometheus' answers over the whole run with Grafana's panel components
    (tests/dashboard_preview.py) and photograph it in headless Chromium as `out`."""
    for round_ in range(PREVIEW_ROUNDS):
        for start in range(2):
            append_to_each_partition(catalog.load_table("db.events"), 3, 1000 * (round_ + 1) + 10 * start)
        time.sleep(PREVIEW_ROUND_S)
    # Whole seconds: the range asked of Prometheus is the one the page's steps are laid on.
    first, last = float(round(started)), float(round(time.time()))
    board = dashboard()

    def query_range(expr: str) -> list[dict[str, Any]]:
        data = prometheus.get(
            "/api/v1/query_range",
            query=expr,
            start=f"{first:.0f}",
            end=f"{last:.0f}",
            step=f"{PREVIEW_STEP_S:g}",
        )
        return list(data["result"])

    data = {
        p["id"]: panel_series(p, query_range, lambda expr: substitute(expr, group)) for p in panels(board)
    }
    variables = {"Data source": "Prometheus", "Group": group}
    payload = board_payload(board, data, first, last, PREVIEW_STEP_S, variables)
    page = out.with_suffix(".html")
    write_page(payload, grafana_board(), page)
    with chromium(width=WIDTH) as driver:
        open_drawn(driver, page)
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not errors, errors
        driver.save_screenshot(str(out))
    page.unlink()
    print(f"wrote {out}")


def test_every_panel_shows_series_of_a_running_floe(
    k8s: K8sCluster,
    namespace: str,
    controller: Controller,
    prometheus_binary: str,
    sql_catalog: SqlCatalog,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    started = time.time()
    prometheus = Prometheus(prometheus_binary, tmp_path / "prometheus", controller.server.url)
    optimizer: Optimizer | None = None
    try:
        _wait(k8s, "Prometheus ready", prometheus.ready, 60)
        _wait(k8s, "Prometheus scraping floe", lambda: prometheus.query('up{job="floe"} == 1') != [], 60)
        group = f"{namespace}/dash"
        partitioned_small_files(sql_catalog, "db.events", 3)
        properties = {"type": "sql", **{k: str(v) for k, v in sql_catalog.properties.items()}}
        _apply(
            k8s,
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizerGroup",
                "metadata": {"name": "dash", "namespace": namespace},
                "spec": {
                    "executors": 1,
                    "executorCores": 2,
                    "executorMemory": "2Gi",
                    "executorTemplate": KWOK_TEMPLATE,
                },
            },
        )
        _apply(
            k8s,
            {
                "apiVersion": "floe.dev/v1alpha1",
                "kind": "OptimizedTable",
                "metadata": {"name": "events", "namespace": namespace},
                "spec": {
                    "table": "db.events",
                    "catalog": {"name": sql_catalog.name, "properties": properties},
                    "group": "dash",
                    "minor": {"triggerFileCount": 2},
                    "minPlanInterval": "0s",
                },
            },
        )
        _refuse_a_forged_result(controller, group)
        optimizer = Optimizer(
            controller.server.url,
            group=group,
            threads=2,
            spark=spark,
            name="dash-optimizer",
            registration_token=controller.config.registration_token,
        )
        optimizer.start()
        _wait(
            k8s,
            "a committed process in the table's status",
            lambda: "committed" in (_status(k8s, "ot", "events", namespace).get("lastResult") or ""),
            180,
        )
        _wait(
            k8s,
            "a maintenance job's first run in the table's status",
            lambda: bool(_status(k8s, "ot", "events", namespace).get("maintenance")),
            120,
        )

        board = dashboard()
        definition = variable(board, "group")["definition"]
        parsed = re.fullmatch(r"label_values\((\w+), (\w+)\)", definition)
        assert parsed is not None, definition
        metric, label = parsed.groups()
        assert group in prometheus.get(f"/api/v1/label/{label}/values", **{"match[]": metric})
        # Polled until each target has a series or the time is up: a counter's rate needs two
        # scrapes after its first increment.
        targets = [(p["title"], t["refId"], t["expr"]) for p in panels(board) for t in p["targets"]]
        failures: dict[tuple[str, str], str] = {}
        deadline = time.monotonic() + SERIES_TIMEOUT_S
        while True:
            failures = {}
            for title, ref, expr in targets:
                query = substitute(expr, group)
                try:
                    if not prometheus.query(query):
                        failures[title, ref] = f"no series: {query}"
                except PrometheusError as error:
                    failures[title, ref] = f"{error}: {query}"
            if not failures or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert not failures, "panels whose query fails or shows nothing:\n" + "\n".join(
            f"  {title!r} target {ref}: {why}" for (title, ref), why in failures.items()
        )
        shot = os.environ.get("FLOE_DASHBOARD_PREVIEW")
        if shot:
            _photograph(sql_catalog, prometheus, group, started, Path(shot))
    finally:
        if optimizer is not None:
            optimizer.stop(grace_s=5)
        prometheus.stop()
