#!/usr/bin/env bash
# Installs, once, Flink for the concurrency soak's Flink writer (tests/soak: Flink's Iceberg sink
# in upsert mode, driven through PyFlink), into a directory of its own:
#   ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/flink/<key>/venv   PyFlink (apache-flink from PyPI)
#   ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/flink/<key>/jars   the jars its JVM needs beside Flink's own
# <key> is the PyFlink and Iceberg versions and a hash of this script, so a changed recipe makes a
# new directory. Not a dependency of floe: PyFlink pins apache-beam, pandas, numpy and an old
# pyarrow that clash with floe's own, so it gets a virtualenv of its own. The jars, from Maven
# Central through `mvn`: iceberg-flink-runtime for Flink 1.20 at Iceberg 1.10 (the Iceberg the
# tests' Spark runs), Hadoop's shaded client (the Flink runtime needs Hadoop's Configuration) and
# sqlite-jdbc (the soak's JDBC catalog). PyFlink's JVM must have them on its own classpath, not
# on `pipeline.jars`: the job's committer opens the JDBC catalog, and a driver loaded by the job's
# class loader is not seen by java.sql.DriverManager. Give them as HADOOP_CLASSPATH, which
# PyFlink's gateway puts there. A run that finds it all installed does nothing else.
#
# Usage: build.sh          install if needed; print the directory on stdout
#        build.sh --check  print that directory and exit 0 if installed, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR       cache root (default $HOME/.cache/floe)
#   FLOE_FLINK_PYTHON    python to make the virtualenv with (default python3.11)
set -euo pipefail

# The newest PyFlink with Python 3.11 wheels whose Flink minor Iceberg 1.10 has a runtime for
# (Iceberg 1.10 builds for Flink 1.19, 1.20 and 2.0).
PYFLINK_VERSION=1.20.3
FLINK_MINOR=1.20
ICEBERG_VERSION=1.10.0
HADOOP_VERSION=3.4.1
SQLITE_JDBC_VERSION=3.46.1.3

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RECIPE_HASH="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"

CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/flink"
TARGET_DIR="$CACHE_ROOT/$PYFLINK_VERSION-$ICEBERG_VERSION-$RECIPE_HASH"

LOG_TAG=flink-env
RESULT="$TARGET_DIR"
is_built() { [[ -x "$TARGET_DIR/venv/bin/python" && -f "$TARGET_DIR/.complete" ]]; }

# shellcheck source=scripts/lib/cached-build.sh
source "$HERE/../lib/cached-build.sh"

cached_build_cli "$@"
cached_build_use_cache
cached_build_lock

command -v mvn >/dev/null || die "mvn is not on PATH (Maven fetches the Flink runtime's jars)"

rm -rf "$TARGET_DIR"
mkdir -p "$TARGET_DIR/jars"
for artifact in \
    "org.apache.iceberg:iceberg-flink-runtime-$FLINK_MINOR:$ICEBERG_VERSION" \
    "org.apache.hadoop:hadoop-client-api:$HADOOP_VERSION" \
    "org.apache.hadoop:hadoop-client-runtime:$HADOOP_VERSION" \
    "org.xerial:sqlite-jdbc:$SQLITE_JDBC_VERSION"; do
    log "fetching $artifact"
    nice -n 10 mvn -B -q dependency:copy "-Dartifact=$artifact" "-DoutputDirectory=$TARGET_DIR/jars" >&2 ||
        die "mvn could not fetch $artifact"
done
cached_build_venv "$TARGET_DIR/venv" "${FLOE_FLINK_PYTHON:-python3.11}" "apache-flink==$PYFLINK_VERSION"
"$TARGET_DIR/venv/bin/python" -c 'import pyflink.table' || die "pyflink does not import after the install"
touch "$TARGET_DIR/.complete"
log "done: $TARGET_DIR"
echo "$TARGET_DIR"
