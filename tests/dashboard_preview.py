"""A picture of the chart's Grafana dashboard for docs/reference/metrics.md, drawn from the
dashboard's own JSON and a real Prometheus' answers to its queries.

Grafana itself cannot run here (it is AGPL-licensed, which this project does not use, and Debian
does not package it), so this draws what it would show: the panels where their ``gridPos`` puts
them on Grafana's 24-column grid, their titles, units, legends and colours (Grafana's dark theme and
classic palette), each ``timeseries`` panel's lines with their legend's last and max values, and
each ``stat`` panel's last value over its sparkline. The page it writes says it was drawn here, so
the picture is never taken for Grafana's own. tests/k8s/test_grafana_dashboard.py photographs it
in headless Chromium when ``FLOE_DASHBOARD_PREVIEW`` names the PNG to write.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from floe.ui.html import escape

WIDTH = 1440
"""The page's width in pixels; the 24 columns share it."""
CELL_H = 30
MARGIN = 8
"""Grafana's grid: a row of a panel's height is 30 px, panels 8 px apart."""
PALETTE = ("#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0", "#37872d")
"""Grafana's classic palette, in its order: series take colours by their place in the panel."""
NAMED_COLOURS = {
    "green": "#73bf69",
    "red": "#f2495c",
    "yellow": "#fade2a",
    "orange": "#ff9830",
    "blue": "#5794f2",
}
TITLE_H = 30
AXIS_W = 56
LEGEND_ROW_H = 18
MAX_LEGEND_ROWS = 6


@dataclass(frozen=True)
class Series:
    """One series of a panel: its legend name and its points (time, value or None for no value)."""

    name: str
    points: Sequence[tuple[float, float | None]]

    def values(self) -> list[float]:
        return [v for _, v in self.points if v is not None]


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


# --------------------------------------------------------------------------------------------------
# Values, in the units Grafana names

_SCALED = {
    "short": (1000.0, ("", " K", " Mil", " Bil", " Tri"), ""),
    "Bps": (1000.0, (" B/s", " kB/s", " MB/s", " GB/s", " TB/s"), ""),
    "ops": (1000.0, ("", " K", " Mil", " Bil", " Tri"), " ops/s"),
    "reqps": (1000.0, ("", " K", " Mil", " Bil", " Tri"), " req/s"),
}


def _digits(value: float) -> str:
    """Three significant figures or fewer, without trailing zeros."""
    if value == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_value(value: float, unit: str) -> str:
    """`value` as Grafana shows it in `unit` (short, none, s, Bps, ops, reqps, percentunit)."""
    if unit == "percentunit":
        return _digits(value * 100) + "%"
    if unit == "s":
        for limit, divisor, suffix in ((1e-3, 1e-6, " µs"), (1.0, 1e-3, " ms"), (60.0, 1.0, " s")):
            if abs(value) < limit:
                return _digits(value / divisor) + suffix
        return _digits(value / 60) + " min" if abs(value) < 3600 else _digits(value / 3600) + " hour"
    if unit in _SCALED:
        base, prefixes, suffix = _SCALED[unit]
        step = 0
        while abs(value) >= base and step < len(prefixes) - 1:
            value /= base
            step += 1
        return _digits(value) + prefixes[step] + suffix
    return _digits(value)


def _nice_step(span: float, ticks: int) -> float:
    """A round step (1, 2 or 5 times a power of ten) that splits `span` in about `ticks` parts."""
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


# --------------------------------------------------------------------------------------------------
# Panels


@dataclass(frozen=True)
class Box:
    """A panel's place on the page, in pixels."""

    left: float
    top: float
    width: float
    height: float

    @staticmethod
    def of(grid: dict[str, int]) -> Box:
        column = (WIDTH - MARGIN) / 24
        return Box(
            left=MARGIN + grid["x"] * column,
            top=grid["y"] * (CELL_H + MARGIN),
            width=grid["w"] * column - MARGIN,
            height=grid["h"] * CELL_H + (grid["h"] - 1) * MARGIN,
        )


def _pieces(points: Sequence[tuple[float, float | None]], gap: float) -> list[list[tuple[float, float]]]:
    """The points in unbroken runs: a run ends where a value is missing or a step is longer than `gap`."""
    pieces: list[list[tuple[float, float]]] = []
    previous: float | None = None
    for t, v in points:
        if v is None:
            previous = None
            continue
        if previous is None or t - previous > gap:
            pieces.append([])
        pieces[-1].append((t, v))
        previous = t
    return pieces


def _path(
    piece: Sequence[tuple[float, float]], x: Callable[[float], float], y: Callable[[float], float]
) -> str:
    """An SVG path's moves through one run of points."""
    return "M" + "L".join(f"{x(t):.1f},{y(v):.1f}" for t, v in piece)


