"""checkov's scan of the Helm chart as ``helm template`` renders it.

checkov comes from scripts/checkov/build.sh (its own cached virtualenv; ``FLOE_CHECKOV`` names
another checkov binary). Every check must pass on each rendering below, except those
charts/floe/.checkov.yaml skips, each with a comment saying why; a skip that no rendering needs any
more fails too, so the list stays honest. A check that regresses (a template change that makes it
fail) fails the test: ``test_a_regressed_check_fails_the_scan`` shows the comparison catching one.

No cluster is needed: these tests only render and scan files.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import REPO_ROOT, cached_tool
from .helm import CHART, Helm

CHECKOV_BUILD = REPO_ROOT / "scripts" / "checkov" / "build.sh"
CONFIG = CHART / ".checkov.yaml"
DIGEST = "sha256:" + "0123456789abcdef" * 4
RENDERINGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    # Every optional object, two watched namespaces, the NetworkPolicies with an extra peer.
    "two-namespaces": {
        "watchNamespaces": ["team-a", "team-b"],
        "replicaCount": 2,
        "defaultGroup": {"enabled": True, "namespace": "team-a"},
        "serviceMonitor": {"enabled": True},
        "externalMetrics": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
        "networkPolicy": {
            "enabled": True,
            "extraIngress": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
            ],
        },
    },
    "own-token-no-discovery": {
        "registrationToken": {"existingSecret": "mine"},
        "rbac": {"discovery": False},
        "serviceAccount": {"annotations": {"example.com/role": "floe"}},
    },
}


@pytest.fixture(scope="session")
def checkov(request: pytest.FixtureRequest) -> str:
    """``$FLOE_CHECKOV``, else scripts/checkov/build.sh's checkov: cached, or installed now."""
    return os.environ.get("FLOE_CHECKOV") or cached_tool(request.config, CHECKOV_BUILD, "checkov")


@pytest.fixture(scope="module")
def helm_offline(helm_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm for ``helm template``."""
    return Helm(helm_binary, tmp_path_factory.mktemp("helm-home"))


def skipped_checks() -> dict[str, str]:
    """The checks .checkov.yaml skips, each with its reason: the comment lines right above it."""
    config = yaml.safe_load(CONFIG.read_text())
    listed = config.get("skip-check") or []
    reasons: dict[str, str] = {}
    comment: list[str] = []
    for line in CONFIG.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("# "))
            continue
        entry = re.fullmatch(r"-\s*(CKV2?_[A-Z0-9_]+)", stripped)
        if entry:
            reasons[entry[1]] = " ".join(comment)
        comment = []
    assert sorted(reasons) == sorted(listed), "every skip-check entry is a line `- CKV_...` of its own"
    return reasons


def scan(checkov: str, rendered: Path, *args: str) -> dict[str, Any]:
    """``checkov -f RENDERED ARGS`` with JSON output, offline; its report (summary, failed checks)."""
    result = subprocess.run(
        [checkov, "-f", str(rendered), "--framework", "kubernetes", "--skip-download", "-o", "json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    # 0: no failed check; 1: some failed. Anything else is checkov itself failing.
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["summary"]["parsing_errors"] == 0, report["summary"]
    assert report["summary"]["resource_count"] > 0, report["summary"]
    return report


def failed(report: dict[str, Any]) -> set[tuple[str, str]]:
    """(check id, resource) of each failed check."""
    return {(c["check_id"], c["resource"]) for c in (report.get("results") or {}).get("failed_checks", [])}


def unexpected(report: dict[str, Any]) -> list[str]:
    """The failed checks .checkov.yaml does not skip: what fails the test."""
    skips = skipped_checks()
    return sorted(f"{check} on {resource}" for check, resource in failed(report) if check not in skips)


def render(helm: Helm, tmp: Path, name: str, values: dict[str, Any]) -> Path:
    """The chart rendered into a file, as checkov reads it."""
    path = tmp / f"{name}.yaml"
    path.write_text(helm.template("floe-system", values))
    return path


def test_every_skipped_check_says_why() -> None:
    reasons = skipped_checks()
    assert reasons, "an empty skip list needs no test of its reasons: drop this one instead"
    for check, reason in reasons.items():
        # The comment names the check and gives a reason of some substance.
        assert reason.startswith(check), f"{check}: its comment should start with its id"
        assert len(reason) >= 80, f"{check}: say why it does not apply or is accepted ({reason!r})"


def test_checkov_passes_the_rendered_chart(checkov: str, helm_offline: Helm, tmp_path: Path) -> None:
    needed: set[str] = set()
    for name, values in RENDERINGS.items():
        rendered = render(helm_offline, tmp_path, name, values)
        report = scan(checkov, rendered)
        assert report["summary"]["passed"] > 0
        assert not unexpected(report), f"{name}: failed checks not in .checkov.yaml: {unexpected(report)}"
        needed |= {check for check, _ in failed(report)}
        # The configuration file as a user runs it: nothing fails.
        configured = scan(checkov, rendered, "--config-file", str(CONFIG))
        assert configured["summary"]["failed"] == 0, failed(configured)
    stale = sorted(set(skipped_checks()) - needed)
    assert not stale, f"skipped in .checkov.yaml but failed by no rendering any more, remove: {stale}"


def test_with_image_digests_the_image_checks_pass(checkov: str, helm_offline: Helm, tmp_path: Path) -> None:
    """What .checkov.yaml says of CKV_K8S_43 and CKV_K8S_15: with digests set, both pass."""
    values = {
        "image": {"digest": DIGEST},
        "optimizerImage": {"digest": DIGEST},
        "defaultGroup": {"enabled": True},
    }
    report = scan(
        checkov, render(helm_offline, tmp_path, "digests", values), "--check", "CKV_K8S_43,CKV_K8S_15"
    )
    assert report["summary"]["failed"] == 0, failed(report)
    assert report["summary"]["passed"] >= 4  # two checks on the Deployment and on the hook Job


def test_a_regressed_check_fails_the_scan(checkov: str, helm_offline: Helm, tmp_path: Path) -> None:
    """A template change that breaks a check is what the scan is for: a writable root filesystem
    (CKV_K8S_22) and no CPU limit (CKV_K8S_11) are reported, and not as skipped."""
    values = {
        "securityContext": {"readOnlyRootFilesystem": False},
        "resources": {"limits": {"cpu": None, "memory": "1Gi"}},  # null: helm drops the default
    }
    problems = unexpected(scan(checkov, render(helm_offline, tmp_path, "regressed", values)))
    assert any(p.startswith("CKV_K8S_22 on Deployment.") for p in problems), problems
    assert any(p.startswith("CKV_K8S_11 on Deployment.") for p in problems), problems
