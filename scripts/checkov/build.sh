#!/usr/bin/env bash
# Installs, once, checkov (static analysis of infrastructure code) into a virtualenv of its own:
#   ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/checkov/<version>-r<recipe>/venv
# tests/k8s/test_chart_checkov.py runs it on the Helm chart as `helm template` renders it.
# Not a dev dependency of floe: checkov pins many libraries exactly (boto3, pydantic, packaging,
# networkx, jsonschema...), some of them at versions floe's own dependencies cannot share, and it
# only reads files, so its own environment is enough. A run that finds it installed does nothing
# else.
#
# Usage: build.sh          install if needed; print the checkov binary on stdout
#        build.sh --check  print that binary and exit 0 if installed, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR          cache root (default $HOME/.cache/floe)
#   FLOE_CHECKOV_VERSION    checkov version (default below)
#   FLOE_CHECKOV_PYTHON     python to make the virtualenv with (default python3.11)
set -euo pipefail

CHECKOV_VERSION="${FLOE_CHECKOV_VERSION:-3.3.30}"
# Bump when the way the environment is made changes, so an old one is made anew.
RECIPE_REVISION=1

CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/checkov"
TARGET_DIR="$CACHE_ROOT/$CHECKOV_VERSION-r$RECIPE_REVISION"
CHECKOV="$TARGET_DIR/venv/bin/checkov"

LOG_TAG=checkov-env
RESULT="$CHECKOV"
is_built() { [[ -x "$CHECKOV" && "$(cat "$TARGET_DIR/.complete" 2>/dev/null)" == "checkov $CHECKOV_VERSION recipe $RECIPE_REVISION" ]]; }

# shellcheck source=scripts/lib/cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cached-build.sh"

cached_build_cli "$@"
cached_build_use_cache
cached_build_lock

rm -rf "$TARGET_DIR"
mkdir -p "$TARGET_DIR"
cached_build_venv "$TARGET_DIR/venv" "${FLOE_CHECKOV_PYTHON:-python3.11}" "checkov==$CHECKOV_VERSION"
# Its version, as a run would report it: proves the entry point imports with what pip resolved.
installed="$("$CHECKOV" --version)" || die "checkov does not run after the install"
[[ "$installed" == "$CHECKOV_VERSION" ]] || die "checkov --version says $installed, not $CHECKOV_VERSION"
echo "checkov $CHECKOV_VERSION recipe $RECIPE_REVISION" >"$TARGET_DIR/.complete"
log "done: $CHECKOV"
echo "$CHECKOV"
