"""A benchmark's result as a record, ``bench/results/<benchmark>.json``, and the report made from them.

Each script builds one ``BenchResult`` (its targets, its tables of figures, a few notes) and
prints it as a markdown section; with ``--record`` it also writes the record. ``bench/RESULTS.md``
and the docs' results page are generated from the records (``python bench/report.py``), so
they hold each benchmark's latest run and nothing else: earlier runs live in git.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from harness.machine import load_average
from harness.report import markdown_table

BENCH_DIR = Path(__file__).resolve().parent.parent
RESULTS_DIR = BENCH_DIR / "results"
"""Where ``--record`` writes, one file per benchmark script: ``bench/results/<script stem>.json``."""


@dataclass(frozen=True)
class Target:
    """One target of a benchmark and how this run did against it."""

    what: str
    """What is measured, e.g. ``floe / Iceberg wall clock, eq deletes``."""
    goal: str
    """The target, e.g. ``>= 2x``."""
    measured: str
    """This run's figure, e.g. ``4.93x``."""
    met: bool


@dataclass(frozen=True)
class Figures:
    """A table of figures: its title, its column headers and one list of cells per row."""

    title: str
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class BenchResult:
    """One run of one benchmark: what it answers, under what conditions, and its figures."""

    benchmark: str
    """The script's stem, e.g. ``rewrite_throughput``: the record's file name."""
    title: str
    question: str
    """One or two sentences: what the benchmark measures, against what peer."""
    command: str
    date: str
    commit: str
    machine: str
    load: str
    """The 1/5/15-minute load averages at the end of the run."""
    targets: list[Target] = field(default_factory=list)
    figures: list[Figures] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Short paragraphs: where the time goes, what a missed target is waiting on, what was not measured."""

    @property
    def targets_met(self) -> int:
        """How many of the targets this run met."""
        return sum(1 for target in self.targets if target.met)


def new_result(
    benchmark: str,
    title: str,
    question: str,
    *,
    targets: list[Target] | None = None,
    figures: list[Figures] | None = None,
    notes: list[str] | None = None,
) -> BenchResult:
    """A result of this run: today's date, this checkout's commit, this machine and load, ``sys.argv``."""
    return BenchResult(
        benchmark=benchmark,
        title=title,
        question=question,
        **provenance(),
        machine=machine_description(),
        load=load_average(),
        targets=targets or [],
        figures=figures or [],
        notes=notes or [],
    )


def provenance() -> dict[str, str]:
    """Where a figure comes from: its ``command`` (``sys.argv``), ``date`` and ``commit``."""
    return {
        "command": " ".join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "date": date.today().isoformat(),
        "commit": _commit(),
    }


def machine_description() -> str:
    """``2 cores, 24 GiB, Intel(R) Xeon(R) ...``: what a reader needs to compare figures across runs."""
    memory_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            memory_kib = int(line.split()[1])
    model = platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} cores, {round(memory_kib / 1024 / 1024)} GiB, {model}"


def _commit() -> str:
    """The checkout's short commit, ``+changes`` when its tracked files differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=BENCH_DIR, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def write_result(result: BenchResult, directory: Path = RESULTS_DIR) -> Path:
    """Write ``result`` as ``<directory>/<benchmark>.json`` and return the path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{result.benchmark}.json"
    path.write_text(json.dumps(asdict(result), indent=2, ensure_ascii=False) + "\n")
    return path


def read_result(path: Path) -> BenchResult:
    """A record written by ``write_result``; anything else is a ``ValueError`` naming the file.

    Refused: a file that is not JSON, a missing or unknown field, a field of the wrong type, a
    table row whose cells do not match its headers, and a ``benchmark`` that is not the file's stem.
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise TypeError("a record is a JSON object")
        result = BenchResult(
            **{
                **raw,
                "targets": [Target(**target) for target in _list(raw.get("targets", []), "targets")],
                "figures": [Figures(**table) for table in _list(raw.get("figures", []), "figures")],
            }
        )
        _check(result)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: not a benchmark result: {error}") from error
    if result.benchmark != path.stem:
        raise ValueError(
            f"{path}: holds the result of {result.benchmark!r}, which belongs in {result.benchmark}.json"
        )
    return result


