"""The test control plane of `tests/k8s/conftest.py` (etcd, kube-apiserver, controller-manager, scheduler,
kwok), started for a benchmark with floe's CRDs applied; built by ``scripts/k8s-test-env/build.sh``."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # the test control plane is tests/k8s/conftest.py's

from k8s.conftest import BUILD_SCRIPT, FAKE_NODE_TAINT, K8sCluster, _free_ports, start_cluster  # noqa: E402

__all__ = ["FAKE_NODE_TAINT", "K8sCluster", "control_plane", "free_port", "pid_of"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    (port,) = _free_ports(1)
    return port


def pid_of(cluster: K8sCluster, name: str) -> int:
    """The process id of the control plane's ``name`` (``kube-apiserver``, ``etcd``, ...)."""
    return next(p for p in cluster._processes if p.name == name).popen.pid


@contextmanager
def control_plane(work_dir: Path) -> Iterator[K8sCluster]:
    """A fresh control plane under ``work_dir/cluster``, floe's CRDs applied and the kubernetes client
    configured for it; stopped at the end, also when the run is ended by SIGTERM."""
    check = subprocess.run([str(BUILD_SCRIPT), "--check"], capture_output=True, text=True, check=False)
    if check.returncode != 0:
        raise SystemExit(f"the test control plane is not built: run {BUILD_SCRIPT}")
    bin_dir = Path(check.stdout.strip().splitlines()[-1])
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise SystemExit("kubectl is not on PATH")
    from kubernetes import config as kube_config

    cluster_dir = work_dir / "cluster"
    shutil.rmtree(cluster_dir, ignore_errors=True)
    cluster_dir.mkdir(parents=True)
    # A SIGTERM ends the run as an interrupt would: the control plane is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cluster = start_cluster(bin_dir, cluster_dir, kubectl)
    try:
        cluster.kubectl("apply", "-f", str(REPO / "crds"))
        kube_config.load_kube_config(str(cluster.kubeconfig))
        yield cluster
    finally:
        cluster.stop()
