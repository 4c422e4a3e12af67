"""The test control plane's API server as a benchmark reads it: its request counters, and their peak rate."""

from __future__ import annotations

import base64
import itertools
import ssl
import threading
import time
import urllib.request
from collections import Counter

import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness.control_plane import K8sCluster

WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE"}
SAMPLE_S = 5.0
"""How often `WriteSampler` reads the API server's request counters: the window of the peak write rate."""


class ApiServer:
    """The API server's own request counters (``apiserver_request_total``), read as its admin."""

    def __init__(self, cluster: K8sCluster) -> None:
        config = yaml.safe_load(cluster.kubeconfig.read_text())
        self._token = config["users"][0]["user"]["token"]
        self._url = f"{cluster.server}/metrics"
        ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
        self._tls = ssl.create_default_context(cadata=ca)

    def requests(self) -> Counter[tuple[str, str, str]]:
        """Requests so far by (verb, resource, subresource)."""
        request = urllib.request.Request(self._url, headers={"Authorization": f"Bearer {self._token}"})
        with urllib.request.urlopen(request, context=self._tls, timeout=30) as response:
            text = response.read().decode()
        counts: Counter[tuple[str, str, str]] = Counter()
        for family in text_string_to_metric_families(text):
            if family.name != "apiserver_request":
                continue
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    labels = sample.labels
                    key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
                    counts[key] += int(sample.value)
        return counts


def writes(counts: Counter[tuple[str, str, str]]) -> int:
    """Write requests among `counts`."""
    return sum(n for (verb, _, _), n in counts.items() if verb in WRITE_VERBS)


def status_patches(counts: Counter[tuple[str, str, str]]) -> int:
    """Patches of OptimizedTables' status among `counts`."""
    return counts[("PATCH", "optimizedtables", "status")]


class WriteSampler:
    """Samples the API server's write requests every `SAMPLE_S` seconds, for the peak rate."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WriteSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), writes(self.api.requests())))
            self._stop.wait(SAMPLE_S)

    def peak_per_s(self, since: float, until: float) -> float:
        """The most write requests a second in one sampling window between `since` and `until`."""
        inside = [(t, n) for t, n in self.samples if since <= t <= until]
        return max(((b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(inside)), default=0.0)
