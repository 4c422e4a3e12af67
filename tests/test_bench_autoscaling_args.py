"""The autoscaling benchmarks: a bad --jitter is refused, bursts land at their own offsets, the latency
breakdown splits right, and the result holds the targets."""

from __future__ import annotations

import itertools
import time
from types import ModuleType
from typing import Any

import pytest
from bench_scripts import import_bench_script


@pytest.fixture(scope="module")
def autoscaling() -> ModuleType:
    return import_bench_script("autoscaling")


@pytest.fixture(scope="module")
def bursts() -> ModuleType:
    return import_bench_script("harness.bursts")


@pytest.fixture(scope="module")
def scaling() -> ModuleType:
    return import_bench_script("harness.scaling_result")


def group_rows(figures: Any) -> list[list[str]]:
    """The rows of the breakdown table, or none when it was not made."""
    return [list(row) for row in figures.rows] if figures is not None else []


@pytest.mark.parametrize("jitter", ["-1", "91"])
def test_a_jitter_outside_the_round_is_refused_naming_the_flag(
    autoscaling: ModuleType, jitter: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        autoscaling.parse_args(["--period", "90", "--jitter", jitter])
    assert exited.value.code == 2
    assert f"--jitter must be from 0 up to --period (90 s), not {jitter}" in capsys.readouterr().err


def test_a_jitter_within_the_round_is_taken(autoscaling: ModuleType) -> None:
    args = autoscaling.parse_args(["--period", "90", "--jitter", "90"])
    assert (args.period, args.jitter) == (90.0, 90.0)


def test_the_latency_breakdown_splits_at_the_handout_and_at_the_start_on_an_executor(
    bursts: ModuleType, scaling: ModuleType
) -> None:
    measured = [bursts.Burst("t0", 100.0, 110.0, "p0"), bursts.Burst("t1", 200.0, 214.0, "p1")]
    result = scaling.ModeResult(
        "autoscaled",
        1.0,
        1.0,
        measured,
        0,
        1,
        handed_out_s={"p0": 105.0, "p1": 206.0},
        began_s={"p0": 108.0, "p1": 212.0},
        pod_starts_s=[1.0, 2.0, 3.0],
    )
    # A burst whose start on an executor is unknown is left out of the split.
    unknown = scaling.ModeResult("static", 1.0, 1.0, measured, 0, 1, handed_out_s={"p0": 101.0})
    figures, notes = scaling.breakdown({"static": unknown, "autoscaled": result})
    assert figures.headers[2] == "trigger → first task handed to Spark"
    assert group_rows(figures) == [["autoscaled", "2 of 2", "5.5 / 6.0", "4.5 / 6.0", "2.0 / 2.0"]]
    [note] = notes
    assert note.startswith("autoscaled: 3 executor pods created while measuring") and "median 2.0 s" in note


def test_with_planning_times_the_split_starts_at_the_refresh_and_the_waits_can_be_pooled(
    bursts: ModuleType, scaling: ModuleType
) -> None:
    def two_bursts(mode: str, marks: list[tuple[float, float, float, float]]) -> Any:
        """A group's two bursts, at 100 and 200 s; per burst: planned, handed out, began, committed."""
        ids = [f"{mode[0]}{i}" for i in range(len(marks))]
        return scaling.ModeResult(
            mode,
            1.0,
            1.0,
            [bursts.Burst(f"t{i}", 100.0 * (i + 1), m[3], ids[i]) for i, m in enumerate(marks)],
            0,
            1,
            planned_s={p: m[0] for p, m in zip(ids, marks, strict=True)},
            handed_out_s={p: m[1] for p, m in zip(ids, marks, strict=True)},
            began_s={p: m[2] for p, m in zip(ids, marks, strict=True)},
        )

    static = two_bursts("static", [(101.0, 101.5, 101.5, 104.0), (206.0, 206.5, 206.5, 209.0)])
    auto = two_bursts("autoscaled", [(103.0, 103.5, 105.0, 108.0), (208.0, 208.5, 210.0, 212.0)])
    results = {"static": static, "autoscaled": auto}
    figures, notes = scaling.breakdown(results)
    assert figures.headers[2:4] == ["trigger → planned", "planned → first task handed to Spark"]
    assert notes == []
    assert group_rows(figures) == [
        ["static", "2 of 2", "3.5 / 6.0", "0.5 / 0.5", "0.0 / 0.0", "2.5 / 2.5"],
        ["autoscaled", "2 of 2", "5.5 / 8.0", "0.5 / 0.5", "1.5 / 1.5", "2.5 / 3.0"],
    ]
    # Waits of both groups: 1, 6, 3, 8 s; after planning: static 3, 3 s; autoscaled 5, 4 s.
    pooled = scaling.refresh_pooled_medians(results)
    assert pooled == {"static": 7.5, "autoscaled": 9.0}
    # Without every group's planning times, nothing is pooled and the split starts at the handout.
    results["static"] = scaling.ModeResult("static", 1.0, 1.0, static.bursts, 0, 1)
    assert scaling.refresh_pooled_medians(results) is None
    assert "trigger → planned" not in scaling.breakdown(results)[0].headers


def test_each_table_of_a_round_lands_at_its_own_offset(
    autoscaling: ModuleType, bursts: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    landed: list[tuple[str, float]] = []

    class Table:
        def __init__(self, name: str) -> None:
            self._name = name

        def name(self) -> tuple[str, str]:
            return ("db", self._name)

    def burst(table: Table, files: int, rows: int, round_index: int) -> None:
        landed.append((table.name()[-1], time.monotonic()))

    monkeypatch.setattr(bursts, "burst", burst)
    monkeypatch.setattr(bursts, "floe_commit_after", lambda table, after_ms: (time.time(), "p"))
    args = autoscaling.parse_args(
        [
            "--tables",
            "3",
            "--rounds",
            "1",
            "--warmup-rounds",
            "0",
            "--period",
            "0.6",
            "--jitter",
            "0.6",
            "--seed",
            "7",
        ]
    )
    started = time.monotonic()
    measured, _ = bursts.run_rounds("static", [Table(f"t{i}") for i in range(3)], args, lambda: None)
    offsets = sorted(at - started for _, at in landed)
    assert sorted(b.table for b in measured) == ["t0", "t1", "t2"]
    # Seed 7's offsets: 0.09, 0.19 and 0.39 s into the round.
    assert all(later - earlier > 0.05 for earlier, later in itertools.pairwise(offsets))
    assert offsets[-1] < 0.6


def test_the_result_holds_both_targets_and_each_groups_figures(
    autoscaling: ModuleType, bursts: ModuleType, scaling: ModuleType
) -> None:
    def group(mode: str, executor_seconds: float, committed_s: float, changes: int) -> Any:
        """One burst triggered at 0 s and planned at 1 s."""
        burst = bursts.Burst("t0", 0.0, committed_s, mode)
        return scaling.ModeResult(mode, executor_seconds, 50.0, [burst], changes, 2, planned_s={mode: 1.0})

    results = {"static": group("static", 100.0, 2.0, 0), "autoscaled": group("autoscaled", 40.0, 3.0, 4)}
    args = autoscaling.parse_args([])
    result = scaling.scaling_result("autoscaling", "Autoscaling", results, args, "In-process.")
    assert [(t.measured, t.met) for t in result.targets] == [("60%", True), ("1.50x", False)]
    # Without handout marks there is no breakdown; the pooled waits (1 s each) still are.
    [groups] = result.figures
    assert groups.rows == [
        ["static", "100", "50", "2", "0", "2.0", "2.0", "2.0"],
        ["autoscaled", "40", "50", "2", "4", "3.0", "3.0", "3.0"],
    ]
    assert result.notes[0].startswith("6 tables, each getting 4 files of 20,000 rows at once every 120 s")
    assert "refresh waits pooled 1.50x, p95 latency 1.50x" in result.notes[1]
