"""The tables and ratios a benchmark's results are written with.

These helpers only format; every benchmark decides its own columns and wording, and
``harness.results`` turns them into the benchmark's record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

Column = tuple[str, Callable[[T], object]]
"""A table column: its header, and its cell for one row's item."""


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table, columns padded so it also reads as plain text."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |"

    separator = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
    return "\n".join([line(cells[0]), separator, *(line(row) for row in cells[1:])])


def columns_table(columns: Sequence[Column[T]], items: Iterable[T]) -> str:
    """`markdown_table` with each header written next to the cell it heads: one row per item."""
    rows = [[cell(item) for _, cell in columns] for item in items]
    return markdown_table([header for header, _ in columns], rows)


def times(numerator: float, denominator: float) -> str:
    """``numerator / denominator`` as ``12.3x``; ``-`` when the denominator is 0."""
    return f"{numerator / denominator:.1f}x" if denominator else "-"
