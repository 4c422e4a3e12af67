"""A real, local Kubernetes control plane for the tests marked ``k8s``.

The session fixture ``k8s`` builds (once, cached) or finds the binaries of
``scripts/k8s-test-env/build.sh`` and starts, on 127.0.0.1 only and on free ports:

* etcd, with its data in the session's tmp dir;
* kube-apiserver: TLS with a throwaway CA, static-token authentication, RBAC authorization,
  service-account tokens signed with a generated key;
* kube-controller-manager (all default controllers: garbage collector, namespace, service accounts,
  Jobs, ...) and kube-scheduler, each with its own bootstrap RBAC identity;
* kwok, which plays the kubelet for the Nodes annotated ``kwok.x-k8s.io/node=fake``: the fixture
  registers one such Node (tainted, so that only pods tolerating it land there), and kwok takes its
  pods to Running.

It yields a :class:`K8sCluster` with an admin kubeconfig and a ``kubectl`` helper, and stops every
process at the end of the session. Each process logs to ``<tmp>/logs``; a failing ``k8s`` test gets
the tails of those logs in its report. The session fixture ``helm_binary`` is the helm of
``scripts/helm/build.sh`` (cached, or built once), which ``tests/k8s/helm.py`` runs.

Environment:
  FLOE_K8S_BIN_DIR  use the binaries in this directory instead of running build.sh
  FLOE_CACHE_DIR    the cache root build.sh uses (default ~/.cache/floe)
  FLOE_KUBECTL      the kubectl to run (default: ``kubectl`` on PATH)
  FLOE_HELM         the helm v3 binary to run instead of scripts/helm/build.sh's
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pki import Pki

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "k8s-test-env" / "build.sh"
HELM_BUILD = REPO_ROOT / "scripts" / "helm" / "build.sh"
K8S_TESTS_DIR = Path(__file__).resolve().parent

#: The fake node that kwok manages, and how pods are steered onto it.
FAKE_NODE_NAME = "kwok-node-0"
FAKE_NODE_LABELS = {"type": "kwok", "kubernetes.io/hostname": FAKE_NODE_NAME}
FAKE_NODE_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
KWOK_NODE_SELECTOR = "kwok.x-k8s.io/node=fake"

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"  # virtual: there is no kube-proxy, nothing is routed there
KWOK_POD_CIDR = "127.100.0.0/16"  # fake pod IPs, kept on loopback so nothing ever dials out
STARTUP_TIMEOUT = 120.0
STOP_TIMEOUT = 15.0
LOG_TAIL_LINES = 40

_CLUSTER_KEY = pytest.StashKey["K8sCluster"]()
_PR_SET_PDEATHSIG = 1


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "k8s: runs against the local Kubernetes control plane of tests/k8s "
        "(cold build of the binaries: tens of minutes; deselect with -m 'not k8s')",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/k8s with ``k8s``, even one whose module forgot ``pytestmark``."""
    for item in items:
        if item.path.is_relative_to(K8S_TESTS_DIR):
            item.add_marker(pytest.mark.k8s)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Adds the tails of the control plane's logs to the report of a failed test that used it."""
    report = yield
    if report.failed and "k8s" in getattr(item, "fixturenames", ()):
        cluster = item.config.stash.get(_CLUSTER_KEY, None)
        if cluster is not None:
            report.sections.append(("k8s control-plane logs", cluster.log_tails()))
    return report


class K8sError(RuntimeError):
    """The local control plane could not be built, started or used."""


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl run; unlike its base class, its message includes kubectl's output."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


