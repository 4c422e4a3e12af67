"""The table of Prometheus metrics on the metrics reference page, from `floe.service.metrics`.

Every metric floe serves is made in `ServiceMetrics` (counters and a histogram) or its scrape-time
collector (gauges). This module builds one, gives its collector one group and one table to
report, and lists each metric family it then exposes: name, type, labels, help and the series a
scrape shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ref_text import code, prose, table

MARKER = "<!-- metrics-table -->"


@dataclass(frozen=True)
class Metric:
    """One metric family as a scrape of ``/metrics`` shows it."""

    name: str
    type: str
    labels: tuple[str, ...]
    help: str
    series: tuple[str, ...]


@dataclass(frozen=True)
class _Table:
    """A table as the per-table gauges read it (`floe.service.metrics.TableGauges`)."""

    group_key: str = "g"
    table_id: str = "ns/t"
    occupation: float = 0.0
    running_tasks: int = 0
    queued_tasks: int = 0
    state: str = "IDLE"
    health: int | None = 100


def metrics() -> list[Metric]:
    """Every metric family floe's task service exposes, in the order a scrape lists them."""
    from floe.controller.scaling import ScaleSample
    from floe.scheduling.records import GroupSchedulingStats
    from floe.service.metrics import ServiceMetrics
    from floe.tables.request_budget import BudgetStats

    service = ServiceMetrics()
    stats = GroupSchedulingStats(1, 1, 0, 0, 0, 0, 0.0)
    service.watch_groups(lambda: [("g", stats, 1)])
    service.watch_tables(lambda: [_Table()])
    service.watch_scaling(lambda: [ScaleSample("g", 1, 1, 0, 0.0, 0.0)])
    service.watch_catalogs(lambda: {"lake": BudgetStats(0, 0, 0, 0, 0, 0.0)})
    for value in vars(service).values():
        names: Any = getattr(value, "_labelnames", None)
        if names:  # a labelled counter or histogram has no series until a label set is used
            value.labels(*["x"] * len(names))
    out = []
    for family in service.registry.collect():
        labels: list[str] = []
        series: list[str] = []
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            if sample.name not in series:
                series.append(sample.name)
            labels += [label for label in sample.labels if label not in labels and label != "le"]
        out.append(Metric(family.name, family.type, tuple(labels), family.documentation, tuple(series)))
    return out


def render_table() -> str:
    """The Markdown table of every metric."""
    rows = [
        (
            ", ".join(code(name) for name in metric.series),
            metric.type,
            ", ".join(code(label) for label in metric.labels) or "none",
            prose(metric.help),
        )
        for metric in metrics()
    ]
    return table(("Metric", "Type", "Labels", "Meaning"), rows)
