"""``floe explain``: why a table is, or is not, being optimized.

It tells what the table waits for and its place in its group's queue (from the OptimizedTable's
status, which the operator keeps current), its health score, the settings in force and where
each came from, and, with the table's catalog, each partition's triggers against their
thresholds and the decision they make. With ``-f`` it explains a table of ``floe run``'s
manifests without a cluster (no queue: nothing runs).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyiceberg.partitioning import PartitionSpec
from rich.console import Group, RenderableType
from rich.table import Table as RichTable
from rich.text import Text

from floe.api.meta import rfc3339
from floe.api.table import SET_OWN_FIELDS, OptimizedTableSpec
from floe.cli.console import REDACT, console
from floe.cli.errors import UnknownTable, UsageError
from floe.planning.plan import PartitionEvaluation
from floe.planning.triggers import PartitionTriggers, Trigger

DEFAULT_PARTITIONS = 20
"""Partitions shown unless ``--partitions`` says otherwise: those closest to firing."""


@dataclass(frozen=True)
class TableFacts:
    """What `floe explain` shows of a table, wherever it was read from."""

    name: str
    spec: OptimizedTableSpec
    sources: Mapping[str, str]
    state: str | None = None
    waiting: Mapping[str, Any] | None = None
    health: Mapping[str, Any] | None = None
    refresh: Mapping[str, Any] | None = None


def add_explain_parser(sub: argparse._SubParsersAction[Any]) -> None:
    """The ``explain`` subcommand."""
    explain = sub.add_parser(
        "explain",
        help="why a table is or is not optimized: what it waits for, each trigger against its "
        "threshold, the settings in force",
    )
    explain.add_argument("table", help="the OptimizedTable's name")
    explain.add_argument("-n", "--namespace", help="its namespace (default: the kubeconfig context's)")
    explain.add_argument(
        "-f", "--file", help="explain a table of these manifests (file or directory), as floe run runs it"
    )
    explain.add_argument(
        "--catalog-config",
        help="catalog properties: read the table's files for each partition's triggers (with -f: for "
        "tables whose manifest gives none)",
    )
    explain.add_argument(
        "--partitions",
        type=int,
        default=DEFAULT_PARTITIONS,
        metavar="N",
        help=f"show the N partitions closest to firing (default {DEFAULT_PARTITIONS})",
    )
    explain.set_defaults(handler=_explain)


def _explain(args: argparse.Namespace) -> int:
    if args.partitions <= 0:
        raise UsageError(f"--partitions must be positive, not {args.partitions}")
    facts = _from_manifests(args) if args.file else _from_cluster(args)
    parts: list[RenderableType] = [_summary(facts)]
    catalog = facts.spec.catalog
    if args.file or args.catalog_config:
        if args.catalog_config and not catalog.properties:
            from floe.tables.catalog import catalog_ref_from_file

            catalog = catalog_ref_from_file(Path(args.catalog_config))
        REDACT.add(catalog.properties, catalog.secret_properties)
        parts.append(_partitions(facts.spec.model_copy(update={"catalog": catalog}), args.partitions))
    else:
        parts.append(Text("partitions: pass --catalog-config to read each partition's triggers", style="dim"))
    parts.append(_settings(facts))
    console(stderr=False).print(Group(*parts))
    return 0


def _from_cluster(args: argparse.Namespace) -> TableFacts:
    from floe.cli.history import read_optimized_table

    namespace, resource = read_optimized_table(args.table, args.namespace)
    spec, status = resource.get("spec") or {}, resource.get("status") or {}
    identity = {k: spec[k] for k in SET_OWN_FIELDS if k in spec}
    effective = OptimizedTableSpec.model_validate({**(status.get("effectiveSpec") or spec), **identity})
    return TableFacts(
        name=f"{namespace}/{args.table}",
        spec=effective,
        sources=status.get("specSources") or {},
        state=status.get("state"),
        waiting=status.get("waiting"),
        health=status.get("health"),
        refresh=status.get("refresh"),
    )


def _from_manifests(args: argparse.Namespace) -> TableFacts:
    from floe.local.run import ManifestWatcher
    from floe.tables.catalog import catalog_ref_from_file

    path = Path(args.file)
    if not path.exists():
        raise UsageError(f"-f {args.file}: no such file or directory")
    fallback = catalog_ref_from_file(Path(args.catalog_config)) if args.catalog_config else None
    watcher = ManifestWatcher(path, fallback)
    _, tables = watcher.load()
    found = [
        t
        for t in tables
        if t.metadata.name == args.table
        and (args.namespace is None or t.metadata.namespace == args.namespace)
    ]
    if not found:
        raise UnknownTable(f"no OptimizedTable {args.table!r} in {args.file}")
    table = found[0]
    key = (table.metadata.namespace, table.metadata.name)
    return TableFacts(f"{key[0]}/{key[1]}", table.spec, watcher.sources.get(key, {}))


def _summary(facts: TableFacts) -> RenderableType:
    spec = facts.spec
    out = RichTable.grid(padding=(0, 2))
    out.add_column(style="bold")
    out.add_column()
    policy = spec.optimizing.policy
    favor = f", favor {spec.optimizing.favor}" if policy == "floe" else ""
    out.add_row(facts.name, f"table {spec.table}, group {spec.group}, policy {policy}{favor}")
    if facts.state:
        out.add_row("state", facts.state)
    if facts.waiting:
        reason, message = facts.waiting.get("reason", ""), facts.waiting.get("message", "")
        out.add_row("waiting", f"{reason}: {REDACT(message)}")
    elif facts.state is None:
        out.add_row("waiting", "not known without a running floe (floe run shows its queue)")
    if facts.health:
        h = facts.health
        out.add_row(
            "health",
            f"{h.get('score')}/100 (points lost to: small files {h.get('smallFiles', 0):.2f} x 40, "
            f"equality deletes {h.get('equalityDeletes', 0):.2f} x 40, "
            f"position deletes {h.get('positionDeletes', 0):.2f} x 20)",
        )
    refresh = spec.refresh
    lowest = (
        f"{refresh.min_interval:g}s"
        if refresh.min_interval is not None
        else "the operator's --refresh-interval"
    )
    now = f", {facts.refresh['intervalSeconds']}s now" if facts.refresh else ""
    out.add_row(
        "checked",
        f"every {lowest} with work queued; where the catalog is asked table by table (REST, Glue, Hive), "
        "again when its writers' next commit is due (by its snapshot log), and twice as long after each "
        "unchanged check past "
        f"that, up to {refresh.max_interval:g}s{now}",
    )
    return out


def _partitions(spec: OptimizedTableSpec, limit: int) -> RenderableType:
    from floe.planning.health import table_health
    from floe.planning.table_evaluation import evaluate_table
    from floe.planning.triggers import table_triggers
    from floe.tables.catalog import load_table, open_catalog
    from floe.tables.history import optimizing_history
    from floe.tables.scan import scan_table

    table = load_table(open_catalog(spec.catalog), spec.table)
    config = spec.optimizing_config(table.metadata.properties)
    files = scan_table(table).files
    history = optimizing_history(table.metadata)
    now = time.time()
    triggers = table_triggers(files, config, now, history.last_minor_s, history.last_full_s)
    decisions = evaluate_table(files, config, now, history.last_minor_s, history.last_full_s)
    health = table_health(files, config)
    ranked = sorted(zip(triggers, decisions, strict=True), key=lambda pair: -_closeness(pair[0]))
    specs = table.metadata.specs()
    out = RichTable(
        title=f"partitions of snapshot {files.snapshot_id}: {len(triggers)}; health of its files "
        f"{health.score}/100{f' (most points lost to {health.worst()})' if health.worst() else ''}; "
        "each trigger's value / threshold",
        title_justify="left",
        box=None,
        header_style="bold",
    )
    for column in ("partition", "trigger", "value / threshold", "fires"):
        out.add_column(column, overflow="fold")
    for partition, decision in ranked[:limit]:
        out.add_section()
        out.add_row(
            partition.partition.describe(_field_names(specs, partition.partition.spec_id)),
            f"{partition.fragments} fragments, {partition.undersized_segments} undersized, "
            f"{partition.segments} segments, {partition.delete_files} delete files",
            "",
            _decision(decision),
        )
        for trigger in partition.triggers:
            out.add_row("", trigger.name, _value(trigger), _fires(trigger))
    if len(ranked) > limit:
        out.add_section()
        out.add_row(f"and {len(ranked) - limit} more partitions, none closer to firing", "", "", "")
    return out


def _field_names(specs: Mapping[int, PartitionSpec], spec_id: int) -> tuple[str, ...]:
    spec = specs.get(spec_id)
    return tuple(f.name for f in spec.fields) if spec is not None else ()


def _settings(facts: TableFacts) -> RenderableType:
    settings = facts.spec.model_dump(
        mode="json", by_alias=True, exclude=set(SET_OWN_FIELDS), exclude_none=True
    )
    out = RichTable(title="settings in force", title_justify="left", box=None, header_style="bold")
    out.add_column("setting")
    out.add_column("value", overflow="fold")
    out.add_column("from")
    for path, value in _flatten(settings):
        out.add_row(path, REDACT(str(value)), facts.sources.get(path, "floe's default"))
    return out


def _flatten(values: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.extend(_flatten(value, f"{path}."))
        else:
            out.append((path, value))
    return out


def _closeness(partition: PartitionTriggers) -> float:
    """How close the partition is to optimizing: infinite when a trigger fired, else its nearest
    trigger's value over threshold."""
    if any(t.fired for t in partition.triggers):
        return math.inf
    return max(((t.value or 0.0) / t.threshold for t in partition.triggers if t.threshold), default=0.0)


def _decision(evaluation: PartitionEvaluation) -> str:
    if evaluation.optimizing_type is None:
        return f"nothing due: {evaluation.reason}"
    return f"{evaluation.optimizing_type.label}: {evaluation.reason}"


def _value(trigger: Trigger) -> str:
    if trigger.threshold is None:
        return "off"
    return f"{_amount(trigger.value, trigger.unit)} / {_amount(trigger.threshold, trigger.unit)}"


def _amount(value: float | None, unit: str) -> str:
    from floe.local.report import human_bytes

    if value is None:
        return "never"
    if unit == "bytes":
        return human_bytes(int(value))
    if unit == "s":
        return _duration(value)
    if unit == "x rows":
        return f"{value:.3g} x rows"
    return f"{value:g} {unit}".strip()


def _duration(seconds: float) -> str:
    for size, name in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds / size:.1f}{name}"
    return f"{seconds:.0f}s"


def _fires(trigger: Trigger) -> str:
    if trigger.fired:
        return "fires"
    if trigger.next_s is not None:
        return f"at {rfc3339(trigger.next_s)}"
    return "no"
