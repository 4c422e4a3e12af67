"""The web UI in a real browser: Debian's headless Chromium, driven by Selenium, over a real floe
that committed three optimizing processes (`ui_stack`). Every page loads with its rows, the charts
draw the runs, the links, sorting and filters work, no secret shows and the console stays clean."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait
from ui_stack import BUSY_TABLE, SECRET, ServedFloe, browser_missing, chromium, served_floe

pytestmark = pytest.mark.skipif(bool(browser_missing()), reason=browser_missing())


@pytest.fixture(scope="module")
def floe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedFloe]:
    with served_floe(Path(tmp_path_factory.mktemp("ui"))) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


def _table_ids(driver: WebDriver) -> list[str]:
    return [a.text for a in driver.find_elements(By.CSS_SELECTOR, "table.tables tbody tr td:first-child a")]


def _load(driver: WebDriver, action: Callable[[], object]) -> None:
    """Do what navigates (a click, a submit, back), and wait until the page it left is gone."""
    page = driver.find_element(By.TAG_NAME, "html")
    action()
    WebDriverWait(driver, 10).until(expected_conditions.staleness_of(page))


def _click(driver: WebDriver, element: WebElement) -> None:
    _load(driver, element.click)


def _console_errors(driver: WebDriver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_groups_link_to_their_tables_and_a_table_page_and_back(floe: ServedFloe, browser: WebDriver) -> None:
    browser.get(floe.url + "/")
    groups = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "table.groups tbody td:first-child a")]
    assert groups == ["analytics/backfill", "analytics/batch"]
    _click(browser, browser.find_element(By.LINK_TEXT, "analytics/batch"))
    assert "group=analytics%2Fbatch" in browser.current_url
    assert sorted(_table_ids(browser)) == ["analytics/events", "analytics/orders"]
    _click(browser, browser.find_element(By.LINK_TEXT, BUSY_TABLE))
    assert browser.current_url.endswith("/tables/analytics/events")
    assert browser.find_element(By.TAG_NAME, "h1").text == BUSY_TABLE
    _load(browser, browser.back)
    assert sorted(_table_ids(browser)) == ["analytics/events", "analytics/orders"]
    assert _console_errors(browser) == []


def test_a_table_page_charts_its_three_runs(floe: ServedFloe, browser: WebDriver) -> None:
    browser.get(f"{floe.url}/tables/{BUSY_TABLE}")
    charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(charts) == 4
    for chart, series in zip(charts, (2, 2, 1, 1), strict=True):
        points = chart.find_elements(By.CSS_SELECTOR, "circle.point")
        assert len(points) == 3 * series, chart.get_attribute("outerHTML")
        for point in points:
            assert point.is_displayed()
            assert float(point.get_attribute("cx") or "nan") > 0
            assert float(point.get_attribute("cy") or "nan") >= 0
        lines = chart.find_elements(By.CSS_SELECTOR, "path.line")
        assert len(lines) == series
        assert len(re.findall(r"[ML][\d.]+,[\d.]+", lines[0].get_attribute("d") or "")) == 3
    # Files in: each cycle's fragments (12, 18, 24) plus the file the cycle before compacted to.
    files_in = [p.get_attribute("data-value") for p in charts[0].find_elements(By.CSS_SELECTOR, "circle")]
    assert files_in[:3] == ["12", "19", "25"]
    runs = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "table.runs tbody tr")]
    assert sum(" minor committed " in row for row in runs) == 3, runs
    assert "floe explain events -n analytics" in browser.page_source
    assert _console_errors(browser) == []


def test_sorting_and_filtering_change_the_rows(floe: ServedFloe, browser: WebDriver) -> None:
    browser.get(floe.url + "/tables?sort=name")
    ascending = _table_ids(browser)
    assert ascending == sorted(ascending) and len(ascending) == 4
    _click(browser, browser.find_element(By.CSS_SELECTOR, "th a.sort[href*='sort=name']"))
    assert _table_ids(browser) == list(reversed(ascending))
    Select(browser.find_element(By.NAME, "state")).select_by_value("PENDING")
    _click(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    assert "state=PENDING" in browser.current_url
    assert sorted(_table_ids(browser)) == ["analytics/audit", "analytics/clicks"]
    search = browser.find_element(By.NAME, "name")
    search.send_keys("aud")
    _load(browser, search.submit)
    assert _table_ids(browser) == ["analytics/audit"]
    assert _console_errors(browser) == []


def test_the_queue_shows_the_waiting_tables_in_order(floe: ServedFloe, browser: WebDriver) -> None:
    browser.get(floe.url + "/queue")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.queue tbody tr")
    assert [row.find_element(By.TAG_NAME, "td").text for row in rows] == ["1", "2"]
    assert all("NoExecutors" in row.text for row in rows)
    _click(browser, browser.find_element(By.LINK_TEXT, rows[0].find_elements(By.TAG_NAME, "a")[0].text))
    assert "/tables/analytics/" in browser.current_url
    assert "NoExecutors" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    assert _console_errors(browser) == []


def test_no_page_shows_the_catalogs_secret(floe: ServedFloe, browser: WebDriver) -> None:
    for path in ("/", "/tables", "/queue", f"/tables/{BUSY_TABLE}", "/tables/analytics/orders"):
        browser.get(floe.url + path)
        assert SECRET not in browser.page_source, path
    assert "commit failed: s3.secret-access-key=***" in browser.page_source
    assert "<img src=x>" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text  # shown as text
    assert not browser.find_elements(By.CSS_SELECTOR, "dl.facts img")
    assert _console_errors(browser) == []