@dataclass
class _Process:
    """One control-plane process, logging to ``log_path``."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(STOP_TIMEOUT)

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as error:
            return f"(no log: {error})"
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class K8sCluster:
    """A running local control plane, as the ``k8s`` fixture yields it."""

    kubeconfig: Path
    server: str
    bin_dir: Path
    work_dir: Path
    node_name: str = FAKE_NODE_NAME
    kubectl_binary: str = "kubectl"
    _processes: list[_Process] = field(default_factory=list, repr=False)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Runs the real ``kubectl --kubeconfig <admin kubeconfig> ARGS``; raises on failure if ``check``."""
        command = [self.kubectl_binary, "--kubeconfig", str(self.kubeconfig), *args]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        result = subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, command, result.stdout, result.stderr)
        return result

    def kubectl_json(self, *args: str) -> Any:
        """``kubectl ARGS -o json``, parsed."""
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def service_account_kubeconfig(self, name: str, namespace: str, duration: str = "1h") -> Path:
        """A kubeconfig that authenticates as ServiceAccount NAMESPACE/NAME, as its pods would.

        The token comes from the TokenRequest API (``kubectl create token``); the file is the admin
        kubeconfig with that token as its only user, readable by this user only.
        """
        token = self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout
        config = yaml.safe_load(self.kubeconfig.read_text())
        config["users"] = [{"name": name, "user": {"token": token.strip()}}]
        config["contexts"][0]["context"]["user"] = name
        path = self.work_dir / f"{namespace}-{name}-{secrets.token_hex(3)}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def wait_for(
        self, what: str, condition: Callable[[], bool], timeout: float = 60.0, interval: float = 0.5
    ) -> None:
        """Polls ``condition`` until true; after ``timeout`` fails, naming ``what``, with the logs."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_running()
            if condition():
                return
            if time.monotonic() > deadline:
                raise K8sError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.log_tails()}")
            time.sleep(interval)

    def check_running(self) -> None:
        dead = [p for p in self._processes if not p.running]
        if dead:
            names = ", ".join(f"{p.name} (exit code {p.popen.returncode})" for p in dead)
            raise K8sError(f"control-plane process exited: {names}\n{self.log_tails()}")

    def log_tails(self, lines: int = LOG_TAIL_LINES) -> str:
        parts = []
        for process in self._processes:
            state = "running" if process.running else f"exited with {process.popen.returncode}"
            parts.append(f"----- {process.name} ({state}), last {lines} lines of {process.log_path}\n")
            parts.append(process.tail(lines) + "\n")
        return "".join(parts)

    def stop(self) -> None:
        """Stops every process, newest first: SIGTERM, then SIGKILL after a grace period."""
        while self._processes:
            self._processes[-1].stop()
            self._processes.pop()


# --------------------------------------------------------------------------------------------------
# The fixture


@pytest.fixture(scope="session")
def k8s(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[K8sCluster]:
    """The session's local Kubernetes control plane (see the module docstring)."""
    bin_dir = _find_or_build_binaries(request.config)
    kubectl = os.environ.get("FLOE_KUBECTL") or shutil.which("kubectl")
    if kubectl is None:
        raise K8sError("kubectl is not on PATH (or set FLOE_KUBECTL)")
    work_dir = tmp_path_factory.mktemp("k8s")
    cluster = start_cluster(bin_dir, work_dir, kubectl)
    request.config.stash[_CLUSTER_KEY] = cluster
    try:
        yield cluster
    finally:
        del request.config.stash[_CLUSTER_KEY]
        cluster.stop()


@pytest.fixture(scope="module")
def crds(k8s: K8sCluster) -> K8sCluster:
    """The cluster with floe's CRDs (crds/) applied, Established and served."""
    from floe.api.crd import KIND_SPECS

    k8s.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    names = [f"crd/{spec.crd_name}" for spec in KIND_SPECS]
    k8s.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names, timeout=90)
    # Discovery can lag behind Established for a moment.
    k8s.wait_for(
        "floe kinds in discovery",
        lambda: k8s.kubectl("get", "og,ot", "-A", check=False).returncode == 0,
    )
    return k8s


def _find_or_build_binaries(config: pytest.Config) -> Path:
    override = os.environ.get("FLOE_K8S_BIN_DIR")
    if override:
        return Path(override)
    return Path(cached_tool(config, BUILD_SCRIPT, "the test control plane"))


