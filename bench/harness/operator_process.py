"""``floe operator`` run by a benchmark as its own process, and what is read of it from outside."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from harness.control_plane import K8sCluster, free_port


def rss_mib(pid: int, field_name: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of process `pid`, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass(frozen=True)
class RunningOperator:
    """The operator process on the control plane: its task service's port and registration token."""

    cluster: K8sCluster
    process: subprocess.Popen[bytes]
    port: int
    token: str
    log: Path

    def alive(self) -> None:
        """Raise if the control plane or the operator has stopped."""
        self.cluster.check_running()
        if self.process.poll() is not None:
            raise RuntimeError(f"the operator exited with {self.process.returncode}; see {self.log}")

    def until(self, what: str, condition: Callable[[], bool], timeout_s: float) -> float:
        """`K8sCluster.wait_for`, the operator's process checked too: when `condition` came true."""
        self.cluster.wait_for(what, lambda: self.alive() or condition(), timeout=timeout_s, interval=1.0)
        return time.monotonic()

    def rss_mib(self, field_name: str = "VmRSS") -> float:
        """The operator's RSS now (``VmRSS``) or at its peak (``VmHWM``), in MiB."""
        return rss_mib(self.process.pid, field_name)

    def metrics(self) -> dict[str, float]:
        """The operator's counters a benchmark reads (`operator_metrics`)."""
        return operator_metrics(self.port)


@contextmanager
def operator_process(cluster: K8sCluster, namespace: str, work: Path) -> Iterator[RunningOperator]:
    """``floe operator`` for `namespace`, standalone, as its own process, once its metrics answer."""
    port = free_port()
    token = "bench-" + namespace
    token_file = work / "registration-token"
    token_file.write_text(token)
    log = (work / "operator.log").open("wb")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "floe"),
            "operator",
            "--standalone",
            "--namespace",
            namespace,
            "--service-port",
            str(port),
            "--registration-token-file",
            str(token_file),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the operator did not start; see {work / 'operator.log'}") from None
                time.sleep(0.5)
        yield RunningOperator(cluster, process, port, token, work / "operator.log")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def operator_metrics(port: int) -> dict[str, float]:
    """The operator's counters this benchmark reads: catalog calls by kind, maintenance runs."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "floe_catalog_calls_total":
                out[f"catalog_{sample.labels['kind']}"] += sample.value
            elif sample.name == "floe_maintenance_runs_total":
                out["maintenance_runs"] += sample.value
    return dict(out)
