"""The end-to-end tests' real Kubernetes: a kind cluster through pytest-kind, floe's images built
here, its Helm chart, and a REST catalog on an S3-protocol store that pods and tests both reach.

Everything comes from the project's own build scripts, so pytest-kind never downloads:
* ``scripts/host/podman.sh``: podman (runc, the ulimits kind's nodes need) where Docker is absent;
* ``scripts/kind/build.sh``: kind, the kubectl of the node's Kubernetes version and the node image
  (``FLOE_KIND_NODE_IMAGE`` takes another, e.g. the public kindest/node where Docker can pull it);
* ``scripts/images/build.sh``: the operator and optimizer images, loaded with ``kind load
  image-archive``;
* ``scripts/helm/build.sh``: helm.
pytest-kind's own options (``--kind-bin``, ``--kind-kubectl-bin``, ``--kind-image``,
``--cluster-name``, ``--keep-cluster``) override what the scripts give.

The REST catalog (Iceberg Java's, JDBC on SQLite behind it) and moto's S3 server run on the host,
bound to the gateway address of the cluster's container network: the pods reach them through their
node, the tests directly, at the same URLs. kind's kubelet rewrites three host sysctls through its
privileged node; they are saved before the cluster is made and written back after it is deleted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pytest_kind import KindCluster
from rest_s3 import RestS3Stack, kind_network_gateway, rest_s3_stack

from floe.local.reference_jars import cache_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = REPO_ROOT / "scripts"
KIND_CONFIG = SCRIPTS / "kind" / "cluster.yaml"
CHART = REPO_ROOT / "charts" / "floe"
EXAMPLES = REPO_ROOT / "examples"
CLUSTER_NAME = "floe-e2e"
RELEASE = "floe"
RELEASE_NAMESPACE = "floe-system"

T = TypeVar("T")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here is an end-to-end test (marker ``e2e``)."""
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed end-to-end test's report carries the cluster's state at that moment: the
    cluster is deleted at the end of the session, and CI keeps only the output."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    kubectl = getattr(item, "funcargs", {}).get("kubectl")
    if report.failed and report.when in ("setup", "call") and isinstance(kubectl, Kubectl):
        report.sections.append(("cluster state at the failure", cluster_state(kubectl)))


