#!/usr/bin/env bash
# Installs, once, moto's S3-compatible HTTP server for the object-store tests of the maintenance
# jobs (tests/test_maintenance_s3.py), into a virtualenv of its own:
#   ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/moto/<version>/venv
# Not a dev dependency of floe: moto needs botocore, which requires python-dateutil < 3, while
# the kubernetes client floe pins requires python-dateutil >= 3, so pip cannot put both in one
# environment. The server only talks HTTP to the tests, so its own environment is enough.
# A run that finds it installed does nothing else.
#
# Usage: build.sh          install if needed; print the server's python on stdout
#        build.sh --check  print that python and exit 0 if installed, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR       cache root (default $HOME/.cache/floe)
#   FLOE_MOTO_VERSION    moto version (default below)
#   FLOE_MOTO_PYTHON     python to make the virtualenv with (default python3.11)
set -euo pipefail

MOTO_VERSION="${FLOE_MOTO_VERSION:-5.2.5}"
# Bump when the way the environment is made changes, so an old one is made anew.
RECIPE_REVISION=1

CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/moto"
TARGET_DIR="$CACHE_ROOT/$MOTO_VERSION"
PYTHON="$TARGET_DIR/venv/bin/python"

LOG_TAG=moto-env
RESULT="$PYTHON"
is_built() { [[ -x "$PYTHON" && "$(cat "$TARGET_DIR/.complete" 2>/dev/null)" == "recipe $RECIPE_REVISION" ]]; }

# shellcheck source=scripts/lib/cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cached-build.sh"

cached_build_cli "$@"
cached_build_use_cache
cached_build_lock

rm -rf "$TARGET_DIR"
mkdir -p "$TARGET_DIR"
cached_build_venv "$TARGET_DIR/venv" "${FLOE_MOTO_PYTHON:-python3.11}" "moto[server]==$MOTO_VERSION"
"$PYTHON" -c 'import moto.server' || die "moto.server does not import after the install"
echo "recipe $RECIPE_REVISION" >"$TARGET_DIR/.complete"
log "done: $PYTHON"
echo "$PYTHON"