def cached_tool(config: pytest.Config, script: Path, what: str) -> str:
    """What a cached-build script of scripts/ prints last: ``SCRIPT --check`` when built, else a build.

    A cold build can take minutes: its progress goes through pytest's output capture. Raises
    K8sError when the build fails.
    """
    check = subprocess.run([str(script), "--check"], capture_output=True, text=True, check=False)
    if check.returncode == 0:
        return check.stdout.strip().splitlines()[-1]
    capture: Any = config.pluginmanager.getplugin("capturemanager")
    suspended = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with suspended:
        print(f"\n[k8s] building {what} with {script} (cached afterwards)", flush=True)
        build = subprocess.run([str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if build.returncode != 0:
        raise K8sError(f"{script} failed with exit code {build.returncode}; its output is above")
    return build.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def helm_binary(request: pytest.FixtureRequest) -> str:
    """``$FLOE_HELM``, else scripts/helm/build.sh's helm: cached, or built now (minutes, progress shown)."""
    return os.environ.get("FLOE_HELM") or cached_tool(request.config, HELM_BUILD, "helm")


def start_cluster(bin_dir: Path, work_dir: Path, kubectl: str) -> K8sCluster:
    """Start the control plane of `bin_dir`'s binaries, its files under `work_dir` (the ``k8s``
    fixture's, and `bench/operator_scale.py`'s)."""
    # The processes run in their log directory: a relative `work_dir` would not be found there.
    work_dir = work_dir.resolve()
    for binary in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        if not (bin_dir / binary).is_file():
            raise K8sError(f"{bin_dir / binary} is missing; run {BUILD_SCRIPT}")
    stages = bin_dir.parent / "share" / "kwok-stages.yaml"
    if not stages.is_file():
        raise K8sError(f"{stages} is missing; run {BUILD_SCRIPT}")

    pki = work_dir / "pki"
    logs = work_dir / "logs"
    home = work_dir / "home"  # the processes' HOME: keeps ~/.kwok/kwok.yaml and the like out
    for directory in (pki, logs, home):
        directory.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}

    _generate_pki(pki)
    tokens = {user: secrets.token_hex(16) for user in ("admin", "controller-manager", "scheduler", "kwok")}
    (pki / "tokens.csv").write_text(
        f'{tokens["admin"]},floe-test-admin,uid-admin,"system:masters"\n'
        f"{tokens['controller-manager']},system:kube-controller-manager,uid-kcm\n"
        f"{tokens['scheduler']},system:kube-scheduler,uid-scheduler\n"
        f'{tokens["kwok"]},kwok-controller,uid-kwok,"system:masters"\n'
    )
    etcd_port, etcd_peer_port, apiserver_port, kcm_port, scheduler_port = _free_ports(5)
    server = f"https://127.0.0.1:{apiserver_port}"
    kubeconfigs = {
        user: _write_kubeconfig(work_dir / f"{user}.kubeconfig", server, pki / "ca.crt", user, token)
        for user, token in tokens.items()
    }

    cluster = K8sCluster(
        kubeconfig=kubeconfigs["admin"],
        server=server,
        bin_dir=bin_dir,
        work_dir=work_dir,
        kubectl_binary=kubectl,
    )

    def start(name: str, args: Sequence[str]) -> None:
        cluster._processes.append(_spawn(name, [str(bin_dir / name), *args], logs / f"{name}.log", env))

    try:
        start(
            "etcd",
            [
                "--name=floe-test",
                f"--data-dir={work_dir / 'etcd-data'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                f"--initial-cluster=floe-test=http://127.0.0.1:{etcd_peer_port}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync=true",  # throwaway data: durability buys nothing here
                "--log-level=warn",
            ],
        )
        _wait_http(cluster, "etcd /health", f"http://127.0.0.1:{etcd_port}/health", expect=b'"health":"true"')

        start(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={apiserver_port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                # Request-header authentication for the aggregation layer; without it the components
                # that delegate authentication log errors about the missing CA bundle.
                f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                # The `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints reject.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
            ],
        )
        _wait_http(
            cluster,
            "kube-apiserver /readyz",
            f"{server}/readyz",
            expect=b"ok",
            ca_file=pki / "ca.crt",
            token=tokens["admin"],
        )

        start(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfigs['controller-manager']}",
                f"--authentication-kubeconfig={kubeconfigs['controller-manager']}",
                f"--authorization-kubeconfig={kubeconfigs['controller-manager']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--leader-elect=false",
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--cluster-name=floe-test",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--profiling=false",
            ],
        )
        start(
            "kube-scheduler",
            [
                f"--kubeconfig={kubeconfigs['scheduler']}",
                f"--authentication-kubeconfig={kubeconfigs['scheduler']}",
                f"--authorization-kubeconfig={kubeconfigs['scheduler']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={scheduler_port}",
                "--leader-elect=false",
                "--profiling=false",
            ],
        )
        start(
            "kwok",
            [
                f"--kubeconfig={kubeconfigs['kwok']}",
                f"--config={stages}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
                "--node-lease-duration-seconds=40",
                "--node-ip=127.0.0.1",
                f"--cidr={KWOK_POD_CIDR}",
            ],
        )
        _wait_http(
            cluster, "kube-controller-manager /healthz", f"https://127.0.0.1:{kcm_port}/healthz", b"ok"
        )
        _wait_http(cluster, "kube-scheduler /healthz", f"https://127.0.0.1:{scheduler_port}/healthz", b"ok")

        cluster.kubectl("apply", "-f", "-", input=json.dumps(_fake_node()))
        cluster.wait_for(f"node {FAKE_NODE_NAME} Ready (kwok)", lambda: _node_ready(cluster, FAKE_NODE_NAME))
        # The service-account controller (kube-controller-manager) at work; pods need this account.
        cluster.wait_for(
            "the default ServiceAccount",
            lambda: cluster.kubectl("get", "serviceaccount", "default", check=False).returncode == 0,
        )
    except BaseException as error:
        tails = cluster.log_tails()
        cluster.stop()
        if isinstance(error, Exception) and not isinstance(error, K8sError):
            raise K8sError(f"the control plane failed to start: {error}\nlogs in {logs}\n{tails}") from error
        raise
    return cluster


