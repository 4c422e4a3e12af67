"""`floe run --once` on the examples: four tables converge with rows unchanged; manifests re-read."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession
from rich.console import Console

from floe.api.table import CatalogRef
from floe.cli import main
from floe.local.demo import run_demo
from floe.local.reference_reader import ReferenceReader
from floe.local.run import ManifestWatcher
from floe.tables.catalog import catalog_ref_from_file, load_table, open_catalog
from floe.tables.history import SUMMARY_PROCESS_ID
from floe.tables.run_history_table import read_runs
from floe.tables.scan import scan_table

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CATALOG = "floe_run_example"


def _example(tmp_path: Path, demo_dir: Path, example: str = "run") -> tuple[Path, Path]:
    manifests = tmp_path / "manifests"
    shutil.copytree(EXAMPLES / example, manifests)
    for path in manifests.glob("*.yaml"):
        path.write_text(path.read_text().replace("name: floe_demo", f"name: {CATALOG}"))
    config = tmp_path / "catalog.yaml"
    properties = {
        "type": "sql",
        "uri": f"sqlite:///{demo_dir / 'catalog.db'}",
        "warehouse": (demo_dir / "warehouse").as_uri(),
    }
    config.write_text(yaml.safe_dump({"catalog": {CATALOG: properties}}))
    return manifests, config


@pytest.mark.parametrize("example", ["run", "run-set"])
def test_floe_run_once_converges_with_rows_unchanged(
    tmp_path: Path,
    reference: ReferenceReader,
    spark: SparkSession,
    example: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/run (a manifest per table) and examples/run-set (one OptimizedTableSet for the
    demo's whole namespace) both compact the demo's four tables, and record every run in the
    history table, which `floe history` reads."""
    demo_dir = tmp_path / "demo"
    console = Console(record=True, width=200)
    assert run_demo(demo_dir, cores=2, scale=0.2, console=console, write_only=True, catalog_name=CATALOG) == 0
    manifests, config = _example(tmp_path, demo_dir, example)
    _, loaded = ManifestWatcher(manifests, catalog_ref_from_file(config)).load()
    tables = sorted(t.spec.table for t in loaded)
    assert len(tables) == 4
    before = {t: reference.rows(CATALOG, t) for t in tables}
    catalog = open_catalog(catalog_ref_from_file(config))
    files_before = {t: len(scan_table(load_table(catalog, t)).files.data_files) for t in tables}
    ui_port = _free_port()
    shown = [f"default/{t.metadata.name}" for t in loaded]
    pages = _TablesPage(
        f"http://127.0.0.1:{ui_port}/tables", until=lambda page: all(t in page for t in shown)
    )
    pages.start()

    code = main(
        [
            "run",
            "-f",
            str(manifests),
            "--catalog-config",
            str(config),
            "--once",
            "--refresh-interval",
            "1",
            "--timeout",
            "300",
            "--history-table",
            "floe_history.runs",
            "--ui-port",
            str(ui_port),
        ]
    )

    assert code == 0
    # While it ran, its web UI listed every table it watched.
    pages.stop()
    assert pages.last is not None and all(t in pages.last for t in shown), pages.last
    for t in tables:
        assert reference.rows(CATALOG, t) == before[t], t
        after = scan_table(load_table(catalog, t)).files
        assert len(after.data_files) < files_before[t] and after.delete_files == (), t

    # Every run went to the history table: each table's commits, with the snapshots they made.
    history = load_table(catalog, "floe_history.runs")
    for table in loaded:
        runs = read_runs(history, f"default/{table.metadata.name}")
        committed = {
            r.snapshot_id for r in runs if r.outcome == "committed" and r.kind in ("minor", "major", "full")
        }
        made = {
            s.snapshot_id
            for s in load_table(catalog, table.spec.table).snapshots()
            if s.summary is not None and s.summary.get(SUMMARY_PROCESS_ID)
        }
        assert committed and committed <= made, table.metadata.name
    name = loaded[0].metadata.name
    assert (
        main(["history", name, "--history-table", "floe_history.runs", "--catalog-config", str(config)]) == 0
    )
    assert f"default/{name}: " in capsys.readouterr().out
    assert (
        main(["history", "nosuch", "--history-table", "floe_history.runs", "--catalog-config", str(config)])
        == 2
    )
    assert "no run of 'default/nosuch' in floe_history.runs" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _TablesPage(threading.Thread):
    """Reads a page again and again until it shows what `until` looks for (or is stopped)."""

    def __init__(self, url: str, until: Callable[[str], bool]) -> None:
        super().__init__(daemon=True)
        self.url, self.until = url, until
        self.last: str | None = None
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    self.last = response.read().decode()
                if self.until(self.last):
                    return
            except (urllib.error.URLError, ConnectionError):
                pass  # not serving yet
            self._stopped.wait(0.5)

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=10)


def test_manifest_watcher_sees_edits_and_fills_in_the_catalog(tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    shutil.copytree(EXAMPLES / "run", manifests)
    catalog = CatalogRef(name="floe_demo", properties={"type": "sql", "uri": "sqlite:///x.db"})
    watcher = ManifestWatcher(manifests, catalog)
    assert watcher.changed()
    groups, tables = watcher.load()
    assert {g.metadata.name for g in groups} == {"streaming", "batch"}
    assert all(t.spec.catalog.properties["uri"] == "sqlite:///x.db" for t in tables)
    assert not watcher.changed()

    path = manifests / "tables.yaml"
    path.write_text(path.read_text().replace("quota: 0.5", "quota: 3", 1))
    os.utime(path, (time.time() + 5, time.time() + 5))  # a new mtime even on coarse clocks
    assert watcher.changed()
    _, tables = watcher.load()
    assert next(t for t in tables if t.metadata.name == "clicks").spec.quota == 3
