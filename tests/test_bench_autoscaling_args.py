"""The autoscaling benchmarks' bursts must land within their round: a bad --jitter is refused."""

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
