"""helm for the tests under tests/k8s: the chart rendered with ``helm template``, or installed.

The binary is the session fixture ``helm_binary`` of conftest.py (scripts/helm/build.sh's helm, or
``$FLOE_HELM``).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import yaml

from .conftest import REPO_ROOT, K8sCluster

CHART = REPO_ROOT / "charts" / "floe"
RELEASE = "floe"
Manifest = dict[str, Any]


class Helm:
    """The helm binary, with its config, cache and data dirs kept under the test's tmp dir."""

    def __init__(self, binary: str, home: Path, kubeconfig: Path | None = None) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.home = home
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``helm ARGS`` (against the test cluster when it has a kubeconfig); raise on failure if
        ``check``, with what helm said."""
        command = [self.binary, *args]
        if self.kubeconfig is not None:
            command += ["--kubeconfig", str(self.kubeconfig)]
        result = subprocess.run(
            command, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result

    def values_file(self, values: dict[str, Any]) -> str:
        """``values`` written to a new file under helm's home, for ``-f``."""
        path = self.home / f"values-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump(values))
        return str(path)

    def template(self, namespace: str, values: dict[str, Any]) -> str:
        """``helm template`` of the chart as release ``floe`` in ``namespace``: the rendered YAML."""
        return self(
            "template", RELEASE, str(CHART), "--namespace", namespace, "-f", self.values_file(values)
        ).stdout

    def render(self, namespace: str, values: dict[str, Any]) -> list[Manifest]:
        """`template`, parsed: the chart's objects."""
        return [doc for doc in yaml.safe_load_all(self.template(namespace, values)) if doc]


def apply_driver_rbac(k8s: K8sCluster, helm: Helm, namespace: str) -> list[Manifest]:
    """The drivers' ServiceAccount, Role and RoleBinding, as the chart renders them for ``namespace``,
    applied there: what the operator's driver pods run as when the chart installs floe."""
    docs = [
        doc
        for doc in helm.render(namespace, {"watchNamespaces": [namespace]})
        if doc["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "driver"
    ]
    assert sorted(doc["kind"] for doc in docs) == ["Role", "RoleBinding", "ServiceAccount"], docs
    k8s.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    return docs
