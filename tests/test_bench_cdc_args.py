"""The CDC benchmark's flags: bad values are refused naming the flag, good ones are taken."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from bench_scripts import import_bench_script


@pytest.fixture(scope="module")
def cdc() -> ModuleType:
    return import_bench_script("cdc_write_amplification")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--minor-interval-rounds", "-1"], "--minor-interval-rounds must be 0 or more, not -1"),
        (["--round-period-s", "0"], "--round-period-s must be positive, not 0"),
        (["--round-period-s", "-2.5"], "--round-period-s must be positive, not -2.5"),
        (["--base-rows", "1000"], "--base-rows must be at least 20x an hour of upserts (1920000)"),
    ],
)
def test_a_bad_flag_is_refused_naming_it(
    cdc: ModuleType, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cdc.parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_report_only_without_a_run_names_what_is_missing(
    cdc: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "before.json").write_text("{}")
    with pytest.raises(SystemExit) as exited:
        cdc.parse_args(["--report-only", "--dir", str(tmp_path)])
    assert exited.value.code == 2
    assert f"--report-only: no results of after in {tmp_path / 'logs'}" in capsys.readouterr().err


def test_the_minor_interval_defaults_to_an_hour_and_zero_is_taken(cdc: ModuleType) -> None:
    assert cdc.parse_args(["--rounds-per-hour", "3"]).minor_interval_rounds == 3
    every_round = cdc.parse_args(["--minor-interval-rounds", "0", "--round-period-s", "0.5"])
    assert (every_round.minor_interval_rounds, every_round.round_period_s) == (0, 0.5)


def test_a_side_process_is_not_held_to_the_hourly_base_check(cdc: ModuleType) -> None:
    # The parent passes a side only the side's flags; --rounds-per-hour stays at its default there.
    args = cdc.parse_args(["--step", "side", "--side", "after", "--base-rows", "1000"])
    assert (args.step, args.base_rows) == ("side", 1000)


def test_a_step_without_a_result_file_is_refused_before_it_runs(cdc: ModuleType) -> None:
    args = cdc.parse_args(["--step", "side", "--side", "after"])
    ran: list[str] = []

    def side(_: object) -> dict[str, str]:
        ran.append("side")
        return {}

    with pytest.raises(SystemExit, match="--step side needs --result FILE"):
        cdc.run_requested_step(args, {"side": side})
    assert ran == []