def _list(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise TypeError(f"{name} is a list of objects")
    return value


def _check(result: BenchResult) -> None:
    """Raise ``TypeError`` where a field of ``result`` does not hold what its annotation says."""

    def strings(name: str, values: Any) -> None:
        if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
            raise TypeError(f"{name} is a list of strings")

    texts = ["benchmark", "title", "question", "command", "date", "commit", "machine", "load"]
    for name in texts:
        if not isinstance(getattr(result, name), str):
            raise TypeError(f"{name} is a string")
    for target in result.targets:
        strings("a target's what, goal and measured", [target.what, target.goal, target.measured])
        if not isinstance(target.met, bool):
            raise TypeError(f"target {target.what!r}: met is true or false")
    for table in result.figures:
        strings(f"table {table.title!r}: its headers", table.headers)
        strings("a table's title", [table.title])
        if not isinstance(table.rows, list):
            raise TypeError(f"table {table.title!r}: rows is a list of rows")
        for row in table.rows:
            if not isinstance(row, list) or len(row) != len(table.headers):
                raise TypeError(
                    f"table {table.title!r}: each row is a list of {len(table.headers)} cells, one a header"
                )
            if not all(isinstance(cell, str | int | float) and not isinstance(cell, bool) for cell in row):
                raise TypeError(f"table {table.title!r}: a cell is a string or a number")
    strings("notes", result.notes)


FIGURE_FILES = frozenset({"cdc.json"})
"""JSON in the results directory that is not a record: a benchmark's figures in a shape of their own,
as are a benchmark's recorded runs, ``<benchmark>_runs.json`` (`harness.recorded_runs`)."""


def read_results(directory: Path = RESULTS_DIR) -> list[BenchResult]:
    """Every record in ``directory``, in the order of their file names (figures aside)."""
    return [
        read_result(path)
        for path in sorted(directory.glob("*.json"))
        if path.name not in FIGURE_FILES and not path.name.endswith("_runs.json")
    ]


LONG_TABLE_ROWS = 12
"""A table of more rows (e.g. one row per round) is folded on the docs page and left out of RESULTS.md."""


def render_section(result: BenchResult, level: int = 2, long_tables: str = "shown") -> str:
    """The markdown section of one result: question, targets, figures, notes, and how it was run.

    ``long_tables`` says what becomes of a table over `LONG_TABLE_ROWS` rows: ``shown`` as the
    others, ``folded`` into a collapsed block (the docs page), or ``named`` in one line
    pointing at the record (``bench/RESULTS.md``, kept short).
    """
    heading = "#" * level
    parts = [f"{heading} {result.title}", result.question]
    if result.targets:
        rows = [[t.what, t.goal, t.measured, "met" if t.met else "**missed**"] for t in result.targets]
        parts.append(markdown_table(["target", "goal", "measured", ""], rows))
    for table in result.figures:
        body = markdown_table(table.headers, table.rows)
        if len(table.rows) <= LONG_TABLE_ROWS or long_tables == "shown":
            parts.append(f"**{table.title}**\n\n" + body)
        elif long_tables == "folded":
            indented = "\n".join(f"    {line}" for line in body.splitlines())
            parts.append(f'??? note "{table.title} ({len(table.rows)} rows)"\n\n{indented}')
        else:
            parts.append(
                f"**{table.title}**: {len(table.rows)} rows, in `bench/results/{result.benchmark}.json` "
                "and on the docs' results page."
            )
    parts.extend(result.notes)
    parts.append(
        f"Measured {result.date} on commit `{result.commit}`, {result.machine}, load {result.load}.  \n"
        f"Command: `{result.command}`"
    )
    return "\n\n".join(parts) + "\n"


def report_result(result: BenchResult, record: bool) -> None:
    """Print ``result``'s section; with ``record`` (the ``--record`` flag) also write its record."""
    print(render_section(result))
    if record:
        print(f"recorded in {write_result(result)}")
