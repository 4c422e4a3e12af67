"""Benchmark records and the report made from them: the checked-in report is what the checked-in
records give, a record survives a write and a read, a broken record is refused naming its file."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from bench_scripts import import_bench_script


@pytest.fixture(scope="module")
def report() -> ModuleType:
    return import_bench_script("report")


@pytest.fixture(scope="module")
def results() -> ModuleType:
    import_bench_script("report")
    import harness.results

    return harness.results


def a_result(results: ModuleType, benchmark: str, *, met: int = 1, missed: int = 1) -> object:
    """A record of a typical size: a few targets, one table of figures, a note."""
    targets = [results.Target(f"target {i}", ">= 2x", "3.1x", True) for i in range(met)]
    targets += [results.Target(f"missed {i}", "< 50 ms", "171 ms", False) for i in range(missed)]
    table = results.Figures(
        "Figures",
        ["variant", "floe s", "peer s", "floe / peer"],
        [[f"v{i}", "1.0", "3.1", "3.1x"] for i in range(4)],
    )
    return results.BenchResult(
        benchmark=benchmark,
        title=f"{benchmark.replace('_', ' ').capitalize()}: floe vs `its peer`",
        question="What it measures, against which peer.",
        command=f"python bench/{benchmark}.py --record",
        date="2026-11-29",
        commit="0123456789ab",
        machine="2 cores, 24 GiB, Some CPU",
        load="1.00 1.10 1.20",
        targets=targets,
        figures=[table],
        notes=["Where the time goes."],
    )


def test_the_checked_in_report_is_what_the_checked_in_records_give(report: ModuleType) -> None:
    stale = report.stale(report.build())
    assert not stale, (
        f"{', '.join(str(p.relative_to(report.ROOT)) for p in stale)}: run python bench/report.py"
    )


def test_the_checked_in_results_md_is_at_most_40_lines_a_benchmark(report: ModuleType) -> None:
    text = report.build()[report.ROOT / report.RESULTS_MD]
    assert text.count("\n") <= report.MAX_LINES


def test_a_typical_record_per_benchmark_fits_in_the_limit(report: ModuleType, results: ModuleType) -> None:
    records = [a_result(results, name) for name in report.ORDER]
    assert report.render_report(records, docs=False).count("\n") <= report.MAX_LINES


def test_a_long_table_is_named_in_results_md_and_folded_on_the_docs_page(
    report: ModuleType, results: ModuleType
) -> None:
    rounds = results.Figures("Per round", ["round", "WA"], [[str(i), f"{i / 10:.2f}"] for i in range(24)])
    result = replace(a_result(results, "cdc_write_amplification"), figures=[rounds])
    results_md = report.render_report([result], docs=False)
    docs = report.render_report([result], docs=True)
    assert "**Per round**: 24 rows, in `bench/results/cdc_write_amplification.json`" in results_md
    assert "| 23    | 2.30 |" not in results_md
    assert '??? note "Per round (24 rows)"' in docs and "    | 23    | 2.30 |" in docs
    # The script itself prints every row.
    assert "| 23    | 2.30 |" in results.render_section(result)


def test_a_record_round_trips_through_write_and_read(results: ModuleType, tmp_path: Path) -> None:
    result = a_result(results, "rewrite_throughput", met=2, missed=1)
    path = results.write_result(result, tmp_path)
    assert path == tmp_path / "rewrite_throughput.json"
    assert results.read_result(path) == result
    assert results.read_results(tmp_path) == [result]


def test_a_record_with_a_missing_field_is_refused_naming_the_file(
    results: ModuleType, tmp_path: Path
) -> None:
    path = results.write_result(a_result(results, "planning_scale"), tmp_path)
    raw = json.loads(path.read_text())
    del raw["commit"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*commit"):
        results.read_result(path)


@pytest.mark.parametrize(
    "change",
    [
        lambda raw: raw.update(surprise=1),
        lambda raw: raw.update(date=20261129),
        lambda raw: raw["targets"][0].update(met="yes"),
        lambda raw: raw["targets"][0].pop("goal"),
        lambda raw: raw["figures"][0]["rows"][0].pop(),
        lambda raw: raw.update(notes="one note"),
        lambda raw: raw.update(benchmark="planning_scale"),
    ],
    ids=[
        "unknown field",
        "date a number",
        "met a string",
        "target without goal",
        "short row",
        "notes",
        "misfiled",
    ],
)
def test_a_malformed_record_is_refused_naming_the_file(
    results: ModuleType, tmp_path: Path, change: Callable[[dict[str, Any]], object]
) -> None:
    path = results.write_result(a_result(results, "catalog_scale"), tmp_path)
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=re.escape(str(path))):
        results.read_result(path)


def test_a_file_that_is_not_json_is_refused_naming_it(results: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "operator_scale.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=re.escape(str(path))):
        results.read_result(path)


def test_no_records_make_a_report_that_says_so(report: ModuleType, tmp_path: Path) -> None:
    for text in report.build(tmp_path).values():
        assert "No results recorded" in text
        assert "|" not in text


def test_the_sections_come_in_the_fixed_order_then_by_name(report: ModuleType, results: ModuleType) -> None:
    names = ["zz_new", *reversed(report.ORDER), "aa_new"]
    text = report.render_report([a_result(results, name) for name in names], docs=True)
    anchors = re.findall(r"^## .* \{ #(\w+) \}$", text, flags=re.MULTILINE)
    assert anchors == [*report.ORDER, "aa_new", "zz_new"]


def test_the_summary_counts_targets_met_and_missed(report: ModuleType, results: ModuleType) -> None:
    text = report.render_report([a_result(results, "autoscaling", met=2, missed=3)], docs=False)
    row = next(line for line in text.splitlines() if line.startswith("| [Autoscaling"))
    assert [cell.strip() for cell in row.strip("|").split("|")][1:] == ["2", "3", "2026-11-29"]


def test_the_summary_links_to_each_section(report: ModuleType, results: ModuleType) -> None:
    records = [a_result(results, name) for name in report.ORDER]
    records.append(replace(records[0], benchmark="rewrite_again"))  # the same title twice
    for docs in (False, True):
        text = report.render_report(records, docs=docs)
        links = re.findall(r"^\| \[.*?\]\(#([\w-]+)\)", text, flags=re.MULTILINE)
        headings = re.findall(r"^## (.*)$", text, flags=re.MULTILINE)
        if docs:
            targets = [heading.rsplit("#", 1)[1].rstrip(" }") for heading in headings]
        else:
            taken: set[str] = set()
            targets = [report.github_anchor(heading, taken) for heading in headings]
        assert links == targets
        assert len(set(links)) == len(records)
    assert "rewrite-throughput-floe-vs-its-peer-1" in report.render_report(records, docs=False)


def test_the_plots_are_embedded_in_the_docs_and_linked_from_results_md(
    report: ModuleType, results: ModuleType
) -> None:
    plots = ["cdc_frontier_skewed.png", "ingest_data_files.png", "ingest_full_scan_s.png", "unrelated.png"]
    records = [
        a_result(results, name) for name in ("ingest_experience", "cdc_write_amplification", "autoscaling")
    ]
    docs = report.render_report(records, plots, docs=True)
    assert re.findall(r"!\[.*?\]\((.*?)\)", docs) == [
        "plots/ingest_data_files.png",
        "plots/ingest_full_scan_s.png",
        "plots/cdc_frontier_skewed.png",
    ]
    results_md = report.render_report(records, plots, docs=False)
    assert "![" not in results_md
    assert results_md.count("](../docs/benchmarks/plots/") == 3


def test_the_checked_in_plots_are_the_ones_the_report_shows(report: ModuleType) -> None:
    shown = {name for captions in report.PLOT_CAPTIONS.values() for name in captions}
    assert {path.name for path in (report.ROOT / report.PLOTS).glob("*.png")} == shown


def test_check_names_the_stale_file_and_write_brings_it_up_to_date(
    report: ModuleType, results: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in report.ORDER:
        results.write_result(a_result(results, name), tmp_path / "bench" / "results")
    assert report.main(["--check"], root=tmp_path) == 1
    assert "bench/RESULTS.md is stale" in capsys.readouterr().err
    assert report.main([], root=tmp_path) == 0
    assert report.main(["--check"], root=tmp_path) == 0
    (tmp_path / report.DOCS_MD).write_text("edited by hand\n")
    assert report.main(["--check"], root=tmp_path) == 1
    err = capsys.readouterr().err
    assert "docs/benchmarks/results.md is stale" in err
    assert "bench/RESULTS.md" not in err


def test_a_broken_record_stops_the_report_naming_the_file(
    report: ModuleType, results: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "autoscaling.json").write_text("[]")
    assert report.main([], root=tmp_path) == 1
    assert "bench/results/autoscaling.json" in capsys.readouterr().err
    assert not (tmp_path / report.RESULTS_MD).exists()


@pytest.fixture(scope="module")
def recorded_runs() -> ModuleType:
    import_bench_script("report")
    import harness.recorded_runs

    return harness.recorded_runs


def test_a_recorded_run_replaces_only_the_run_of_its_key(recorded_runs: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    earlier = [
        {"tables": 1000, "shape": "set", "cpu": 9.0},
        {"tables": 10000, "shape": "set", "cpu": 15.0},
        {"tables": 1000, "shape": "tables", "cpu": 40.0},
    ]
    path.write_text(json.dumps(earlier))
    runs = recorded_runs.merged_runs(
        [{"tables": 1000, "shape": "tables", "cpu": 12.0}],
        path,
        key=lambda run: (run["tables"], run["shape"]),
        order=lambda run: (run["tables"], run["shape"]),
    )
    assert [(r["tables"], r["shape"], r["cpu"]) for r in runs] == [
        (1000, "set", 9.0),
        (1000, "tables", 12.0),
        (10000, "set", 15.0),
    ]
    assert recorded_runs.merged_runs([], tmp_path / "none.json", key=len, order=len) == []


def test_a_target_over_runs_is_judged_on_the_worst_and_names_it(recorded_runs: ModuleType) -> None:
    runs = [{"tables": 1000, "cpu": 12.0}, {"tables": 10000, "cpu": 19.5}, {"tables": 100, "cpu": 3.0}]
    target = recorded_runs.worst_target(runs, "cpu ms", "cpu", 18.0, lambda run: f"{run['tables']:,} tables")
    assert (target.what, target.goal, target.measured, target.met) == (
        "cpu ms: worst of 3 (at 10,000 tables)",
        "<= 18",
        "19.5",
        False,
    )
    assert recorded_runs.worst_target(runs[:1], "cpu ms", "cpu", 18.0, str).met
