"""The benchmarks' line plots: a PNG per metric, a line per side, where the docs' results page embeds them."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from harness.cli import BENCH_DIR

REPO = BENCH_DIR.parent
PLOTS_DIR = REPO / "docs" / "benchmarks" / "plots"
"""Where the plots go by default: the docs' results page embeds them from there."""

REFERENCE_STYLE: Mapping[str, Any] = {"color": "tab:red", "linestyle": "--"}
"""The line of what floe is compared with (no floe, floe before a change)."""
FLOE_STYLE: Mapping[str, Any] = {"color": "tab:blue", "linestyle": "-"}
"""The line of floe as this checkout has it."""


@dataclass(frozen=True)
class Line:
    """One side's values of a metric, and how its line is drawn."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    style: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Panel:
    """One chart of a plot: its lines, a title when the plot has several, a target line when given."""

    lines: Sequence[Line]
    title: str = ""
    target: float | None = None


def add_plots_argument(parser: argparse.ArgumentParser) -> None:
    """``--plots DIR``, by default the docs' plot directory."""
    shown = PLOTS_DIR.relative_to(REPO)
    parser.add_argument(
        "--plots",
        type=Path,
        default=PLOTS_DIR,
        help=f"where the PNGs go (default: {shown}, which the docs embed)",
    )


def save_plot(path: Path, title: str, xlabel: str, ylabel: str, panels: Sequence[Panel]) -> Path:
    """Draw ``panels`` side by side into the PNG ``path`` (its directory made if need be); return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # The object-oriented API needs no pyplot and no display: savefig renders with Agg.
    figure = Figure(figsize=(max(5 * len(panels), 7), 4))
    axes = figure.subplots(1, len(panels), squeeze=False)
    for axis, panel in zip(axes[0], panels, strict=True):
        for line in panel.lines:
            axis.plot(line.x, line.y, marker="o", markersize=3, label=line.label, **line.style)
        if panel.target is not None:
            axis.axhline(panel.target, color="grey", linestyle=":", label="target")
        axis.set_title(panel.title)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return path


def shown_path(path: Path) -> str:
    """``path`` relative to the repository when it is inside it, as a results note names a plot."""
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(resolved)


@dataclass(frozen=True)
class FrontierPoint:
    """One policy on a write-against-read plot: its mean read amplification, write amplification,
    and p95 read amplification (drawn as a bar to the right)."""

    label: str
    read_mean: float
    write: float
    read_p95: float
    reference: bool = False


def save_frontier(path: Path, title: str, points: Sequence[FrontierPoint]) -> Path:
    """Draw ``points`` (the reference in the reference style, floe's joined in order) into the PNG
    ``path``; return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure = Figure(figsize=(7, 6))
    axis = figure.subplots()
    floe = sorted((p for p in points if not p.reference), key=lambda p: p.read_mean)
    if floe:
        axis.plot([p.read_mean for p in floe], [p.write for p in floe], color=FLOE_STYLE["color"], alpha=0.4)
    floe_markers = iter("o^vDPX*")
    for p in points:
        color = (REFERENCE_STYLE if p.reference else FLOE_STYLE)["color"]
        # A legend, not labels at the points: floe's settings often land on (nearly) the same spot.
        axis.errorbar(
            [p.read_mean],
            [p.write],
            xerr=[[0.0], [max(0.0, p.read_p95 - p.read_mean)]],
            fmt="s" if p.reference else next(floe_markers, "o"),
            color=color,
            alpha=0.8,
            capsize=3,
            label=f"{p.label}: WA {p.write:.2f}, reads {p.read_mean:.2f} (p95 {p.read_p95:.2f})",
        )
    # Below the axes: inside, it hides points wherever they fall.
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize="small", ncol=2)
    axis.set_xlabel("read amplification: mean, bar to p95 (full read / compacted rows' read)")
    axis.set_ylabel("write amplification (bytes written / bytes ingested)")
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return path
