"""tests/dashboard_preview.py, the drawing of the Grafana dashboard for the docs: values in
Grafana's units, series named by their legend format, and every panel of the chart's dashboard
drawn where its grid puts it, with its data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dashboard_preview import Box, Series, format_value, legend_name, render

DASHBOARD = Path(__file__).resolve().parents[1] / "charts" / "floe" / "dashboards" / "floe.json"


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (0.0, "short", "0"),
        (12.0, "short", "12"),
        (1520.0, "short", "1.52 K"),
        (0.25, "percentunit", "25%"),
        (0.0042, "s", "4.2 ms"),
        (2.5, "s", "2.5 s"),
        (90.0, "s", "1.5 min"),
        (2_500_000.0, "Bps", "2.5 MB/s"),
        (3.0, "ops", "3 ops/s"),
        (1.234, "reqps", "1.23 req/s"),
        (7.0, "none", "7"),
    ],
)
def test_values_are_shown_in_grafanas_units(value: float, unit: str, shown: str) -> None:
    assert format_value(value, unit) == shown


def test_series_are_named_by_their_legend_format() -> None:
    metric = {"__name__": "floe_commits_total", "group": "ns/g", "result": "committed"}
    assert legend_name("{{group}} {{ result }}", metric) == "ns/g committed"
    assert legend_name("__auto", metric) == 'floe_commits_total{group="ns/g", result="committed"}'
    assert legend_name(None, {"group": "ns/g"}) == '{group="ns/g"}'


def test_every_panel_of_the_dashboard_is_drawn_on_its_grid_with_its_data() -> None:
    board = json.loads(DASHBOARD.read_text())
    shown = [p for p in board["panels"] if p["type"] != "row"]
    points = [(1000.0 + 2 * i, float(i % 7) if i != 20 else None) for i in range(60)]
    data = {p["id"]: [Series(f"series of {p['id']}", points)] for p in shown}
    data[shown[-1]["id"]] = []  # a panel Prometheus had nothing for
    page = render(board, data, 1000.0, 1118.0, 2.0, {"Group": "ns/<g>"})

    assert "ns/&lt;g&gt;" in page and "ns/<g>" not in page
    assert "not Grafana's own rendering" in page
    sections = re.findall(r'<section class="panel" style="([^"]*)"><h2>([^<]*)</h2>(.*?)</section>', page)
    assert [title for _, title, _ in sections] == [p["title"].replace("'", "&#x27;") for p in shown]
    for (style, _, body), panel in zip(sections, shown, strict=True):
        box = Box.of(panel["gridPos"])
        assert f"left:{box.left:.1f}px;top:{box.top:.1f}px" in style
        if panel is shown[-1]:
            assert "<path" not in body
            continue
        # The missing sample at index 20 lifts the pen: two pieces of line, each starting with M.
        (line,) = re.findall(r'<path d="([^"]*)" fill="none"', body)
        assert line.count("M") == 2, panel["title"]
        assert f"series of {panel['id']}" in body or panel["type"] == "stat"


def test_a_panel_type_that_cannot_be_drawn_is_named() -> None:
    board = {
        "title": "b",
        "uid": "b",
        "panels": [{"type": "piechart", "id": 1, "gridPos": {"x": 0, "y": 0, "w": 4, "h": 4}}],
    }
    with pytest.raises(KeyError, match="piechart"):
        render(board, {}, 0.0, 1.0, 1.0, {})
