#!/usr/bin/env bash
# Unpacks, once, Debian's prometheus package for the test that evaluates the Grafana dashboard's
# queries against a real Prometheus scraping floe (tests/k8s/test_grafana_dashboard.py):
#   ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/prometheus/<Debian version>/usr/bin/prometheus
# The .deb comes through apt (`apt-get download`, which checks it against the archive's signed
# index) and is unpacked with `dpkg-deb -x`, not installed: installing the package would enable
# and start a system Prometheus on port 9090 on hosts that run systemd, and needs root. The
# binary is static but for libc, so the unpacked copy runs as it is. The version is the one
# apt's package lists offer (`apt-cache policy`, no network), so a Debian point release that
# replaces it is unpacked anew; a run that finds it unpacked does nothing else.
#
# Usage: build.sh          unpack if needed; print the prometheus binary's path on stdout
#        build.sh --check  print the path and exit 0 if it is unpacked, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR  cache root (default $HOME/.cache/floe)
set -euo pipefail

# Bump when the way the package is unpacked changes, so an old copy is made anew.
RECIPE_REVISION=1

CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/prometheus"
LOG_TAG=prometheus-env

# candidate: the version of prometheus apt's lists offer, or nothing.
candidate() { apt-cache policy prometheus 2>/dev/null | sed -n 's/^[[:space:]]*Candidate:[[:space:]]*//p' | grep -v '^(none)$' || true; }

VERSION="$(candidate)"
TARGET_DIR="$CACHE_ROOT/${VERSION:-unknown}"
RESULT="$TARGET_DIR/usr/bin/prometheus"
is_built() { [[ -n "$VERSION" && -x "$RESULT" && "$(cat "$TARGET_DIR/.complete" 2>/dev/null)" == "recipe $RECIPE_REVISION" ]]; }

# shellcheck source=scripts/lib/cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cached-build.sh"

cached_build_cli "$@"
cached_build_use_cache
command -v apt-get >/dev/null || die "apt-get is not on PATH: this needs a Debian host (or put Debian's prometheus binary at /usr/bin/prometheus)"
if [[ -z "$VERSION" ]]; then
    # Package lists never fetched (a fresh container): only root may fetch them.
    ((EUID == 0)) || die "apt's package lists offer no prometheus; run as root: apt-get update"
    log "apt's package lists offer no prometheus: apt-get update"
    apt-get update >&2
    VERSION="$(candidate)"
    [[ -n "$VERSION" ]] || die "no prometheus package in this host's apt sources"
    TARGET_DIR="$CACHE_ROOT/$VERSION"
    RESULT="$TARGET_DIR/usr/bin/prometheus"
fi
cached_build_lock

WORK_DIR="$CACHE_ROOT/.work-$$"
trap 'rm -rf "$WORK_DIR"' EXIT
mkdir -p "$WORK_DIR"
log "downloading Debian's prometheus $VERSION"
(cd "$WORK_DIR" && nice -n 10 apt-get download -q "prometheus=$VERSION" >&2)
deb=("$WORK_DIR"/prometheus_*.deb)
[[ -f "${deb[0]}" ]] || die "apt-get download left no prometheus .deb in $WORK_DIR"
rm -rf "$TARGET_DIR"
mkdir -p "$TARGET_DIR"
dpkg-deb -x "${deb[0]}" "$TARGET_DIR"
"$RESULT" --version >&2 || die "the unpacked $RESULT does not run"
echo "recipe $RECIPE_REVISION" >"$TARGET_DIR/.complete"
log "done: $RESULT"
echo "$RESULT"
