#!/usr/bin/env bash
# Installs, once, the Python side of pyiceberg's Hive catalog (the thrift package) for the tests
# that run floe through a Hive metastore (tests/hive_server.py), into
#   ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/hive/thrift-<version>-<python>/pylib
# a directory those tests put on the Python path of the test run and of the floe processes it
# starts. Not a dependency of floe: a user of a Hive catalog installs pyiceberg[hive]. The
# metastore is Hive 2.3.9's, from the jars pyspark ships (Spark's own Hive client); nothing else
# is fetched. A run that finds it installed does nothing else.
#
# Usage: build.sh          install if needed; print the pylib directory on stdout
#        build.sh --check  print that directory and exit 0 if installed, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR       cache root (default $HOME/.cache/floe)
#   FLOE_HIVE_PYTHON     the Python floe runs on, whose pip installs thrift (default python3.11)
set -euo pipefail

THRIFT_VERSION=0.25.0
PYTHON="${FLOE_HIVE_PYTHON:-python3.11}"
PYTHON_TAG="$("$PYTHON" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"

CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/hive"
TARGET_DIR="$CACHE_ROOT/thrift-$THRIFT_VERSION-$PYTHON_TAG"
PYLIB="$TARGET_DIR/pylib"

LOG_TAG=hive-env
RESULT="$PYLIB"
is_built() { [[ -f "$TARGET_DIR/.complete" ]]; }

# shellcheck source=scripts/lib/cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cached-build.sh"

cached_build_cli "$@"
cached_build_use_cache
cached_build_lock

rm -rf "$TARGET_DIR"
mkdir -p "$TARGET_DIR"
log "installing thrift==$THRIFT_VERSION into $PYLIB"
nice -n 10 "$PYTHON" -m pip install -q --disable-pip-version-check --no-deps --target "$PYLIB" \
    "thrift==$THRIFT_VERSION" >&2
PYTHONPATH="$PYLIB" "$PYTHON" -c 'import thrift.transport.TSocket' || die "thrift does not import after the install"
touch "$TARGET_DIR/.complete"
log "done: $PYLIB"
echo "$PYLIB"
