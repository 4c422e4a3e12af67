"""tests/dashboard_preview.py and tests/grafana_board, the chart's Grafana dashboard drawn with
Grafana's panel components for the docs: series named by their legend format and laid on the
range's steps, and, in headless Chromium, every panel of the chart's dashboard drawn where its grid
puts it, with Grafana's units, legends and sparklines and no console error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dashboard_preview import (
    Series,
    board_payload,
    dashboard,
    grafana_board,
    legend_name,
    open_drawn,
    write_page,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from ui_stack import browser_missing, chromium

START, END, STEP = 1_764_000_000.0, 1_764_000_118.0, 2.0


def _unit(panel: dict[str, Any]) -> str | None:
    return panel.get("fieldConfig", {}).get("defaults", {}).get("unit")


def _shown(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels that draw data: all but the rows."""
    return [p for p in board["panels"] if p["type"] != "row"]


def test_series_are_named_by_their_legend_format() -> None:
    metric = {"__name__": "floe_commits_total", "group": "ns/g", "result": "committed"}
    assert legend_name("{{group}} {{ result }}", metric) == "ns/g committed"
    assert legend_name("__auto", metric) == 'floe_commits_total{group="ns/g", result="committed"}'
    assert legend_name(None, {"group": "ns/g"}) == '{group="ns/g"}'


def test_series_are_laid_on_the_ranges_steps_with_a_gap_where_a_sample_is_missing() -> None:
    board = dashboard()
    stat = next(p for p in board["panels"] if p["type"] == "stat")
    # Prometheus answers only the steps it has a sample for: here not 1004 nor 1006.
    points = [(START, 1.0), (START + 2, 2.0), (START + 8, None), (START + 10, 5.0)]
    data = {stat["id"]: [Series("a", points)]}
    payload = board_payload(board, data, START, START + 10, STEP, {"Group": "ns/g"})

    drawn = next(p for p in payload["panels"] if p["id"] == stat["id"])
    times = [1_764_000_000_000 + 2000 * i for i in range(6)]
    assert drawn["series"] == [{"name": "a", "times": times, "values": [1.0, 2.0, None, None, None, 5.0]}]
    assert (payload["from"], payload["to"]) == (1_764_000_000_000, 1_764_000_010_000)
    assert [p["gridPos"] for p in payload["panels"]] == [p["gridPos"] for p in board["panels"]]
    assert all(p["series"] == [] for p in payload["panels"] if p["id"] != stat["id"])
    assert payload["variables"] == {"Group": "ns/g"}


def test_a_panel_type_that_cannot_be_drawn_is_named() -> None:
    board = dashboard()
    grid = {"x": 0, "y": 99, "w": 8, "h": 8}
    board["panels"].append({"id": 99, "type": "heatmap", "title": "New", "gridPos": grid})
    with pytest.raises(KeyError, match="heatmap"):
        board_payload(board, {}, START, END, STEP, {})


# --------------------------------------------------------------------------------------------------
# The page, in headless Chromium

LAST = 1520.0
"""Every series ends on its largest value, this one (a thousandth of it as a percentage)."""
SHOWN = {
    "short": "1.52 K",
    "none": "1520",
    "percentunit": "152%",
    "s": "25.3 mins",
    "Bps": "1.52 kB/s",
    "ops": "1.52K ops/s",
    "reqps": "1.52K req/s",
}
"""LAST as Grafana's value formats show it in each unit the dashboard uses."""


def _series(panel: dict[str, Any]) -> list[Series]:
    """Two series for a timeseries panel and one for a stat panel, each with a missing sample;
    a percentage is a thousandth of the others."""
    scale = 0.001 if _unit(panel) == "percentunit" else 1.0
    count = 2 if panel["type"] == "timeseries" else 1

    def value(i: int, k: int) -> float | None:
        return None if i == 20 else scale * (LAST if i == 59 else 100.0 * (i % 7 + k))

    def points(k: int) -> list[tuple[float, float | None]]:
        return [(START + STEP * i, value(i, k)) for i in range(60)]

    return [Series(f"{panel['title']} #{k}", points(k)) for k in range(count)]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebDriver, dict[str, Any]]]:
    if browser_missing():
        pytest.skip(browser_missing())
    board = dashboard()
    shown = _shown(board)
    data = {p["id"]: _series(p) for p in shown[:-1]}  # the last panel: Prometheus had nothing for it
    payload = board_payload(board, data, START, END, STEP, {"Group": "ns/<g>"})
    page = tmp_path_factory.mktemp("board") / "board.html"
    write_page(payload, grafana_board(), page)
    with chromium(width=1440) as driver:
        open_drawn(driver, page)
        yield driver, board


