"""A table of figures built column by column: each header written next to the cell it heads."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from harness.report import Column
from harness.results import Figures

T = TypeVar("T")


def columns_figures(title: str, columns: Sequence[Column[T]], items: Iterable[T]) -> Figures:
    """`Figures` titled ``title``: one row per item, one cell per column."""
    return Figures(
        title=title,
        headers=[header for header, _ in columns],
        rows=[[str(cell(item)) for _, cell in columns] for item in items],
    )
