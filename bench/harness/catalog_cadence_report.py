"""The catalog cadence benchmark's report: its targets per refresh mode and its table of runs
(`catalog_cadence.py` measures them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.recorded_runs import merged_runs, provenance_note, worst_target
from harness.results import RESULTS_DIR, BenchResult, Figures, new_result
from harness.table_catalogs import CATALOGS

RUNS_FILE = RESULTS_DIR / "catalog_cadence_runs.json"
"""Every recorded run's figures, one entry per catalog, table count and refresh mode."""
MODES = ("fixed", "adaptive", "notices", "throttled")
"""The refresh modes measured, in the order the record lists them."""

WRITTEN_BEFORE = 4
"""How many minutes the benchmark's writers have committed for when floe starts."""

TARGETS = (
    ("CPU ms / table / hour", "cpu_ms_per_table_hour", 18.0, ("adaptive",)),
    ("catalog requests / s, steady state", "steady_requests_per_s", 20.0, ("adaptive",)),
    ("commit-to-check p95 s", "seen_p95_s", 30.0, ("adaptive",)),
    ("commit-to-check p95 s", "seen_p95_s", 5.0, ("notices",)),
    ("writes never seen, with 429s above its rate", "unseen_writes", 0.0, ("throttled",)),
)
"""What, the key of `measure`'s result, at most this, for which modes."""


COLUMNS = (
    ("requests / s", "catalog_requests_per_s", ".1f"),
    ("steady requests / s", "steady_requests_per_s", ".1f"),
    ("CPU ms / table / hour", "cpu_ms_per_table_hour", ".1f"),
    ("commit-to-check p50 s", "seen_p50_s", ".1f"),
    ("commit-to-check p95 s", "seen_p95_s", ".1f"),
    ("writes (unseen)", "writes", "d"),
    ("median interval s", "median_interval_s", ".0f"),
    ("429s answered", "catalog_429s", "d"),
    ("refreshes held back", "refreshes_held_back", "d"),
)


def recorded_runs(runs: list[dict[str, Any]], path: Path = RUNS_FILE) -> list[dict[str, Any]]:
    """The runs recorded in `path` with `runs` in place of those of the same catalog, table count
    and mode: each table count and catalog takes its own command (10,000 REST tables take hours),
    and the record keeps them all."""
    return merged_runs(
        runs,
        path,
        key=lambda run: (run["catalog"], run["tables"], run["refresh"]),
        order=lambda run: (run["catalog"], run["tables"], MODES.index(run["refresh"])),
    )


def _at(run: dict[str, Any]) -> str:
    return f"{run['tables']:,} {run['catalog']} tables"


def result(runs: list[dict[str, Any]]) -> BenchResult:
    """Every run's figures, the adaptive, notice and throttled modes against the targets."""
    rows = [
        [
            run["catalog"],
            f"{run['tables']:,}",
            run["refresh"],
            *(
                f"{run[key]:{spec}}" + (f" ({run['unseen_writes']})" if key == "writes" else "")
                for _, key, spec in COLUMNS
            ),
        ]
        for run in runs
    ]
    targets = []
    for what, key, goal, modes in TARGETS:
        if measured := [run for run in runs if run["refresh"] in modes]:
            targets.append(worst_target(measured, f"{'/'.join(modes)}, {what}", key, goal, _at))
    catalogs = sorted({run["catalog"] for run in runs})
    written = sorted({run["written"] for run in runs})
    notes = [
        "; ".join(f"{catalog}: {CATALOGS[catalog]}" for catalog in catalogs)
        + f". One file per table, the same {' or '.join(f'{w:.0%}' for w in written)} of the tables "
        f"appended to every simulated minute by writers that have run for {WRITTEN_BEFORE} minutes when floe "
        "starts, stamping their commits with the simulated time, as does a REST catalog's server (the rest "
        "idle), measured for the run's simulated minutes (fixed refresh, the same from its first minute on, "
        "for fewer) from the first check of every table, on a clock moved one second per engine round (or "
        "as long as the round took); maintenance and the minor triggers off (no optimizer runs here: a "
        "written table would stay pending); the request budget raised out of the way. Steady state: the last "
        "quarter of the run. CPU: the engine's process, the writer's appends left out.",
        "Commit-to-check is the part of trigger-to-task latency a refresh adds: a table seen with work "
        "is planned at the next round its group has a thread. Not measured: kopf, the API server and "
        "status writes around the engine (the `operator_scale` benchmark measures those), maintenance.",
        provenance_note(runs, "catalog and table count"),
    ]
    for run in runs:
        if run["refresh"] == "throttled":
            notes.append(
                f"Throttled ({run['tables']:,} tables): adaptive refresh with floe's own request budget, "
                f"in real time for {run['minutes']:g} minutes, the catalog behind a proxy that answers 429 "
                f"(Retry-After: 1) above {run['throttle_rate']:g} requests a second; then rounds without "
                f"writes until every write was seen ({run['drain_s']:.0f} s). floe got "
                f"{run['throttled_answers']:,} 429s and held {run['refreshes_held_back']:,} refreshes back; "
                f'its group\'s CatalogsWithinBudget condition said: "{run["pressure"] or "nothing"}".'
            )
    return new_result(
        "catalog_cadence",
        "Catalog requests and commit-to-check latency: fixed refresh, adaptive refresh, change notices",
        "How many requests floe sends a catalog whose tables are mostly idle, what the engine spends "
        "per table, and how soon it sees a writer's commit, with today's fixed 10 s refresh, with "
        "adaptive refresh, and with change notices; and whether anything is lost or stuck when the "
        "catalog throttles.",
        targets=targets,
        figures=[Figures("Each run", ["catalog", "tables", "refresh", *(h for h, _, _ in COLUMNS)], rows)],
        notes=notes,
    )
