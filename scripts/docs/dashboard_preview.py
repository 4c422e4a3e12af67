"""The picture of the chart's Grafana dashboard in docs/reference/metrics.md (docs/img/dashboard.png).

It runs tests/k8s/test_grafana_dashboard.py's live test (the operator in-process on the real API
server of tests/k8s, a real optimizer with Spark, Debian's Prometheus scraping it) with
``FLOE_DASHBOARD_PREVIEW`` set: once every panel has a series the test keeps floe busy a few
minutes more, draws the dashboard from Prometheus' answers with Grafana's own panel components
(tests/dashboard_preview.py, tests/grafana_board/) and photographs it in headless Chromium.
Grafana's server is not run: see tests/dashboard_preview.py.

Usage (from the repository's root, after ``make k8s-env prometheus-env grafana-board-env host-env``):
  .venv/bin/python scripts/docs/dashboard_preview.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "img" / "dashboard.png"
TEST = "tests/k8s/test_grafana_dashboard.py::test_every_panel_shows_series_of_a_running_floe"


def main() -> int:
    """Run the live dashboard test with the picture asked for; its exit status."""
    environment = {**os.environ, "FLOE_DASHBOARD_PREVIEW": str(OUT)}
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST]
    return subprocess.run(command, cwd=ROOT, env=environment, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