def timeseries_panel(
    panel: dict[str, Any], series: Sequence[Series], start: float, end: float, step: float
) -> str:
    """A timeseries panel: a line (and its fill) per series, y axis in the panel's unit, x axis in
    minutes and seconds, and a legend table with the calcs the panel asks for."""
    box = Box.of(panel["gridPos"])
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    unit = defaults.get("unit", "short")
    fill = defaults.get("custom", {}).get("fillOpacity", 0) / 100
    calcs = [
        c for c in panel.get("options", {}).get("legend", {}).get("calcs", []) if c in ("lastNotNull", "max")
    ]
    shown = list(series[:MAX_LEGEND_ROWS])
    legend_h = LEGEND_ROW_H * (len(shown) + 1 + (len(series) > len(shown)))
    plot = Box(AXIS_W, 8, box.width - AXIS_W - 12, box.height - TITLE_H - legend_h - 40)
    values = [v for s in series for v in s.values()]
    low = float(defaults["min"]) if "min" in defaults else min([0.0, *values])
    high = float(defaults["max"]) if "max" in defaults else max([low, *values])
    tick = _nice_step((high - low) or 1.0, 4)
    high = low + tick * max(1, math.ceil((high - low) / tick - 1e-9))

    def x(t: float) -> float:
        return plot.left + plot.width * (t - start) / ((end - start) or 1.0)

    def y(v: float) -> float:
        return plot.top + plot.height * (1 - (v - low) / ((high - low) or 1.0))

    svg = [f'<svg width="{box.width:.0f}" height="{plot.top + plot.height + 22:.0f}">']
    level = low
    while level <= high + tick / 2:
        svg.append(
            f'<line x1="{plot.left}" x2="{plot.left + plot.width:.1f}" y1="{y(level):.1f}" '
            f'y2="{y(level):.1f}" class="grid"/><text x="{plot.left - 6}" y="{y(level) + 4:.1f}" '
            f'text-anchor="end">{escape(format_value(level, unit))}</text>'
        )
        level += tick
    span = end - start
    minute_step = _nice_step(span / 60, 6) * 60 if span >= 300 else _nice_step(span, 6)
    mark = math.ceil(start / minute_step) * minute_step
    while mark <= end:
        label = f"{int(mark // 3600 % 24):02d}:{int(mark // 60 % 60):02d}:{int(mark % 60):02d}"
        svg.append(
            f'<text x="{x(mark):.1f}" y="{plot.top + plot.height + 16:.1f}" '
            f'text-anchor="middle">{label}</text>'
        )
        mark += minute_step
    base = max(low, 0.0)
    for index, one in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        pieces = _pieces(one.points, 2.5 * step)
        if fill:
            for piece in pieces:
                # Down to the baseline below the run's first and last points, and back.
                area = _path([(piece[0][0], base), *piece, (piece[-1][0], base)], x, y) + "Z"
                svg.append(f'<path d="{area}" fill="{colour}" fill-opacity="{fill}" stroke="none"/>')
        if pieces:
            line = "".join(_path(piece, x, y) for piece in pieces)
            svg.append(f'<path d="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
    svg.append("</svg>")
    legend = ['<table class="legend"><tr><th></th>']
    legend += [f"<th>{'Last *' if c == 'lastNotNull' else 'Max'}</th>" for c in calcs]
    legend.append("</tr>")
    for index, one in enumerate(shown):
        colour = PALETTE[index % len(PALETTE)]
        cells = []
        values = one.values()
        for calc in calcs:
            number = (values[-1] if calc == "lastNotNull" else max(values)) if values else None
            cells.append(f"<td>{escape(format_value(number, unit)) if number is not None else '-'}</td>")
        legend.append(
            f'<tr><td class="name"><span class="swatch" style="background:{colour}"></span>'
            f"{escape(one.name)}</td>" + "".join(cells) + "</tr>"
        )
    if len(series) > len(shown):
        legend.append(f'<tr><td class="name more">and {len(series) - len(shown)} more</td></tr>')
    legend.append("</table>")
    return _panel(box, panel["title"], "".join(svg) + "".join(legend))


def stat_panel(panel: dict[str, Any], series: Sequence[Series], start: float, end: float, step: float) -> str:
    """A stat panel: each series' last value, large, in its threshold's colour, over a sparkline."""
    box = Box.of(panel["gridPos"])
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    unit = defaults.get("unit", "short")
    steps = defaults.get("thresholds", {}).get("steps") or [{"color": "green", "value": None}]
    width, height = box.width - 16, box.height - TITLE_H - 16
    body = []
    for one in series:
        values = one.values()
        if not values:
            body.append('<div class="stat">No data</div>')
            continue
        last = values[-1]
        reached = [s for s in steps if s.get("value") is None or last >= s["value"]]
        colour = NAMED_COLOURS.get(reached[-1]["color"], reached[-1]["color"])
        low, high = min(values), max(values)

        def x(t: float) -> float:
            return width * (t - start) / ((end - start) or 1.0)

        def y(v: float, low: float = low, high: float = high) -> float:
            return height * (1 - 0.6 * (v - low) / ((high - low) or 1.0))

        line = "".join(_path(piece, x, y) for piece in _pieces(one.points, 2.5 * step))
        body.append(
            f'<div class="stat" style="color:{colour}">'
            f'<svg class="spark" width="{width:.0f}" height="{height:.0f}"><path d="{line}" fill="none" '
            f'stroke="{colour}" stroke-opacity="0.5" stroke-width="1.5"/></svg>'
            f"<span>{escape(format_value(last, unit))}</span></div>"
        )
    return _panel(box, panel["title"], "".join(body))


def _panel(box: Box, title: str, body: str) -> str:
    return (
        f'<section class="panel" style="left:{box.left:.1f}px;top:{box.top:.1f}px;'
        f'width:{box.width:.1f}px;height:{box.height:.1f}px"><h2>{escape(title)}</h2>{body}</section>'
    )


def _row(panel: dict[str, Any]) -> str:
    box = Box.of(panel["gridPos"])
    return (
        f'<div class="row" style="left:{box.left:.1f}px;top:{box.top:.1f}px">⌄ {escape(panel["title"])}</div>'
    )


STYLE = """
body { margin: 0; overflow: hidden; background: #111217; color: #ccccdc;
  font: 12px Inter, 'Helvetica Neue', Arial, sans-serif; }
header { height: 48px; display: flex; align-items: center; gap: 18px; padding: 0 12px; }
header h1 { font-size: 16px; font-weight: 500; margin: 0; color: #d8d9da; }
header .var { background: #181b1f; border: 1px solid #2c3235; padding: 4px 8px; }
header .note { margin-left: auto; color: #8e8e8e; }
.panel { position: absolute; box-sizing: border-box; background: #181b1f; border: 1px solid #2c3235;
  border-radius: 2px; overflow: hidden; }
.panel h2 { font-size: 13px; font-weight: 500; margin: 0; padding: 8px; height: 14px; color: #d8d9da; }
.row { position: absolute; font-size: 15px; color: #d8d9da; padding-top: 6px; }
svg text { fill: #8e8e8e; font-size: 11px; }
svg .grid { stroke: #2c3235; }
.legend { margin: 0 8px; border-collapse: collapse; width: calc(100% - 16px); }
.legend th { white-space: nowrap; line-height: 14px; text-align: right; color: #5794f2; font-weight: 500;
  padding: 1px 6px; }
.legend td { line-height: 14px; text-align: right; padding: 2px 6px; height: 14px; white-space: nowrap; }
.legend td.name { text-align: left; width: 100%; max-width: 0; overflow: hidden; text-overflow: ellipsis; }
.legend .more { color: #8e8e8e; }
.swatch { display: inline-block; width: 14px; height: 4px; margin-right: 6px; vertical-align: middle;
  border-radius: 2px; }
.stat { position: relative; height: calc(100% - 30px); display: flex; align-items: center;
  justify-content: center; font-size: 52px; font-weight: 500; }
.stat .spark { position: absolute; left: 8px; bottom: 8px; }
.stat span { position: relative; }
"""

DRAWERS = {"timeseries": timeseries_panel, "stat": stat_panel}


def render(
    board: dict[str, Any],
    data: dict[int, list[Series]],
    start: float,
    end: float,
    step: float,
    variables: dict[str, str],
) -> str:
    """The dashboard as a page: its title and variables on top, its rows and panels on the grid,
    each panel drawn from `data` (its series by panel id) over `start`..`end` (epoch seconds)."""
    parts = []
    bottom = 0.0
    for panel in board["panels"]:
        box = Box.of(panel["gridPos"])
        bottom = max(bottom, box.top + box.height)
        if panel["type"] == "row":
            parts.append(_row(panel))
        else:
            drawer = DRAWERS[panel["type"]]  # a new panel type must be drawn before it is shipped
            parts.append(drawer(panel, data.get(panel["id"], []), start, end, step))
    chosen = "".join(f'<span class="var">{escape(k)}: {escape(v)}</span>' for k, v in variables.items())
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(board['title'])}</title>"
        f"<style>{STYLE}</style></head><body><header><h1>{escape(board['title'])}</h1>{chosen}"
        '<span class="note">Drawn by tests/dashboard_preview.py from charts/floe/dashboards/'
        f"{escape(board['uid'])}.json and Prometheus' answers; not Grafana's own rendering</span></header>"
        f'<main style="position:relative;height:{bottom + MARGIN:.0f}px">'
        f"{''.join(parts)}</main></body></html>"
    )
