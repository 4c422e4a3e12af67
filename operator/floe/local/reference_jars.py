"""The Java jars the reference reader needs: Iceberg's Spark runtime, SQLite JDBC and the AWS bundle.

The AWS bundle (the AWS SDK that Iceberg's ``S3FileIO``, in the Spark runtime, runs on) lets
the reader open tables on S3-protocol object stores, such as those of a REST catalog.

They are fetched once with Maven into a per-user cache and reused from there; a call that
finds them already cached runs no process at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ICEBERG_SPARK_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0"
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.46.1.3"
ICEBERG_AWS_BUNDLE = "org.apache.iceberg:iceberg-aws-bundle:1.10.0"
REFERENCE_ARTIFACTS: tuple[str, ...] = (ICEBERG_SPARK_RUNTIME, SQLITE_JDBC, ICEBERG_AWS_BUNDLE)

_MVN_TIMEOUT_SECONDS = 900


class ReferenceJarsUnavailable(RuntimeError):
    """A reference jar is neither cached nor obtainable with Maven."""


def cache_dir() -> Path:
    """Return floe's cache root: ``$FLOE_CACHE_DIR`` if set, else ``~/.cache/floe``."""
    configured = os.environ.get("FLOE_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "floe"


def jar_file_name(artifact: str) -> str:
    """Return the file name Maven gives the jar of ``group:artifact:version``."""
    parts = artifact.split(":")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"expected a 'group:artifact:version' coordinate, got {artifact!r}")
    _, name, version = parts
    return f"{name}-{version}.jar"


def reference_jars() -> list[Path]:
    """Return the paths of the Iceberg Spark runtime, SQLite JDBC and AWS bundle jars, fetching missing ones.

    Jars live in ``<cache_dir()>/jars``. Missing ones are copied there with
    ``mvn dependency:copy``; raises ``ReferenceJarsUnavailable`` if Maven is absent or fails.
    """
    jars_dir = cache_dir() / "jars"
    paths: list[Path] = []
    for artifact in REFERENCE_ARTIFACTS:
        path = jars_dir / jar_file_name(artifact)
        if not path.is_file():
            _fetch(artifact, path)
        paths.append(path)
    return paths


def _fetch(artifact: str, destination: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ReferenceJarsUnavailable(
            f"cannot fetch {artifact}: Maven ('mvn') is not on PATH; install Maven or place "
            f"{destination.name} in {destination.parent}"
        )
    destination.parent.mkdir(parents=True, exist_ok=True)
    # Download into a private directory and rename, so an interrupted or concurrent fetch
    # never leaves a truncated jar where the next call would take it for a cached one.
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=destination.parent) as staging:
        command = [
            mvn,
            "-B",
            "-q",
            "dependency:copy",
            f"-Dartifact={artifact}",
            f"-DoutputDirectory={staging}",
        ]
        try:
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_MVN_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ReferenceJarsUnavailable(f"cannot fetch {artifact} with Maven: {exc}") from exc
        fetched = Path(staging) / destination.name
        if result.returncode != 0 or not fetched.is_file():
            output = (result.stdout + result.stderr).strip()
            tail = "\n".join(output.splitlines()[-20:])
            raise ReferenceJarsUnavailable(
                f"cannot fetch {artifact}: 'mvn dependency:copy' exited with {result.returncode}"
                + (f":\n{tail}" if tail else "")
            )
        os.replace(fetched, destination)