def cluster_state(kubectl: Kubectl) -> str:
    """Nodes and what their pods request, every pod, the recent Events of floe's namespaces
    and the operator's log: what a stuck wait needs to be explained."""
    parts = []
    for title, args in (
        ("nodes", ("get", "nodes", "-o", "wide")),
        ("pods", ("get", "pods", "-A", "-o", "wide")),
        ("floe's objects", ("get", "og,ot", "-A")),
        ("events", ("get", "events", "-A", "--sort-by=.lastTimestamp")),
        ("node resources", ("describe", "nodes")),
        ("operator log", ("logs", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/name=floe", "--tail=60")),
    ):
        try:
            text = kubectl(*args)
        except subprocess.CalledProcessError as exc:
            text = f"(failed: {exc})"
        if title == "events":
            text = "\n".join(text.splitlines()[-40:])
        elif title == "node resources":
            text = text[text.find("Allocated resources:") :].split("Events:")[0]
        parts.append(f"--- {title}\n{text.rstrip()}")
    return "\n".join(parts)


def _script_output(*command: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-25:])
        raise RuntimeError(f"{' '.join(command)} exited with {result.returncode}:\n{tail}")
    return result.stdout


def _assignments(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines, as the build scripts print them."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def wait_for(
    what: str,
    check: Callable[[], T | None],
    timeout_s: float,
    interval_s: float = 2.0,
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout_s`, with
    what `explain` says about the state it was stuck in (the cluster is gone afterwards)."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except (subprocess.CalledProcessError, KeyError, ValueError) as exc:
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            state = f"\n{_explained(explain)}" if explain else ""
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}{detail}{state}")
        time.sleep(interval_s)


def _explained(explain: Callable[[], str]) -> str:
    try:
        return explain()
    except Exception as exc:  # the explanation must not hide the timeout
        return f"(could not say why: {exc!r})"


def _docker_runs() -> bool:
    """Whether a Docker engine answers (a docker CLI without a daemon does not count)."""
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


@dataclass(frozen=True)
class E2ETools:
    """What the build scripts made: binaries, the node image and floe's images."""

    kind: Path
    kubectl: Path
    node_image: str
    helm: Path
    images: dict[str, str]

    @property
    def operator_image(self) -> str:
        """``localhost/floe-operator:<key>``."""
        return self.images["FLOE_OPERATOR_IMAGE"]

    @property
    def optimizer_image(self) -> str:
        """``localhost/floe-optimizer:<key>``."""
        return self.images["FLOE_OPTIMIZER_IMAGE"]


@pytest.fixture(scope="session")
def e2e_tools(request: pytest.FixtureRequest) -> E2ETools:
    """Set the host up and build (or find cached) everything the cluster and floe need."""
    if not _docker_runs():
        subprocess.run([str(SCRIPTS / "host" / "podman.sh")], check=True)
        os.environ.setdefault("KIND_EXPERIMENTAL_PROVIDER", "podman")
    kind = _assignments(_script_output(str(SCRIPTS / "kind" / "build.sh")))
    images = _assignments(_script_output(str(SCRIPTS / "images" / "build.sh")))
    helm = _script_output(str(SCRIPTS / "helm" / "build.sh")).strip()
    option = request.config.getoption
    return E2ETools(
        kind=Path(option("kind_bin") or kind["FLOE_KIND_BIN"]),
        kubectl=Path(option("kind_kubectl_bin") or kind["FLOE_KIND_KUBECTL"]),
        node_image=option("kind_image") or kind["FLOE_KIND_NODE_IMAGE"],
        helm=Path(helm),
        images=images,
    )


@pytest.fixture(scope="session")
def kind_cluster(request: pytest.FixtureRequest, e2e_tools: E2ETools) -> Iterator[KindCluster]:
    """A single-node kind cluster with floe's images loaded (replaces pytest-kind's fixture of
    the same name, which cannot pass kind a cluster config)."""
    name = request.config.getoption("cluster_name")
    name = CLUSTER_NAME if name == "pytest-kind" else name
    # Where scripts/kind/cluster.sh keeps them too, so `cluster.sh down NAME` restores a kept cluster's.
    sysctls = cache_dir() / "kind" / f"{name}.sysctls"
    sysctls.parent.mkdir(parents=True, exist_ok=True)
    host_sysctls = str(SCRIPTS / "kind" / "host-sysctls.sh")
    cluster = KindCluster(
        name, image=e2e_tools.node_image, kind_path=e2e_tools.kind, kubectl_path=e2e_tools.kubectl
    )
    existing = _script_output(str(e2e_tools.kind), "get", "clusters").split()
    if name not in existing:
        subprocess.run([host_sysctls, "save", str(sysctls)], check=True)
    elif not _has_kubeconfig(cluster):
        # Left by a run that was killed, or by another checkout: its state is unknown and this
        # checkout cannot reach it, so it is replaced (pytest-kind would reuse it blindly). The
        # values saved before it changed them stay, as they are the host's own.
        subprocess.run([str(e2e_tools.kind), "delete", "cluster", "--name", name], check=True)
        if not sysctls.exists():
            subprocess.run([host_sysctls, "save", str(sysctls)], check=True)
    # Otherwise a kept cluster is reused, with the values saved when it was made.
    try:
        cluster.create(config_file=KIND_CONFIG)
        subprocess.run(
            [str(SCRIPTS / "kind" / "reject-unrouted-services.sh"), f"{name}-control-plane"], check=True
        )
        cluster.kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=180s")
        cluster.kubectl("-n", "kube-system", "rollout", "status", "deploy/coredns", "--timeout=180s")
        # Pods of a namespace are refused until its default ServiceAccount exists.
        wait_for(
            "the default ServiceAccount",
            lambda: cluster.kubectl("get", "serviceaccount", "default", "-o", "name").strip(),
            timeout_s=120,
        )
        for key in ("FLOE_OPERATOR_ARCHIVE", "FLOE_OPTIMIZER_ARCHIVE"):
            subprocess.run(
                [str(e2e_tools.kind), "load", "image-archive", e2e_tools.images[key], "--name", name],
                check=True,
            )
        yield cluster
    finally:
        if not request.config.getoption("keep_cluster"):
            cluster.delete()
            _remove_kind_network(e2e_tools.kind)
            subprocess.run([host_sysctls, "restore", str(sysctls)], check=True)


def _has_kubeconfig(cluster: KindCluster) -> bool:
    path = Path(cluster.kubeconfig_path)
    return path.is_file() and path.stat().st_size > 0


def _remove_kind_network(kind: Path) -> None:
    """kind leaves its podman network behind; remove it once no kind cluster is left."""
    if os.environ.get("KIND_EXPERIMENTAL_PROVIDER") != "podman":
        return
    clusters = subprocess.run([str(kind), "get", "clusters"], capture_output=True, text=True, check=False)
    if not clusters.stdout.strip():
        subprocess.run(["podman", "network", "rm", "-f", "kind"], capture_output=True, check=False)


@pytest.fixture(scope="session")
def data_stack(kind_cluster: KindCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestS3Stack]:
    """Iceberg's REST catalog and moto's S3, on the host's address in the cluster network."""
    with rest_s3_stack(kind_network_gateway(), tmp_path_factory.mktemp("rest-s3")) as stack:
        yield stack


class CommandError(subprocess.CalledProcessError):
    """A failed kubectl or helm run; its message carries what the command said."""

    def __str__(self) -> str:
        return f"{super().__str__()}: {self.stderr.strip()}"


class Kubectl:
    """kubectl against the kind cluster, with JSON and waiting helpers."""

    def __init__(self, cluster: KindCluster) -> None:
        self.cluster = cluster

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        """Run kubectl; raises CalledProcessError (with its output) on failure."""
        result = subprocess.run(
            [str(self.cluster.kubectl_path), *args],
            env={**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig_path)},
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise CommandError(result.returncode, ["kubectl", *args], result.stdout, result.stderr)
        return result.stdout

    def json(self, *args: str) -> Any:
        """``kubectl ARGS -o json``, parsed."""
        return json.loads(self(*args, "-o", "json"))

    def apply(self, manifest: dict[str, Any] | list[dict[str, Any]]) -> None:
        """``kubectl apply`` of one or more manifests."""
        items = manifest if isinstance(manifest, list) else [manifest]
        self("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))

    def events(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        """Events about one object."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        return list(self.json("get", "events", "-n", namespace, "--field-selector", selector)["items"])


@pytest.fixture(scope="session")
def kubectl(kind_cluster: KindCluster) -> Kubectl:
    """kubectl for the kind cluster."""
    return Kubectl(kind_cluster)


@dataclass(frozen=True)
class Helm:
    """helm against the kind cluster."""

    binary: Path
    kubeconfig: Path

    def __call__(self, *args: str) -> str:
        """Run helm; raises CommandError (with what helm said) on failure."""
        result = subprocess.run(
            [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise CommandError(result.returncode, ["helm", *args], result.stdout, result.stderr)
        return result.stdout


@pytest.fixture(scope="session")
def helm(kind_cluster: KindCluster, e2e_tools: E2ETools) -> Helm:
    """helm for the kind cluster."""
    return Helm(e2e_tools.helm, Path(kind_cluster.kubeconfig_path))


def image_values(tools: E2ETools) -> list[str]:
    """``helm --set`` arguments that point the chart at the locally built, loaded images."""
    values = []
    for key, image in (("image", tools.operator_image), ("optimizerImage", tools.optimizer_image)):
        repository, tag = image.rsplit(":", 1)
        # --set-string: a content key of digits only would otherwise become a number.
        values += ["--set", f"{key}.repository={repository}", "--set-string", f"{key}.tag={tag}"]
    return [*values, "--set", "image.pullPolicy=Never"]


def install_floe(helm: Helm, kubectl: Kubectl, tools: E2ETools, namespace: str, *values: str) -> None:
    """``helm install`` floe's chart with the images built for this run, serving ``namespace``
    (created first); `values` are more ``--set`` arguments."""
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--set",
        f"watchNamespaces={{{namespace}}}",
        *image_values(tools),
        *values,
        "--wait",
        "--timeout",
        "5m",
    )
