"""The command-line flags the benchmarks share, so that each means the same in every script."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.steps import add_step_arguments

BENCH_DIR = Path(__file__).resolve().parent.parent
"""``bench/``: work directories default to ``bench/.work/<benchmark>`` (git-ignored)."""


def benchmark_parser(
    doc: str,
    work_dir: str,
    dir_help: str = "work directory",
    *,
    scale: str | None = None,
    repeat: str | None = None,
    profile: str | None = None,
    seed: str | None = None,
    engines: Sequence[str] = (),
    steps: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """A parser with ``--dir`` (default ``bench/.work/<work_dir>``) and ``--record``.

    Each other shared flag is added when its help text is given: ``--scale`` (a float,
    default 1), ``--repeat`` (runs of each measurement, the fastest kept; default 1),
    ``--profile``, ``--seed`` (default 1). ``engines`` adds ``--engines``, a
    comma-separated list of them (default: all); ``steps`` the hidden child-step flags.
    """
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if scale is not None:
        parser.add_argument("--scale", type=float, default=1.0, help=scale)
    parser.add_argument("--dir", type=Path, default=BENCH_DIR / ".work" / work_dir, help=dir_help)
    if seed is not None:
        parser.add_argument("--seed", type=int, default=1, help=seed)
    if repeat is not None:
        parser.add_argument("--repeat", type=int, default=1, help=repeat)
    if profile is not None:
        parser.add_argument("--profile", action="store_true", help=profile)
    if engines:
        parser.add_argument(
            "--engines",
            type=comma_separated(engines),
            default=",".join(engines),
            help=f"comma-separated, from {', '.join(engines)}",
        )
    parser.add_argument(
        "--record",
        action="store_true",
        help="also write the result to bench/results/<benchmark>.json, from which `python bench/report.py` "
        "makes bench/RESULTS.md",
    )
    if steps:
        add_step_arguments(parser, steps)
    return parser


def comma_separated(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse ``type``: a comma-separated list of some of ``choices``, in the order given."""

    def parse(text: str) -> list[str]:
        chosen = [item for item in text.split(",") if item]
        unknown = [item for item in chosen if item not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(unknown)}; choose from {', '.join(choices)}"
            )
        return chosen

    return parse
