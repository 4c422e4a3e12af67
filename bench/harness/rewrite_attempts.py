"""One attempt of a rewrite engine on a freshly restored variant of the table, and its checks.

floe and Iceberg run on the run's Spark session (`SparkEngines`); after each, the table's
live files, its content hash and a full scan are read by Iceberg Java. The bound and the
profile of floe's largest task run in child processes of the benchmark script (its ``bound``
and ``profile`` steps), so that no engine's warm caches or heap help another.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import MiB
from harness.pristine import Layout
from harness.rewrite_engines import SparkEngines, bound_bins, profile_largest_task, rewrite_bins, warm_up
from harness.steps import Step, run_step
from harness.variants import (
    Variants,
    build_variants,
    content_hash,
    full_scan_seconds,
    table_stats,
    write_base,
)

PROFILE_LISTING = (("tottime", 25), ("cumulative", 40))


def step_bound(args: argparse.Namespace) -> dict[str, Any]:
    """Child step: time the bare pyarrow read-then-write of the bins in ``--bins``, ``--cores`` processes."""
    bins: list[list[str]] = json.loads(Path(args.bins).read_text())
    return rewrite_bins(bins, Path(args.dir) / "bound-out", args.cores)


def step_profile(args: argparse.Namespace) -> dict[str, Any]:
    """Child step: run floe's largest full-optimizing task of the table under cProfile."""
    return profile_largest_task(Layout(Path(args.dir)), args.catalog, Path(args.profile_out), PROFILE_LISTING)


CHILD_STEPS: dict[str, Step] = {"bound": step_bound, "profile": step_profile}
"""The benchmark script's child steps: ``--step bound`` and ``--step profile``."""


def prepare(
    layout: Layout, args: argparse.Namespace, log: Callable[[str], None]
) -> tuple[dict[str, Any], SparkEngines, Variants]:
    """Write the table (``--scale``, ``--seed``), start Spark on ``--cores``, warm up ``--engines`` and
    build ``--variants``: the base table's rows and build time, the Spark engines, the variants."""
    log(f"building the input table in {layout.live} (scale {args.scale:g})")
    base = write_base(layout, "none_build", args.scale, args.seed)
    layout.save("none", "none_build")
    log(f"built {base['rows']:,} rows; starting Spark and warming up")
    spark = SparkEngines(args.cores)
    warm_up(spark, layout.root / "warmup", args.seed, args.engines)
    return base, spark, build_variants(layout, spark.reader, args.variants, log)


@dataclass
class RewriteAttempts:
    """The benchmark's work directory, script and Spark session: what an attempt needs."""

    layout: Layout
    script: Path
    cores: int
    spark: SparkEngines
    scan_repeat: int
    log: Callable[[str], None]

    def child(self, step: str, label: str, *extra: str) -> dict[str, Any]:
        """Run the script's ``step`` in a child process on the layout; its result."""
        argv = ["--step", step, "--dir", str(self.layout.root), "--cores", str(self.cores), *extra]
        return run_step(self.script, argv, self.layout.root, label)

    def attempt(self, variant: str, engine: str, n: int) -> dict[str, Any]:
        """Restore ``variant`` and rewrite it with ``engine``: timings, and for floe and Iceberg the
        table's live files (``after``), its content hash (``hash``) and a full scan's seconds."""
        layout, name = self.layout, f"{variant}_{engine}_{n}"
        layout.restore(variant, name)
        if engine == "bound":
            bins_file = layout.root / "logs" / f"bins-{variant}.json"
            bins_file.write_text(json.dumps(bound_bins(layout, name)))
            run = self.child("bound", f"bound-{name}", "--bins", str(bins_file))
        else:
            spark = self.spark
            run = spark.floe(layout, name) if engine == "floe" else spark.iceberg(layout, name)
            run["after"] = table_stats(layout, name)
            run["hash"] = content_hash(spark.reader, layout, name)
            run["scan_seconds"] = full_scan_seconds(spark.reader, layout, name, repeat=self.scan_repeat)
        self.log(f"{variant} / {engine} #{n + 1}: {run['seconds']:.1f} s, {run['cpu_seconds']:.0f} CPU s")
        return run

    def profile(self, variant: str) -> None:
        """Profile floe's largest task of ``variant`` in a child process and print the listing."""
        name, out = f"{variant}_profile", self.layout.root / "logs" / f"profile-{variant}.txt"
        self.layout.restore(variant, name)
        task = self.child("profile", f"profile-{variant}", "--catalog", name, "--profile-out", str(out))
        self.log(
            f"cProfile of floe's largest {variant} task ({task['bytes_read'] / MiB:.0f} MiB in "
            f"{task['seconds']:.1f} s, one process, no Spark):\n{out.read_text()}"
        )
