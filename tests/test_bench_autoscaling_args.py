"""The autoscaling benchmarks: a bad --jitter is refused, and the latency breakdown splits right."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def autoscaling() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the benchmark imports its own `harness` package
    try:
        return importlib.import_module("autoscaling")
    finally:
        sys.path.remove(str(BENCH))


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
    autoscaling: ModuleType,
) -> None:
    bursts = [autoscaling.Burst("t0", 100.0, 110.0, "p0"), autoscaling.Burst("t1", 200.0, 214.0, "p1")]
    result = autoscaling.ModeResult(
        "autoscaled",
        1.0,
        1.0,
        bursts,
        0,
        1,
        handed_out_s={"p0": 105.0, "p1": 206.0},
        began_s={"p0": 108.0, "p1": 212.0},
        pod_starts_s=[1.0, 2.0, 3.0],
    )
    # A burst whose start on an executor is unknown is left out of the split.
    unknown = autoscaling.ModeResult("static", 1.0, 1.0, bursts, 0, 1, handed_out_s={"p0": 101.0})
    text = "\n".join(autoscaling._breakdown({"static": unknown, "autoscaled": result}))
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith(("| autoscaled", "| static"))
    ]
    assert rows == [["autoscaled", "2 of 2", "5.5 / 6.0", "4.5 / 6.0", "2.0 / 2.0"]]
    assert "autoscaled: 3 executor pods created while measuring" in text and "median 2.0 s" in text
