#!/usr/bin/env bash
# Bundles, once per content, tests/grafana_board: the page that draws the chart's Grafana dashboard
# with Grafana's own panel components (@grafana/ui, @grafana/data; Apache-2.0) for
# tests/dashboard_preview.py and docs/img/dashboard.png:
#   ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/grafana-board/<content key>/{board.js,board.css,fonts/inter/}
# The key is the hash of this script, package.json, package-lock.json and board.tsx, so any change
# to them bundles anew and an unchanged tree costs nothing. `npm ci` installs the locked packages
# from the npm registry into a work directory (scripts not run: esbuild's binary comes as an
# optional package), esbuild bundles board.tsx, and the Inter font Grafana's global styles ask for
# is copied from @fontsource/inter. Only the bundle is kept; older bundles are removed.
#
# Usage: build.sh          bundle if needed; print the bundle's directory on stdout
#        build.sh --check  print the directory and exit 0 if it is bundled, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR  cache root (default $HOME/.cache/floe)
set -euo pipefail

# Bump when the way the bundle is made changes, so an old bundle is made anew.
RECIPE_REVISION=1

SOURCE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../tests/grafana_board" && pwd)"
CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/grafana-board"
LOG_TAG=grafana-board
KEY="$(cat "${BASH_SOURCE[0]}" "$SOURCE_DIR/package.json" "$SOURCE_DIR/package-lock.json" "$SOURCE_DIR/board.tsx" |
    sha256sum | cut -c1-16)"
RESULT="$CACHE_ROOT/$KEY"
is_built() { [[ "$(cat "$RESULT/.complete" 2>/dev/null)" == "recipe $RECIPE_REVISION" ]]; }

# shellcheck source=scripts/lib/cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cached-build.sh"

cached_build_cli "$@"
cached_build_use_cache
command -v npm >/dev/null || die "npm is not on PATH: install Node.js 20 or newer with npm (Debian: apt-get install nodejs npm)"
cached_build_lock

WORK_DIR="$CACHE_ROOT/.work-$$"
trap 'rm -rf "$WORK_DIR"' EXIT
mkdir -p "$WORK_DIR/out/fonts/inter"
cp "$SOURCE_DIR/package.json" "$SOURCE_DIR/package-lock.json" "$SOURCE_DIR/board.tsx" "$WORK_DIR/"
log "installing the locked packages (npm ci)"
(cd "$WORK_DIR" && nice -n 10 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
log "bundling board.tsx"
# Fonts and icons that @grafana/ui's editors (Monaco, CodeMirror) import are never shown here.
(cd "$WORK_DIR" && nice -n 10 node_modules/.bin/esbuild board.tsx --bundle --minify --format=iife \
    --target=chrome120 --define:process.env.NODE_ENV='"production"' --loader:.svg=text \
    --loader:.ttf=empty --loader:.woff=empty --loader:.woff2=empty --log-level=error \
    --outfile=out/board.js >&2)
fonts="$WORK_DIR/node_modules/@fontsource/inter/files"
for pair in Regular:400-normal Medium:500-normal Italic:400-italic MediumItalic:500-italic; do
    cp "$fonts/inter-latin-${pair#*:}.woff2" "$WORK_DIR/out/fonts/inter/Inter-${pair%%:*}.woff2"
done
[[ -s "$WORK_DIR/out/board.js" && -s "$WORK_DIR/out/board.css" ]] || die "esbuild left no board.js and board.css"
rm -rf "$RESULT"
mv "$WORK_DIR/out" "$RESULT"
echo "recipe $RECIPE_REVISION" >"$RESULT/.complete"
find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 -type d ! -name "$KEY" ! -name '.work-*' -exec rm -rf {} +
log "done: $RESULT"
echo "$RESULT"