def test_the_page_draws_without_a_console_error(drawn: tuple[WebDriver, dict[str, Any]]) -> None:
    driver, _ = drawn
    assert [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")] == []
    assert driver.find_elements(By.CSS_SELECTOR, ".floe-panel-error") == []
    header = driver.find_element(By.TAG_NAME, "header").text
    assert "ns/<g>" in header and "not a screenshot of the Grafana server" in header


def test_every_panel_is_drawn_on_its_grid_with_its_title(drawn: tuple[WebDriver, dict[str, Any]]) -> None:
    driver, board = drawn
    shown = _shown(board)
    elements = driver.find_elements(By.CSS_SELECTOR, ".floe-panel")
    assert [int(e.get_attribute("data-panel-id") or 0) for e in elements] == [p["id"] for p in shown]
    for element, panel in zip(elements, shown, strict=True):
        assert element.find_element(By.TAG_NAME, "h2").text == panel["title"]
    # Panels side by side in the grid share a top; a wider panel is wider on the page.
    tops = {p["id"]: e.rect["y"] for e, p in zip(elements, shown, strict=True)}
    widths = {p["id"]: e.rect["width"] for e, p in zip(elements, shown, strict=True)}
    for a in shown:
        for b in shown:
            assert (tops[a["id"]] == tops[b["id"]]) == (a["gridPos"]["y"] == b["gridPos"]["y"])
            if a["gridPos"]["w"] > b["gridPos"]["w"]:
                assert widths[a["id"]] > widths[b["id"]]
    rows = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".floe-row")]
    assert rows == [p["title"] for p in board["panels"] if p["type"] == "row"]


def test_timeseries_panels_draw_their_lines_and_legends_in_grafanas_units(
    drawn: tuple[WebDriver, dict[str, Any]],
) -> None:
    driver, board = drawn
    shown = _shown(board)
    for panel in shown[:-1]:
        if panel["type"] != "timeseries":
            continue
        element = driver.find_element(By.CSS_SELECTOR, f".floe-panel[data-panel-id='{panel['id']}']")
        canvas = element.find_elements(By.TAG_NAME, "canvas")
        assert canvas, panel["title"]
        # uPlot drew on the canvas: some of its pixels are not transparent.
        painted = driver.execute_script(
            "const c = arguments[0]; const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            "let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n;",
            canvas[0],
        )
        assert painted > 100, panel["title"]
        legend = element.text
        assert f"{panel['title']} #0" in legend and f"{panel['title']} #1" in legend, legend
        unit = _unit(panel)
        assert f"#1 {SHOWN[unit]} {SHOWN[unit]}" in legend, (panel["title"], legend)  # last, max


def test_stat_panels_show_the_last_value_over_a_sparkline(drawn: tuple[WebDriver, dict[str, Any]]) -> None:
    driver, board = drawn
    for panel in board["panels"]:
        if panel["type"] != "stat":
            continue
        element = driver.find_element(By.CSS_SELECTOR, f".floe-panel[data-panel-id='{panel['id']}']")
        unit = _unit(panel)
        assert SHOWN[unit] in element.text.replace("\n", ""), (panel["title"], element.text)
        assert element.find_elements(By.TAG_NAME, "canvas"), f"no sparkline in {panel['title']}"


def test_a_panel_without_series_says_no_data(drawn: tuple[WebDriver, dict[str, Any]]) -> None:
    driver, board = drawn
    last = _shown(board)[-1]
    element = driver.find_element(By.CSS_SELECTOR, f".floe-panel[data-panel-id='{last['id']}']")
    assert "No data" in element.text
    assert element.find_elements(By.TAG_NAME, "canvas") == []