# --------------------------------------------------------------------------------------------------
# Helpers


def _spawn(name: str, args: Sequence[str], log_path: Path, env: Mapping[str, str]) -> _Process:
    log = log_path.open("wb")
    try:
        popen = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=log_path.parent,
            start_new_session=True,  # a Ctrl-C in the terminal reaches pytest, which stops them in order
            preexec_fn=_die_with_parent,
        )
    finally:
        log.close()
    return _Process(name, popen, log_path)


def _die_with_parent() -> None:
    """In the child: get SIGKILL when pytest dies, so that even a killed test run leaves nothing behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _wait_http(
    cluster: K8sCluster,
    what: str,
    url: str,
    expect: bytes,
    *,
    ca_file: Path | None = None,
    token: str | None = None,
) -> None:
    """Waits for GET ``url`` to answer 200 with ``expect`` in the body (unverified TLS without ca_file)."""
    if url.startswith("https:"):
        context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else _unverified_tls()
    else:
        context = None
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),  # loopback: never through a proxy from the environment
        urllib.request.HTTPSHandler(context=context),
    )
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def ready() -> bool:
        try:
            with opener.open(urllib.request.Request(url, headers=headers), timeout=5) as response:
                return response.status == 200 and expect in response.read()
        except (OSError, urllib.error.URLError):
            return False

    cluster.wait_for(what, ready, timeout=STARTUP_TIMEOUT, interval=0.25)


def _unverified_tls() -> ssl.SSLContext:
    # Only for the health endpoints of kube-controller-manager and kube-scheduler, whose serving
    # certificates they generate themselves, on loopback.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _generate_pki(pki: Path) -> None:
    """Certificates and keys, made with the openssl CLI (``cryptography`` is not a project dependency).

    ``ca``: signs the apiserver's serving certificate (and client certificates, should a test want
    some); ``front-proxy-ca`` and ``front-proxy-client``: the aggregation layer's request-header
    authentication; ``sa.key``/``sa.pub``: signs and checks service-account tokens.
    """
    try:
        tls = Pki(pki)
    except RuntimeError as exc:
        raise K8sError(str(exc)) from exc
    ca, leaf, run = tls.ca, tls.leaf, tls.run

    ca("ca")
    sans = [
        "IP:127.0.0.1",
        "IP:10.96.0.1",  # the `kubernetes` Service's ClusterIP
        "DNS:localhost",
        "DNS:kubernetes",
        "DNS:kubernetes.default",
        "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local",
    ]
    leaf("apiserver", "ca", "/CN=kube-apiserver", "serverAuth", "-addext", f"subjectAltName={','.join(sans)}")
    ca("front-proxy-ca")
    leaf("front-proxy-client", "front-proxy-ca", "/CN=front-proxy-client", "clientAuth")
    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key")
    run("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")


def _write_kubeconfig(path: Path, server: str, ca_file: Path, user: str, token: str) -> Path:
    ca_data = base64.b64encode(ca_file.read_bytes()).decode("ascii")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "floe-test", "cluster": {"server": server, "certificate-authority-data": ca_data}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "floe-test", "context": {"cluster": "floe-test", "user": user}}],
        "current-context": "floe-test",
        "preferences": {},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def _fake_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": FAKE_NODE_NAME,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": FAKE_NODE_LABELS,
        },
        "spec": {"taints": [FAKE_NODE_TAINT]},
    }


def _node_ready(cluster: K8sCluster, name: str) -> bool:
    result = cluster.kubectl("get", "node", name, "-o", "json", check=False)
    if result.returncode != 0:
        return False
    conditions = json.loads(result.stdout).get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
