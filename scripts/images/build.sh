#!/usr/bin/env bash
# Builds floe's two images from this checkout with podman, with no registry: the operator image
# (operator.Dockerfile) and the optimizer image (optimizer_image/Dockerfile), both on the Debian
# base of scripts/images/debian-base.sh, and saves each as a docker archive that
# `kind load image-archive` takes.
#
# The wheels come from the host: pip here reaches PyPI, a container build may not. The wheels of
# floe's dependencies are built once per pyproject.toml (by the images' own install script,
# install-floe.sh) and kept; floe's own wheel is built anew for each source key. The images are
# tagged with a key of everything that goes into them (the base image, pyproject.toml, the sources
# under operator/ and optimizer_image/, both Dockerfiles and the install script), so a run whose
# key is already built does nothing else, and any change gives new tags.
#
# Usage: build.sh          build if needed; print on stdout, one per line:
#                          FLOE_OPERATOR_IMAGE=  FLOE_OPTIMIZER_IMAGE=  (podman image names)
#                          FLOE_OPERATOR_ARCHIVE=  FLOE_OPTIMIZER_ARCHIVE=  (docker archives)
#        build.sh --check  print the same and exit 0 if built, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR   cache root (default $HOME/.cache/floe)
#   FLOE_PYTHON      the Python 3.11 that builds the wheels (default python3.11)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/images"
PYTHON="${FLOE_PYTHON:-python3.11}"
INSTALL_SCRIPT="$REPO/scripts/images/install-floe.sh"

base_image="$("$REPO/scripts/images/debian-base.sh")"

# The key: the base image's ID and the content of every file the images are made of.
key="$(
    cd "$REPO"
    {
        podman image inspect --format '{{.Id}}' "$base_image"
        find pyproject.toml operator optimizer_image operator.Dockerfile scripts/images/install-floe.sh \
            -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 |
            sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16
)"
OPERATOR_IMAGE="localhost/floe-operator:$key"
OPTIMIZER_IMAGE="localhost/floe-optimizer:$key"
OPERATOR_ARCHIVE="$CACHE_ROOT/archives/floe-operator-$key.tar"
OPTIMIZER_ARCHIVE="$CACHE_ROOT/archives/floe-optimizer-$key.tar"

LOG_TAG=floe-images
RESULT="$(printf 'FLOE_OPERATOR_IMAGE=%s\nFLOE_OPTIMIZER_IMAGE=%s\nFLOE_OPERATOR_ARCHIVE=%s\nFLOE_OPTIMIZER_ARCHIVE=%s' \
    "$OPERATOR_IMAGE" "$OPTIMIZER_IMAGE" "$OPERATOR_ARCHIVE" "$OPTIMIZER_ARCHIVE")"
is_built() {
    [[ -s "$OPERATOR_ARCHIVE" && -s "$OPTIMIZER_ARCHIVE" ]] &&
        podman image exists "$OPERATOR_IMAGE" && podman image exists "$OPTIMIZER_IMAGE"
}
# shellcheck source=scripts/lib/cached-build.sh
source "$REPO/scripts/lib/cached-build.sh"

cached_build_cli "$@"
cached_build_use_cache "key $key"
cached_build_lock

started=$SECONDS
work="$(mktemp -d "$CACHE_ROOT/.work-$key-XXXXXX")"
trap 'rm -rf "$work"' EXIT

deps_key="$(sha256sum "$REPO/pyproject.toml" "$INSTALL_SCRIPT" | sha256sum | cut -c1-16)"
deps_dir="$CACHE_ROOT/wheels-$deps_key"
if [[ ! -f "$deps_dir/.complete" ]]; then
    log "building the wheels of floe's dependencies (once per pyproject.toml) into $deps_dir"
    rm -rf "$deps_dir"
    PYTHON="$PYTHON" "$INSTALL_SCRIPT" wheels "$REPO" "$work/deps" optimizer
    rm -f "$work"/deps/floe-*.whl
    mv "$work/deps" "$deps_dir"
    touch "$deps_dir/.complete"
fi

log "building floe's wheel"
mkdir -p "$work/context/wheels"
"$PYTHON" -m pip wheel --no-deps --disable-pip-version-check -q --wheel-dir "$work/context/wheels" "$REPO"
cp -l "$deps_dir"/*.whl "$work/context/wheels/"

build_image() {
    local tag="$1" dockerfile="$2"
    log "building $tag"
    podman build --quiet --layers=false --build-arg "BASE_IMAGE=$base_image" \
        --build-context "wheels=$work/context" -f "$dockerfile" -t "$tag" "$REPO" >/dev/null
}
build_image "$OPERATOR_IMAGE" "$REPO/operator.Dockerfile"
build_image "$OPTIMIZER_IMAGE" "$REPO/optimizer_image/Dockerfile"

mkdir -p "$CACHE_ROOT/archives"
for pair in "$OPERATOR_IMAGE=$OPERATOR_ARCHIVE" "$OPTIMIZER_IMAGE=$OPTIMIZER_ARCHIVE"; do
    rm -f "${pair#*=}.tmp"
    podman save --format docker-archive -o "${pair#*=}.tmp" "${pair%%=*}"
    mv "${pair#*=}.tmp" "${pair#*=}"
done

# Images and archives of other keys are from older sources: drop them, so the cache stays one
# build's size.
for name in floe-operator floe-optimizer; do
    podman images --format '{{.Repository}}:{{.Tag}}' "localhost/$name" | grep -v ":$key\$" |
        xargs -r podman rmi >/dev/null 2>&1 || true
done
find "$CACHE_ROOT/archives" -name 'floe-*.tar' ! -name "*-$key.tar" -delete
find "$CACHE_ROOT" -maxdepth 1 -name 'wheels-*' ! -name "wheels-$deps_key" -exec rm -rf {} +

log "done in $((SECONDS - started))s: $OPERATOR_IMAGE ($(podman image inspect --format '{{.Size}}' "$OPERATOR_IMAGE") bytes)," \
    "$OPTIMIZER_IMAGE ($(podman image inspect --format '{{.Size}}' "$OPTIMIZER_IMAGE") bytes)"
echo "$RESULT"
