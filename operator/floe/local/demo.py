"""``floe demo``: stream into three local tables, optimize them, and show what changed.

Everything is real: a SQLite-backed Iceberg catalog, pyiceberg writers, Spark through
Iceberg's Java runtime for merge-on-read deletes and as the independent reader that
checks the rows, and floe's own engine (plan, rewrite on local Spark, commit).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from floe.api.manifests import load_manifests
from floe.api.models import API_VERSION, OptimizedTable
from floe.local.optimize import optimize_once
from floe.local.reference_reader import ReferenceReader, qualified_name
from floe.local.report import human_bytes
from floe.local.workload import AccountsTable, ClickStream, OrderCdcStream
from floe.tables.catalog import load_table, open_catalog
from floe.tables.scan import scan_table

CATALOG_NAME = "floe_demo"
MARKER = ".floe-demo"


@dataclass(frozen=True)
class TableStats:
    """What a reader of the table pays for, at one snapshot."""

    snapshot_id: int | None
    data_files: int
    delete_files: int
    total_bytes: int
    scan_seconds: float


def _prepare_dir(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()) and not (directory / MARKER).exists():
        raise SystemExit(f"{directory} exists and is not a floe demo directory; pass another --dir")
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    (directory / MARKER).write_text("created by floe demo; removed and recreated by the next run\n")


def _write_manifests(directory: Path, catalog_name: str, catalog_props: dict[str, str]) -> Path:
    """The OptimizedTable manifests a user would kubectl apply, for the demo tables."""
    documents = [
        {
            "apiVersion": API_VERSION,
            "kind": "OptimizedTable",
            "metadata": {"name": name},
            "spec": {
                "table": f"demo.{name}",
                "catalog": {"name": catalog_name, "properties": catalog_props},
                "group": "default",
                "quota": quota,
                "targetSize": "32Mi",
            },
        }
        for name, quota in (("clicks", 0.5), ("orders", 1), ("accounts", 0.5), ("pageviews", 2))
    ]
    path = directory / "tables.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def _stats(table: Table, reader: ReferenceReader, catalog_name: str, identifier: str) -> TableStats:
    table.refresh()
    files = scan_table(table).files
    started = time.monotonic()
    # hash(*) forces every column of every live row to be read and deletes applied.
    reader.sql(f"SELECT count(*), sum(hash(*)) FROM {qualified_name(catalog_name, identifier)}")
    scan_seconds = time.monotonic() - started
    return TableStats(
        snapshot_id=files.snapshot_id,
        data_files=len(files.data_files),
        delete_files=len(files.delete_files),
        total_bytes=sum(f.size_bytes for f in (*files.data_files, *files.delete_files)),
        scan_seconds=scan_seconds,
    )


def _stream(catalog: SqlCatalog, reader: ReferenceReader, scale: float, progress: Progress) -> None:
    batches = max(4, int(30 * scale))
    clicks = ClickStream(catalog, "demo.clicks")
    orders = OrderCdcStream(catalog, "demo.orders")
    accounts = AccountsTable(catalog, "demo.accounts")
    pageviews = ClickStream(catalog, "demo.pageviews", seed=4, partition_spec=PartitionSpec())
    bar = progress.add_task("streaming micro-batches", total=batches * 4)
    for _ in range(batches):
        clicks.append_batch(2000)
        progress.advance(bar)
        pageviews.append_batch(500)
        progress.advance(bar)
        orders.upsert_batch(inserts=1000, updates=250)
        progress.advance(bar)
        accounts.append_batch(1500)
        progress.advance(bar)
    accounts_name = qualified_name(catalog.name, "demo.accounts")
    statements = [
        f"DELETE FROM {accounts_name} WHERE account_id % 29 = 3",
        f"UPDATE {accounts_name} SET balance = balance + 1 WHERE account_id % 31 = 7",
        f"DELETE FROM {accounts_name} WHERE account_id % 37 = 11",
    ]
    bar = progress.add_task("merge-on-read DELETE/UPDATE via Spark", total=len(statements))
    for statement in statements:
        reader.sql(statement)
        progress.advance(bar)


def run_demo(
    directory: Path,
    cores: int,
    scale: float,
    console: Console,
    write_only: bool = False,
    catalog_name: str = CATALOG_NAME,
) -> int:
    """Run the demo in `directory`; returns 0 when every table's rows are unchanged.

    With `write_only` the tables are written and left unoptimized (for `floe run`).
    """
    directory = directory.resolve()
    _prepare_dir(directory)
    warehouse = directory / "warehouse"
    warehouse.mkdir()
    catalog_props = {
        "type": "sql",
        "uri": f"sqlite:///{directory / 'catalog.db'}",
        "warehouse": warehouse.as_uri(),
    }
    manifests = [
        r
        for r in load_manifests(_write_manifests(directory, catalog_name, catalog_props))
        if isinstance(r, OptimizedTable)
    ]
    console.print(f"[bold]floe demo[/bold] in {directory}: catalog {catalog_name!r}, {len(manifests)} tables")

    reader = ReferenceReader.start(master=f"local[{cores}]")
    catalog = SqlCatalog(catalog_name, **catalog_props)
    catalog.create_namespace("demo")
    reader.register_sql_catalog(catalog_name, directory / "catalog.db", warehouse.as_uri())

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        _stream(catalog, reader, scale, progress)
    if write_only:
        console.print(f"tables written, not optimized; manifests in {directory / 'tables.yaml'}")
        return 0

    report = RichTable(title="before → after optimizing")
    for column in ("table", "type", "data files", "delete files", "bytes", "scan time", "rows", "check"):
        report.add_column(column, justify="left" if column in ("table", "type", "check") else "right")
    all_equal = True
    with Progress(*columns, console=console) as progress:
        for resource in manifests:
            spec = resource.spec
            table = load_table(open_catalog(spec.catalog), spec.table)
            before = _stats(table, reader, catalog_name, spec.table)
            rows_before = reader.rows(catalog_name, spec.table, before.snapshot_id)
            bar = progress.add_task(f"optimizing {spec.table}", total=None)
            result = optimize_once(
                table,
                spec.table,
                spec.optimizing_config(),
                spark=lambda: reader.spark,
                num_retries=spec.execute.num_retries,
                allow_partial_commit=spec.allow_partial_commit,
                on_plan=lambda plan, bar=bar: progress.update(bar, total=len(plan.tasks)),  # type: ignore[misc]
                on_task_done=lambda _o, bar=bar: progress.advance(bar),  # type: ignore[misc]
            )
            after = _stats(table, reader, catalog_name, spec.table)
            rows_after = reader.rows(catalog_name, spec.table)
            equal = rows_before == rows_after
            all_equal &= equal
            kind = result.plan.optimizing_type.label if result.plan.optimizing_type else "none"
            report.add_row(
                spec.table,
                kind,
                f"{before.data_files} → {after.data_files}",
                f"{before.delete_files} → {after.delete_files}",
                f"{human_bytes(before.total_bytes)} → {human_bytes(after.total_bytes)}",
                f"{before.scan_seconds:.2f}s → {after.scan_seconds:.2f}s",
                f"{sum(rows_after.values()):,}",
                "[green]rows unchanged[/green]" if equal else "[red]ROWS DIFFER[/red]",
            )
    console.print(report)
    manifests_path = directory / "tables.yaml"
    console.print(f"catalog and warehouse are in {directory}; the tables' manifests in {manifests_path}")
    return 0 if all_equal else 1
