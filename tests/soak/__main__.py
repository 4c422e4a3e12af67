"""The soak's command line: ``python -m tests.soak --seeds 20 --minutes 60`` (from the repository
root, with ``PYTHONPATH=operator:optimizer_image``); ``--seed-list 7`` replays one seed.

It prints the figures (seeds, snapshots checked, minutes, commits by each writer and by floe,
conflicts, snapshots not checked because they were expired first) and every failure, and exits 1
when there was one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from floe.local.reference_reader import ReferenceReader

from .driver import Settings, run_soak
from .flink import flink_home


def main(argv: list[str] | None = None) -> int:
    """Run the soak as asked; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="how many seeds, from --first-seed (default 3)")
    parser.add_argument("--first-seed", type=int, default=1, help="the first seed (default 1)")
    parser.add_argument("--seed-list", help="comma-separated seeds to run instead (replays them)")
    parser.add_argument(
        "--minutes", type=float, help="total minutes of writing, shared by the seeds (default 1 per seed)"
    )
    parser.add_argument(
        "--drain", type=float, default=30.0, help="seconds floe goes on after each seed's writes"
    )
    parser.add_argument("--no-flink", action="store_true", help="leave Flink's upsert writer out")
    parser.add_argument("--workdir", type=Path, help="keep the catalog, tables and logs here")
    args = parser.parse_args(argv)
    seeds = (
        [int(s) for s in args.seed_list.split(",")]
        if args.seed_list
        else list(range(args.first_seed, args.first_seed + args.seeds))
    )
    if not seeds or (args.minutes is not None and args.minutes <= 0):
        parser.error("give at least one seed and a positive --minutes")
    minutes = args.minutes if args.minutes is not None else float(len(seeds))
    settings = Settings(
        seeds=seeds,
        seconds_per_seed=minutes * 60 / len(seeds),
        drain_s=args.drain,
        flink_home=None if args.no_flink else flink_home(),
    )
    reference = ReferenceReader.start()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        report = run_soak(reference.spark, reference, args.workdir.resolve(), settings)
    else:
        with tempfile.TemporaryDirectory(prefix="floe-soak-") as workdir:
            report = run_soak(reference.spark, reference, Path(workdir), settings)
    print(report.describe())
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
