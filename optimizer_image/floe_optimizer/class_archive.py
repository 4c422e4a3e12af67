"""Make the executor JVM's class archive (Java's AppCDS): Spark's classes, parsed and verified
once, at image build, instead of in every executor pod that starts.

An executor of a group waking from zero is on the path from a table's trigger to its commit, and
most of its JVM's start is loading Spark's classes from their jars. ``entrypoint.sh
class-archive`` runs this module in the image build: a local Spark of the executor's class path
runs a Python job (what an executor does for floe: tasks, broadcasts, Python workers) and loads
the executor backend's classes, and the JVM writes every class it loaded to the archive as it
exits. Executor JVMs then map the archive (``-XX:SharedArchiveFile``); one whose class path does
not start with the archive's ignores it and loads from the jars, as without one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

JARS_ENV = "FLOE_SPARK_JARS"
"""The class path the archive is made for: Spark's jars, in the order the executors list them."""
EXECUTOR_CLASSES = (
    "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
    "org.apache.spark.executor.CoarseGrainedExecutorBackend",
    "org.apache.spark.deploy.k8s.Config",
)
"""Classes of the executor's start that a local Spark does not load by itself."""
EXIT_WAIT_S = 300.0


def make_class_archive(archive: Path, jars: str) -> int:
    """Run the archiving JVM for class path `jars` to its exit; the archive's size in bytes."""
    archive.unlink(missing_ok=True)
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("floe-class-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraClassPath", jars)
        # Its warnings name each class it leaves out (generated, or too old a class format).
        .config("spark.driver.extraJavaOptions", f"-XX:ArchiveClassesAtExit={archive} -Xlog:cds=error")
        .getOrCreate()
    )
    context = spark.sparkContext
    gateway: Any = context._gateway
    total = context.parallelize(range(1_000), 2).map(lambda n: n * 2).sum()
    if total != 999_000:
        raise RuntimeError(f"the archiving job computed {total}, not 999000")
    for name in EXECUTOR_CLASSES:
        gateway.jvm.java.lang.Class.forName(name)
    spark.stop()
    # The JVM exits when its stdin closes, and writes the archive as it exits.
    process = gateway.proc
    process.stdin.close()
    process.wait(timeout=EXIT_WAIT_S)
    if not archive.is_file() or archive.stat().st_size == 0:
        raise RuntimeError(f"the JVM exited ({process.returncode}) without writing {archive}")
    return archive.stat().st_size


def main(argv: list[str] | None = None) -> int:
    """``python -m floe_optimizer.class_archive ARCHIVE``, with the class path in ``$FLOE_SPARK_JARS``."""
    args = sys.argv[1:] if argv is None else argv
    jars = os.environ.get(JARS_ENV)
    if len(args) != 1 or not jars:
        print(f"usage: {JARS_ENV}=JAR:JAR... python -m floe_optimizer.class_archive ARCHIVE", file=sys.stderr)
        return 64
    size = make_class_archive(Path(args[0]), jars)
    print(f"class archive {args[0]}: {size / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
