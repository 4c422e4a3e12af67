"""Charts as inline SVG, drawn on the server: a line per series over the runs of a table, each
run a point with its value in a tooltip. No script draws them, so they need nothing fetched."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from floe.ui.html import Html, Writer, escape, join

WIDTH = 520
HEIGHT = 190
LEFT = 64
"""Room for the y axis' labels."""
RIGHT = 12
TOP = 12
BOTTOM = 36
"""Room for the x axis' labels."""
MAX_LABELS = 5
"""Points the x axis names at most: more would overlap."""
COLOURS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700")


@dataclass(frozen=True)
class Series:
    """One line: its name and a value per point (None: no value there, the line skips it)."""

    name: str
    values: Sequence[float | None]


def line_chart(
    writer: Writer,
    title: str,
    labels: Sequence[str],
    series: Sequence[Series],
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
) -> Html:
    """A figure with one line per series over the points `labels` name (e.g. each run's end),
    the y axis from 0 to the largest value; each point is a circle with its value as a tooltip."""
    values = [v for s in series for v in s.values if v is not None]
    top = max(values, default=0.0) or 1.0
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    count = len(labels)

    def x(i: int) -> float:
        return LEFT + (plot_w / 2 if count == 1 else plot_w * i / (count - 1))

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / top)

    grid = []
    for fraction in (0.0, 0.5, 1.0):
        gy = y(top * fraction)
        grid.append(
            Html(
                f'<line x1="{LEFT}" y1="{gy:.1f}" x2="{WIDTH - RIGHT}" y2="{gy:.1f}" stroke="#e3e6ea"/>'
                f'<text x="{LEFT - 6}" y="{gy + 4:.1f}" text-anchor="end" font-size="11" fill="#4b5563">'
                f"{writer.text(fmt(top * fraction))}</text>"
            )
        )
    step = -(-count // MAX_LABELS)
    for i, label in enumerate(labels):
        if i % step and i != count - 1:
            continue  # every point has its tooltip; the axis names a few
        # The first and last labels hang inside the plot's ends, not past the picture's edges.
        anchor = "start" if i == 0 < count - 1 else "end" if i == count - 1 > 0 else "middle"
        grid.append(
            Html(
                f'<text x="{x(i):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="{anchor}" font-size="10" '
                f'fill="#4b5563">{writer.text(label)}</text>'
            )
        )
    lines = []
    legend = []
    for n, s in enumerate(series):
        colour = COLOURS[n % len(COLOURS)]
        points = [(x(i), y(v), v, labels[i]) for i, v in enumerate(s.values) if v is not None]
        if len(points) > 1:
            path = " ".join(
                f"{'M' if k == 0 else 'L'}{px:.1f},{py:.1f}" for k, (px, py, _, _) in enumerate(points)
            )
            lines.append(
                Html(f'<path class="line" d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
            )
        for px, py, v, label in points:
            tip = writer.text(f"{s.name} at {label}: {fmt(v)}")
            lines.append(
                Html(
                    f'<circle class="point" cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}" '
                    f'data-value="{escape(repr(v))}"><title>{tip}</title></circle>'
                )
            )
        lx = LEFT + n * 130
        legend.append(
            Html(
                f'<rect x="{lx}" y="{HEIGHT - 12}" width="10" height="10" fill="{colour}"/>'
                f'<text x="{lx + 14}" y="{HEIGHT - 3}" font-size="11" fill="#1d2433">'
                f"{writer.text(s.name)}</text>"
            )
        )
    svg = (
        f'<svg class="chart" role="img" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{writer.text(title)}</title>'
        f"{join(grid)}{join(lines)}{join(legend)}</svg>"
    )
    return Html(f"<figure><figcaption>{writer.text(title)}</figcaption>{svg}</figure>")
