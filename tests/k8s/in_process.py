"""The operator run in the test process against the tests' API server, as the chart runs it in
a pod: kopf in a thread (with peering), the task service and the ticking engine."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from floe.controller import kube as kube_module
from floe.controller.config import OperatorConfig
from floe.controller.controller import Controller
from floe.controller.main import run_kopf

from .conftest import K8sCluster


@contextmanager
def kubeconfig_of(k8s: K8sCluster) -> Iterator[None]:
    """KUBECONFIG points at `k8s`, and the Kubernetes client is loaded from it, meanwhile."""
    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(k8s.kubeconfig)
    try:
        kube_module.load_config()
        yield
    finally:
        if saved is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = saved


@contextmanager
def operator_in_process(k8s: K8sCluster, config: OperatorConfig) -> Iterator[Controller]:
    """A started operator of `config`, leading, with KUBECONFIG pointing at `k8s` meanwhile; kopf
    and the operator are stopped and KUBECONFIG restored on exit."""
    with kubeconfig_of(k8s):
        ctrl = Controller(config, kube_module.Kube())
        ctrl.start()
        stop, ready = threading.Event(), threading.Event()
        thread = threading.Thread(target=run_kopf, args=(ctrl, stop, ready), daemon=True)
        thread.start()
        try:
            assert ready.wait(60), "kopf did not start"
            k8s.wait_for("leadership", ctrl.leadership.is_leader, timeout=30)
            yield ctrl
        finally:
            stop.set()
            thread.join(30)
            ctrl.stop()
