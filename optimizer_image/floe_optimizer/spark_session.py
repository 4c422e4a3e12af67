"""The one local SparkSession floe uses, for the reference reader and the optimizer's rewrite tasks.

Sized for a small machine (2 cores, about 24 GiB): a 2 GiB driver, few shuffle partitions
and no UI. Python workers run the driver's own interpreter, so tasks shipped with
``sc.parallelize(...).map(...)`` can ``import floe`` from the same (editable) install.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
_ICEBERG_RUNTIME_PREFIX = "iceberg-spark-runtime-"

logger = logging.getLogger(__name__)


def has_iceberg_runtime(jars: Sequence[Path]) -> bool:
    """Tell whether one of ``jars`` is an Iceberg Spark runtime jar."""
    return any(Path(jar).name.startswith(_ICEBERG_RUNTIME_PREFIX) for jar in jars)


def get_spark(
    master: str = "local[2]",
    app_name: str = "floe",
    extra_jars: Sequence[Path] = (),
) -> SparkSession:
    """Return the process's SparkSession, creating it with floe's settings if none is running.

    ``extra_jars`` go on ``spark.jars``; when one of them is the Iceberg Spark runtime the
    Iceberg SQL extensions (``MERGE``/``UPDATE``/``DELETE``, procedures) are enabled.
    A running session is returned as it is (its static settings cannot change), but a
    ``RuntimeError`` is raised if it was started without one of ``extra_jars``.
    """
    jars = [Path(jar).resolve() for jar in extra_jars]
    missing = [jar for jar in jars if not jar.is_file()]
    if missing:
        raise FileNotFoundError(f"jar(s) for the Spark session not found: {', '.join(map(str, missing))}")

    if SparkContext._active_spark_context is not None:
        # An empty builder returns the running session without re-applying (and warning
        # about) static settings such as spark.jars.
        session = SparkSession.builder.getOrCreate()
        _check_jars_loaded(session, jars)
        return session

    # Workers must run the driver's interpreter: another Python would not see floe's
    # editable install nor have pyarrow/pyiceberg at the same versions.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Matches spark.driver.host below and spares the "hostname resolves to a loopback
    # address" warning on every start.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.memory", "2g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        # Loopback avoids failures on hosts whose hostname does not resolve.
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.log.level", "WARN")
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(str(jar) for jar in jars))
    if has_iceberg_runtime(jars):
        builder = builder.config("spark.sql.extensions", ICEBERG_EXTENSIONS)

    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    logger.debug("started Spark %s (%s) with jars %s", session.version, master, jars)
    return session


def _check_jars_loaded(session: SparkSession, jars: Sequence[Path]) -> None:
    loaded = session.sparkContext.getConf().get("spark.jars", "") or ""
    loaded_names = {Path(entry).name for entry in loaded.split(",") if entry}
    absent = [jar for jar in jars if jar.name not in loaded_names]
    if absent:
        raise RuntimeError(
            "a SparkSession is already running without jar(s) "
            f"{', '.join(jar.name for jar in absent)}; jars can only be set when the session starts, "
            "so call get_spark with them before anything else starts Spark"
        )
