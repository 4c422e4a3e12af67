#!/usr/bin/env bash
# Builds, once, the helm (v3) CLI that the chart's tests (tests/k8s/test_chart.py) run, from source
# through the Go module proxy (`go install helm.sh/helm/v3/cmd/helm@VERSION`; nothing else is
# downloaded). The result is cached as
#   ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/helm/<version>/helm
# and a run that finds it there does nothing else.
#
# Usage: build.sh          build if needed; print the helm binary's path on stdout
#        build.sh --check  print the path and exit 0 if it is built, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR        cache root (default $HOME/.cache/floe)
#   FLOE_HELM_VERSION     helm.sh/helm/v3 tag (default below)
#   FLOE_HELM_BUILD_JOBS  go build -p (default 1: the machine is shared)
#   FLOE_HELM_BUILD_NICE  nice level of the go commands (default 19)
set -euo pipefail

HELM_VERSION="${FLOE_HELM_VERSION:-v3.22.0}"
# Bump when the way helm is built changes, so a binary built the old way is rebuilt.
RECIPE_REVISION=2
# helm v3.21+ declares `go 1.26.0`.
MIN_GO_VERSION=1.26.0

CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/helm"
TARGET_DIR="$CACHE_ROOT/$HELM_VERSION"
HELM="$TARGET_DIR/helm"
LOG_TAG=helm-build
WHAT="helm $HELM_VERSION"
RESULT="$HELM"
is_built() { [[ -x "$HELM" && "$(cat "$TARGET_DIR/.complete" 2>/dev/null)" == "recipe $RECIPE_REVISION" ]]; }
# shellcheck source=scripts/lib/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/go-build.sh"

cached_build_cli "$@"
cached_build_use_cache
go_build_prepare "${FLOE_HELM_BUILD_JOBS:-1}" "${FLOE_HELM_BUILD_NICE:-19}"

WORK_DIR="$CACHE_ROOT/.work-$HELM_VERSION-$$"
on_exit() {
    local rc=$?
    rm -rf "$WORK_DIR"
    if ((rc != 0)); then
        log "ERROR: build failed (exit code $rc); the module cache stays under $GOMODCACHE, so a re-run resumes"
    fi
}
trap on_exit EXIT
mkdir -p "$WORK_DIR"

started=$SECONDS
log "building helm $HELM_VERSION with Go $go_version (GOPROXY=$(go env GOPROXY), go build -p=${FLOE_HELM_BUILD_JOBS:-1})"
# What helm's Makefile stamps in: the version `helm version` prints, and the Kubernetes version
# `helm template` and `helm lint` assume without a cluster (else v1.20, which charts needing a newer
# one refuse): one minor above the k8s.io/client-go helm is built with, as its Makefile computes it.
helm_gomod="$(cd "$WORK_DIR" && "${NICE[@]}" go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
[[ -f "$helm_gomod" ]] || die "could not download helm.sh/helm/v3@$HELM_VERSION through the Go module proxy"
client_go="$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v\([0-9]*\)\.\([0-9]*\)\..*$/\1 \2/p' "$helm_gomod")"
read -r client_go_major client_go_minor <<<"$client_go"
[[ -n "${client_go_minor:-}" ]] || die "found no k8s.io/client-go requirement in $helm_gomod"
kube_major=$((client_go_major + 1))
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=$kube_major -X $pkg.k8sVersionMinor=$client_go_minor"
done
log "default Kubernetes version of helm template/lint: v$kube_major.$client_go_minor"
(cd "$WORK_DIR" && GOBIN="$WORK_DIR" "${NICE[@]}" go install -ldflags="$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
"$WORK_DIR/helm" version --short >&2

rm -rf "$TARGET_DIR"
mkdir -p "$TARGET_DIR"
mv "$WORK_DIR/helm" "$HELM"
echo "helm $HELM_VERSION, go $go_version, built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - started))s" \
    >"$TARGET_DIR/VERSION"
echo "recipe $RECIPE_REVISION" >"$TARGET_DIR/.complete"
rm -rf "$GOCACHE" # ~1 GB of compiled packages; the module cache stays so that a rebuild downloads nothing
log "done in $((SECONDS - started))s: $HELM"
echo "$HELM"
