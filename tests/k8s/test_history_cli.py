"""``floe history`` and ``floe explain`` against a real kube-apiserver: they print what an
OptimizedTable's status records (the runs with their totals; what the table waits for, its health,
its settings and where each came from), and name a table that does not exist."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from run_records import RUNS

from floe.api.history import RunRecord
from floe.cli import main

from .conftest import K8sCluster
from .test_crds import _namespace, apply, patch_status, table

pytestmark = pytest.mark.k8s


@pytest.fixture
def namespace(crds: K8sCluster) -> Iterator[str]:
    yield from _namespace(crds)


def replace_table(run: RunRecord, table: str) -> RunRecord:
    return run.model_copy(update={"table": table})


def test_floe_history_prints_the_runs_in_status_with_totals(
    crds: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert apply(crds, table("orders"), namespace).returncode == 0
    runs = [replace_table(r, f"{namespace}/orders") for r in RUNS if r.table == "analytics/orders"]
    runs.append(replace_table(RUNS[2], f"{namespace}/orders"))  # a failed run of it too
    # The API server takes the records (its schema checks each field), as the operator writes them.
    patch_status(
        crds, "ot", "orders", namespace, {"history": [r.model_dump(by_alias=True, mode="json") for r in runs]}
    )
    monkeypatch.setenv("KUBECONFIG", str(crds.kubeconfig))

    assert main(["history", "orders", "-n", namespace]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert f"{namespace}/orders: 4 runs" in lines[0]
    rows = [line.strip() for line in lines if line.strip().startswith("2026-")]  # a run's reason may wrap
    assert len(rows) == 4
    assert rows[0].startswith("2026-11-28 10:00:00") and "minor" in rows[0] and "committed" in rows[0]
    assert "14→1" in rows[0] and "3.0 MiB→2.5 MiB" in rows[0] and "40.5" in rows[0] and "4242" in rows[0]
    assert "14 fragments" in rows[0] and "eq-deletes >= 12" in out
    assert "expire" in rows[1] and "done" in rows[1] and "0→3" in rows[1]
    assert "full" in rows[2] and "committed" in rows[2]
    assert "major" in rows[3] and "failed" in rows[3] and "disk full" in rows[3]
    [total] = [line for line in lines if line.strip().startswith("total")]
    assert "1 failed" in total and "18→4" in total and "42.5" in total


def test_floe_history_of_an_unknown_table_exits_2_naming_it(
    crds: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(crds.kubeconfig))
    assert main(["history", "no-such-table", "-n", namespace]) == 2
    err = capsys.readouterr().err
    assert "no OptimizedTable 'no-such-table'" in err and namespace in err


def test_floe_explain_prints_the_wait_health_and_settings_in_status(
    crds: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert apply(crds, table("orders"), namespace).returncode == 0
    patch_status(
        crds,
        "ot",
        "orders",
        namespace,
        {
            "state": "PENDING",
            "waiting": {
                "reason": "Queued",
                "message": "minor due in 3 partitions; 2nd of 7 tables waiting in group 'local'",
                "queuePosition": 2,
                "queueLength": 7,
            },
            "health": {"score": 62, "smallFiles": 0.7, "equalityDeletes": 0.25, "positionDeletes": 0.0},
            "effectiveSpec": {"minor": {"triggerFileCount": 6}, "quota": 0.5},
            "specSources": {"minor.triggerFileCount": "OptimizerGroup/local"},
        },
    )
    monkeypatch.setenv("KUBECONFIG", str(crds.kubeconfig))
    assert main(["explain", "orders", "-n", namespace]) == 0
    out = capsys.readouterr().out
    assert "PENDING" in out
    assert "Queued: minor due in 3 partitions; 2nd of 7 tables waiting in group 'local'" in out
    assert "62/100" in out and "small files 0.70 x 40" in out
    [line] = [x for x in out.splitlines() if "minor.triggerFileCount" in x]
    assert "6" in line and "OptimizerGroup/local" in line
    [line] = [x for x in out.splitlines() if x.strip().startswith("quota ")]
    assert "0.5" in line and "floe's default" in line
    assert "pass --catalog-config to read each partition's triggers" in out


def test_floe_explain_of_an_unknown_table_exits_2_naming_it(
    crds: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(crds.kubeconfig))
    assert main(["explain", "no-such-table", "-n", namespace]) == 2
    assert f"no OptimizedTable 'no-such-table' in namespace {namespace!r}" in capsys.readouterr().err
