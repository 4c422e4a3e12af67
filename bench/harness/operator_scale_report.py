"""The operator benchmark's report: its targets at each table count and shape, and its tables of
figures (`operator_scale.py` measures them)."""

from __future__ import annotations

from typing import Any

from harness.recorded_runs import merged_runs, provenance_note, worst_target
from harness.results import RESULTS_DIR, BenchResult, Figures, new_result
from harness.table_set import SHAPES

RUNS_FILE = RESULTS_DIR / "operator_scale_runs.json"
"""Every recorded run's figures, one entry per table count and shape."""

AFTER_COMMIT_S = 15.0
"""How long after a triggered table's process committed its status changes still count."""
TARGETS = (
    ("operator idle CPU, % of a core", "idle_core_percent", 5.0, "{:.1f}"),
    ("operator idle CPU, ms / table / hour", "idle_ms_per_table_hour", 18.0, "{:.1f}"),
    ("status patches / s, idle", "idle_status_patches_per_s", 20.0, "{:.2f}"),
    ("trigger to first task p95, s", "trigger_to_task_p95_s", 30.0, "{:.1f}"),
    ("status changes per optimizing process, mean", "status_changes_per_process", 2.0, "{:.1f}"),
    ("operator peak RSS, MiB", "peak_rss_mib", 2048.0, "{:.0f}"),
)
"""(what, figure, limit, format): the figure of every run must be at most its limit."""
FIGURES = (
    (
        "Converging, from applying the group and the set",
        (
            ("tables", "tables", "{:,}"),
            ("shape", "shape", "{}"),
            ("all have an OptimizedTable s", "created_s", "{:.0f}"),
            ("all have status s", "status_s", "{:.0f}"),
            ("all IDLE s", "idle_s", "{:.0f}"),
            ("writes per table", "converge_writes_per_table", "{:.1f}"),
            ("status patches per table", "converge_status_patches_per_table", "{:.1f}"),
            ("peak writes / s (5 s window)", "converge_peak_writes_per_s", "{:.0f}"),
            ("RSS MiB then", "rss_after_converging_mib", "{:.0f}"),
        ),
    ),
    (
        "Idle",
        (
            ("tables", "tables", "{:,}"),
            ("shape", "shape", "{}"),
            ("from IDLE + s", "settle_seconds", "{:.0f}"),
            ("for s", "idle_seconds", "{:.0f}"),
            ("operator CPU % of a core", "idle_core_percent", "{:.1f}"),
            ("busiest minute %", "idle_busiest_minute_core_percent", "{:.1f}"),
            ("ms / table / hour", "idle_ms_per_table_hour", "{:.1f}"),
            ("API server CPU %", "idle_apiserver_core_percent", "{:.1f}"),
            ("etcd CPU %", "idle_etcd_core_percent", "{:.1f}"),
            ("writes / s", "idle_writes_per_s", "{:.2f}"),
            ("status patches / s", "idle_status_patches_per_s", "{:.2f}"),
            ("table loads / table / hour", "idle_loads_per_table_hour", "{:.2f}"),
            ("catalog probes / hour", "idle_probes_per_hour", "{:.0f}"),
            ("maintenance runs in the window", "idle_maintenance_runs", "{:.0f}"),
            ("RSS MiB", "idle_rss_mib", "{:.0f}"),
        ),
    ),
    (
        "Triggered",
        (
            ("tables", "tables", "{:,}"),
            ("shape", "shape", "{}"),
            ("triggered", "triggered", "{}"),
            ("trigger to first task p50 s", "trigger_to_task_p50_s", "{:.1f}"),
            ("p95 s", "trigger_to_task_p95_s", "{:.1f}"),
            ("max s", "trigger_to_task_max_s", "{:.1f}"),
            ("status changes per process, mean", "status_changes_per_process", "{:.1f}"),
            ("max", "status_changes_per_process_max", "{}"),
            ("operator peak RSS MiB", "peak_rss_mib", "{:.0f}"),
        ),
    ),
)
"""The tables of figures: (title, columns), each column (header, figure, format)."""


def recorded_runs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs recorded with `runs` in place of those of the same table count and shape: each takes
    its own command (the first hour from convergence is over an hour a run), the record keeps them all."""
    return merged_runs(
        runs,
        RUNS_FILE,
        key=lambda run: (run["tables"], run["shape"]),
        order=lambda run: (run["tables"], SHAPES.index(run["shape"])),
    )


def _at(run: dict[str, Any]) -> str:
    shape = "one OptimizedTable each" if run["shape"] == "tables" else "one set"
    return f"{run['tables']:,} tables, {shape}"


def result(runs: list[dict[str, Any]]) -> BenchResult:
    """The result: converging, idle and triggered, one row per table count and shape, and each target
    against the worst of them."""
    figures = [
        Figures(
            title,
            [header for header, _, _ in columns],
            # A figure a run older than it did not measure is shown as missing.
            [[form.format(r[key]) if key in r else "-" for _, key, form in columns] for r in runs],
        )
        for title, columns in FIGURES
    ]
    targets = [worst_target(runs, what, key, limit, _at, form) for what, key, limit, form in TARGETS]
    triggered = sorted({(r["triggers"], r["trigger_every"]) for r in runs})
    return new_result(
        "operator_scale",
        "The operator at scale",
        "What `floe operator` costs with thousands of tables, from one OptimizedTableSet or one "
        "OptimizedTable per table, run as its own process against a real control plane (kube-apiserver, "
        "etcd, kwok): converging, idle CPU and memory, API writes, and how soon a triggered table gets "
        "its first task.",
        targets=targets,
        figures=figures,
        notes=[
            "Shape set: one OptimizedTableSet selects every table of one SQL catalog (SQLite, one small "
            "file per table); shape tables: one OptimizedTable per table, applied by kubectl as one "
            "list, each naming the catalog's properties. Either way floe's defaults (maintenance on) but "
            "a minor trigger of 2 files; an optimizer with 2 threads runs the tasks on Spark in the "
            "benchmark's process. Idle: the window its table gives, counted from every table IDLE (from "
            "IDLE + 0 for 3,600 s is the first hour from convergence, when every table's first "
            "maintenance jobs come due); the busiest minute: the operator's CPU in the busiest whole "
            "minute of it. Triggered: "
            + "; ".join(f"{n} tables, one commit every {every:g} s" for n, every in triggered)
            + f"; a status change is one status patch the operator sent for the table, from its commit "
            f"until {AFTER_COMMIT_S:.0f} s after its process committed.",
            provenance_note(runs, "table count and shape"),
        ],
    )
