"""An executor's Python daemon started before Spark asks for it (floe_optimizer.python_daemon),
with a real Spark: local mode runs its tasks through the same Python worker factory as an
executor, and takes ``spark.python.daemon.module`` the same way.

One JVM, three SparkContexts one after another (each starts its own daemon): a waiting daemon
takes over, one started with another hash seed refuses and Spark runs its own, and with none
waiting Spark runs its own too. The tasks report their worker's parent, which is the daemon.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = r"""
import json, os, subprocess, sys, time
from pyspark import SparkConf, SparkContext

socket_path, out = sys.argv[1], sys.argv[2]
cases = {}

def waiting_daemon(seed):
    daemon = subprocess.Popen(
        [sys.executable, "-m", "floe_optimizer.python_daemon", "serve", socket_path],
        env={**os.environ, "PYTHONHASHSEED": seed},
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    while not os.path.exists(socket_path):
        assert time.monotonic() < deadline and daemon.poll() is None, daemon.stderr.read()
        time.sleep(0.05)
    return daemon

def run(name, daemon):
    conf = (SparkConf().setMaster("local[1]").setAppName(name).set("spark.ui.enabled", "false")
            .set("spark.python.daemon.module", "floe_optimizer.python_daemon"))
    sc = SparkContext(conf=conf)
    rows = sc.parallelize(range(6), 3).mapPartitions(
        lambda it: [(os.getppid(), os.environ.get("PYTHONHASHSEED"),
                     "floe_optimizer.spark_runner" in sys.modules, sum(it))]
    ).collect()
    sc.stop()
    ended, message = None, ""
    if daemon is not None:
        try:
            daemon.wait(timeout=60)
        finally:
            daemon.kill()
        ended, message = daemon.returncode, daemon.stderr.read()
    cases[name] = {"rows": rows, "daemon": None if daemon is None else daemon.pid,
                   "ended": ended, "message": message}

run("taken-over", waiting_daemon("0"))
run("refused", waiting_daemon("5"))
run("none-waiting", None)
json.dump(cases, open(out, "w"))
"""


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    work = tmp_path_factory.mktemp("python-daemon")
    out = work / "cases.json"
    socket_path = work / "daemon.sock"
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "FLOE_PYTHON_DAEMON_SOCKET": str(socket_path),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("PYTHONHASHSEED", None)  # Spark gives its workers 0 then
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(socket_path), str(out)],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    loaded: dict[str, dict[str, object]] = json.loads(out.read_text())
    return loaded


def _parents(case: dict[str, object]) -> set[int]:
    rows = case["rows"]
    assert isinstance(rows, list)
    assert sum(row[3] for row in rows) == 15  # every partition ran, once
    assert {row[1] for row in rows} == {"0"}  # Spark's hash seed reached the workers
    return {row[0] for row in rows}


def test_a_waiting_daemon_takes_over_with_floes_modules_imported(cases: dict[str, dict[str, object]]) -> None:
    case = cases["taken-over"]
    assert _parents(case) == {case["daemon"]}
    assert all(row[2] for row in case["rows"])  # type: ignore[attr-defined]
    # Spark stopping its daemon stopped this one, which had nothing to complain of.
    assert case["ended"] is not None and "not taking over" not in str(case["message"])


def test_a_daemon_of_another_hash_seed_refuses_and_spark_runs_its_own(
    cases: dict[str, dict[str, object]],
) -> None:
    case = cases["refused"]
    assert case["daemon"] not in _parents(case)
    assert case["ended"] == 1
    assert "not taking over Spark's daemon: Spark's PYTHONHASHSEED is '0'" in str(case["message"])
    assert "started with '5' (string hashes would differ)" in str(case["message"])


def test_with_no_daemon_waiting_spark_runs_its_own(cases: dict[str, dict[str, object]]) -> None:
    case = cases["none-waiting"]
    assert len(_parents(case)) == 1
    assert not any(row[2] for row in case["rows"])  # type: ignore[attr-defined]


def test_a_waiting_daemon_ends_with_its_parent(tmp_path: Path) -> None:
    """The JVM that was to hand over exits without a Python task: its daemon ends too."""
    socket_path = tmp_path / "daemon.sock"
    parent = subprocess.Popen(
        [
            "bash",
            "-c",
            f'"{sys.executable}" -m floe_optimizer.python_daemon serve "{socket_path}" & echo $!; sleep 3',
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    daemon = int(parent.stdout.readline())
    assert parent.wait(timeout=30) == 0
    deadline = time.monotonic() + 30
    while Path(f"/proc/{daemon}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{daemon}").exists(), "the daemon outlived its parent"
    assert not socket_path.exists()


def test_the_daemon_module_refuses_unknown_arguments() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "floe_optimizer.python_daemon", "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 64
    assert "usage: python -m floe_optimizer.python_daemon [serve SOCKET]" in result.stderr
