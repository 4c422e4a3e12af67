"""A picture of the chart's Grafana dashboard for docs/reference/metrics.md, drawn by Grafana's own
panel components from the dashboard's JSON and a real Prometheus' answers to its queries.

Grafana's server cannot run here (it is AGPL-licensed, which this project does not use, and Debian
does not package it), but its panel components are published apart under Apache-2.0: @grafana/ui
(PanelChrome, TimeSeries on uPlot, BigValue, the legends) and @grafana/data (field config, value
formats, reducers, the dark theme). tests/grafana_board/board.tsx lays the panels on Grafana's grid
with those components; scripts/grafana-board/build.sh bundles it once per content. This module
turns Prometheus' range answers into the series the page draws (named by each target's legend
format, a missing sample a gap) and writes the page; the page says on its face what drew it.
tests/k8s/test_grafana_dashboard.py photographs it in headless Chromium when
``FLOE_DASHBOARD_PREVIEW`` names the PNG to write.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from floe.ui.html import escape

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD = REPO_ROOT / "scripts" / "grafana-board" / "build.sh"
DASHBOARD = REPO_ROOT / "charts" / "floe" / "dashboards" / "floe.json"
"""The chart's Grafana dashboard."""
WIDTH = 1440
"""The page's width in pixels; the grid's 24 columns share it."""
DRAWN_TYPES = frozenset({"row", "timeseries", "stat"})
"""The panel types board.tsx draws; a dashboard with another fails before any page is written."""
PANEL_KEYS = ("id", "type", "title", "gridPos", "fieldConfig", "options")
"""What board.tsx reads of a panel besides its series."""


def dashboard() -> dict[str, Any]:
    """The chart's Grafana dashboard, as its JSON says."""
    return dict(json.loads(DASHBOARD.read_text()))


@dataclass(frozen=True)
class Series:
    """One series of a panel: its legend name and its points (epoch seconds, value or None for no
    value)."""

    name: str
    points: Sequence[tuple[float, float | None]]


def legend_name(legend_format: str | None, metric: dict[str, str]) -> str:
    """The series' name as Grafana writes it: ``{{label}}`` replaced by the label's value; with no
    format (or ``__auto``) the labels themselves."""
    if legend_format and legend_format != "__auto":
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), legend_format)
    labels = {k: v for k, v in metric.items() if k != "__name__"}
    name = metric.get("__name__", "")
    return name + ("{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")


def _number(value: str) -> float | None:
    """A sample's value; None for NaN and infinities, which Grafana leaves out of a line."""
    number = float(value)
    return number if math.isfinite(number) else None


def panel_series(
    panel: dict[str, Any], query_range: Callable[[str], list[dict[str, Any]]], prepare: Callable[[str], str]
) -> list[Series]:
    """Every series of `panel`'s targets: each expression as `prepare` makes it (variables
    substituted), answered by `query_range` (Prometheus' ``matrix`` result)."""
    found = []
    for target in panel["targets"]:
        for result in query_range(prepare(target["expr"])):
            points = [(float(t), _number(v)) for t, v in result["values"]]
            found.append(Series(legend_name(target.get("legendFormat"), result["metric"]), points))
    return found


def _on_steps(
    points: Sequence[tuple[float, float | None]], start: float, step: float, steps: int
) -> list[float | None]:
    """`points` on each of the `steps` steps from `start`, None where Prometheus had no sample:
    Grafana breaks a line where a series skips a step of its query's interval."""
    by_step = {round((t - start) / step): v for t, v in points}
    return [by_step.get(i) for i in range(steps)]


def board_payload(
    board: dict[str, Any],
    data: dict[int, list[Series]],
    start: float,
    end: float,
    step: float,
    variables: dict[str, str],
) -> dict[str, Any]:
    """What board.tsx draws: the dashboard's panels, each with its series from `data` (by panel id)
    on the steps of `start`..`end` (epoch seconds), and the variables' values for its header."""
    kinds = {panel["type"] for panel in board["panels"]} - DRAWN_TYPES
    if kinds:
        # A new panel type must be drawn before it is shipped.
        raise KeyError(f"no component draws panels of type {', '.join(sorted(kinds))}")
    times = [round(1000 * (start + i * step)) for i in range(round((end - start) / step) + 1)]
    panels = []
    for panel in board["panels"]:
        series = [
            {"name": one.name, "times": times, "values": _on_steps(one.points, start, step, len(times))}
            for one in data.get(panel["id"], [])
        ]
        kept = {key: panel[key] for key in PANEL_KEYS if key in panel}
        panels.append({**kept, "series": series})
    return {
        "title": board["title"],
        "source": f"charts/floe/dashboards/{board['uid']}.json",
        "from": times[0],
        "to": times[-1],
        "width": WIDTH,
        "variables": variables,
        "panels": panels,
    }


def grafana_board() -> Path:
    """The bundled page's directory (board.js, board.css, fonts), bundled first if needed."""
    built = subprocess.run([str(BUILD)], check=True, capture_output=True, text=True)
    return Path(built.stdout.strip().splitlines()[-1])


def write_page(payload: dict[str, Any], bundle: Path, page: Path) -> None:
    """Write the page drawing `payload` with the bundle in `bundle` to `page`."""
    # "</" inside the JSON would end the script element early.
    data = json.dumps(payload).replace("</", "<\\/")
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{escape(payload['title'])}</title>"
        f"<link rel='stylesheet' href='{(bundle / 'board.css').as_uri()}'></head>"
        "<body style='margin:0'><div id='board'></div>"
        f"<script>window.__grafana_public_path__ = {json.dumps(bundle.as_uri() + '/')};"
        f"window.FLOE_BOARD = {data};</script>"
        f"<script src='{(bundle / 'board.js').as_uri()}'></script></body></html>"
    )


def open_drawn(driver: WebDriver, page: Path) -> None:
    """Load `page` in `driver` and wait until every panel is drawn, with the viewport as tall as the
    page (a window is capped at the screen's height) so one screenshot takes it all."""
    driver.get(page.as_uri())
    drawn = "return document.body.dataset.drawn === 'yes'"
    WebDriverWait(driver, 60).until(lambda d: d.execute_script(drawn))
    height = driver.execute_script("return document.documentElement.scrollHeight")
    metrics = {"width": WIDTH, "height": int(height), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    # The panels size themselves to the new viewport: wait for two frames more.
    driver.execute_async_script(
        "const done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(() => done()));"
    )
