#!/usr/bin/env bash
# Builds, once, the binaries of the local Kubernetes control plane that tests/k8s runs:
#   kube-apiserver, kube-controller-manager, kube-scheduler  (module k8s.io/kubernetes)
#   kubelet, kubeadm, kube-proxy, kubectl                     (the same module: the kind node
#                                                             image of scripts/kind/ uses them)
#   etcd                                                      (module go.etcd.io/etcd/server/v3)
#   kwok                                                      (module sigs.k8s.io/kwok)
# plus share/kwok-stages.yaml, kwok's default node and pod lifecycle stages from the same module.
#
# Everything is built from source with the local Go toolchain through the Go module proxy
# (GOPROXY as configured; nothing else is downloaded). The result is cached under
#   ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/k8s/<versions-key>/{bin,share}
# and a run that finds it there does nothing else.
#
# Usage: build.sh          build if needed; print the bin directory on stdout
#        build.sh --check  print the bin directory and exit 0 if it is built, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR          cache root (default $HOME/.cache/floe)
#   FLOE_K8S_KUBE_VERSION   k8s.io/kubernetes tag (default below); staging modules use v0.<minor>.<patch>
#   FLOE_K8S_ETCD_VERSION   go.etcd.io/etcd/server/v3 tag
#   FLOE_K8S_KWOK_VERSION   sigs.k8s.io/kwok tag
#   FLOE_K8S_BUILD_JOBS     go build -p (default 2)
#   FLOE_K8S_BUILD_NICE     nice level of the go commands (default 19)
#   FLOE_K8S_KEEP_GO_BUILD_CACHE=1  keep Go's build cache (~3.6 GB) after a successful build; it makes
#                           a rebuild for other versions faster. The module cache (~1.4 GB) is always
#                           kept, so that a rebuild needs no download.
set -euo pipefail
shopt -u patsub_replacement 2>/dev/null || true # keep "&" literal in ${var//pattern/value}

KUBE_VERSION="${FLOE_K8S_KUBE_VERSION:-v1.33.13}"
ETCD_VERSION="${FLOE_K8S_ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${FLOE_K8S_KWOK_VERSION:-v0.8.0}"
# Bump when the way the binaries are built changes, so caches built the old way are not reused.
RECIPE_REVISION=2
# kwok v0.8.0 and etcd v3.6.16 declare `go 1.26.0`.
MIN_GO_VERSION=1.26.0
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubeadm kube-proxy kubectl etcd kwok)

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/k8s"
case "$(uname -m)" in
    x86_64) ARCH=amd64 ;;
    aarch64 | arm64) ARCH=arm64 ;;
    *) ARCH="$(uname -m)" ;;
esac
KEY="kube-${KUBE_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_linux-${ARCH}_r${RECIPE_REVISION}"
KEY_DIR="$CACHE_ROOT/$KEY"
BIN_DIR="$KEY_DIR/bin"

LOG_TAG=k8s-test-env
WHAT="the test control plane (kwok $KWOK_VERSION, etcd $ETCD_VERSION)"
RESULT="$BIN_DIR"
is_built() {
    [[ -f "$KEY_DIR/.complete" && -f "$KEY_DIR/share/kwok-stages.yaml" ]] || return 1
    local binary
    for binary in "${BINARIES[@]}"; do
        [[ -x "$BIN_DIR/$binary" ]] || return 1
    done
}
# shellcheck source=scripts/lib/go-build.sh
source "$SCRIPT_DIR/../lib/go-build.sh"

cached_build_cli "$@"
cached_build_use_cache
# The build cache is shared by all version keys and dropped after a successful build unless
# FLOE_K8S_KEEP_GO_BUILD_CACHE=1.
go_build_prepare "${FLOE_K8S_BUILD_JOBS:-2}" "${FLOE_K8S_BUILD_NICE:-19}"

WORK_DIR="$CACHE_ROOT/.work-$KEY-$$"
step="preparing"
on_exit() {
    local rc=$?
    if ((rc != 0)); then
        log "ERROR: failed while $step (exit code $rc)."
        log "Downloaded modules and compiled packages stay under $CACHE_ROOT/go, so a re-run resumes."
    fi
    rm -rf "$WORK_DIR"
}
trap on_exit EXIT
rm -rf "$WORK_DIR"
mkdir -p "$WORK_DIR/bin" "$WORK_DIR/share" "$WORK_DIR/src/kube" "$WORK_DIR/src/etcd"

started=$SECONDS
log "building $KEY with Go $go_version (GOPROXY=$(go env GOPROXY), go build -p=${FLOE_K8S_BUILD_JOBS:-2})"
log "work dir $WORK_DIR; module and build caches under $CACHE_ROOT/go"

# fill_template TEMPLATE OUT NAME=VALUE...: replaces each @NAME@ in TEMPLATE with VALUE.
fill_template() {
    local template="$1" out="$2" pair text
    shift 2
    text="$(<"$template")"
    for pair in "$@"; do
        text="${text//"@${pair%%=*}@"/"${pair#*=}"}"
    done
    if grep -v '^[[:space:]]*//' <<<"$text" | grep -q '@[A-Z_]*@'; then
        die "$template: a @FIELD@ was left unfilled"
    fi
    printf '%s\n' "$text" >"$out"
}

# ---------------------------------------------------------------------------------------------
step="resolving k8s.io/kubernetes@$KUBE_VERSION"
log "$step"
kube_gomod="$(download_field "k8s.io/kubernetes@$KUBE_VERSION" GoMod)"
[[ -f "$kube_gomod" ]] || die "could not download k8s.io/kubernetes@$KUBE_VERSION through the Go module proxy"
kube_info="${kube_gomod%.mod}.info"
staging_version="v0.${KUBE_VERSION#v1.}"
kube_go="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kube_gomod")"
kube_godebug="$(grep -E '^godebug ' "$kube_gomod" || true)"
staging_replaces="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*$#\t\1 => \1 '"$staging_version"'#p' "$kube_gomod")"
[[ -n "$staging_replaces" ]] || die "found no '=> ./staging/src/...' replaces in $kube_gomod"
log "k8s.io/kubernetes $KUBE_VERSION (go $kube_go): $(printf '%s\n' "$staging_replaces" | wc -l) staging modules pinned to $staging_version"

step="generating the kube wrapper module"
fill_template "$SCRIPT_DIR/kube/go.mod.in" "$WORK_DIR/src/kube/go.mod" \
    "GO_DIRECTIVE=$kube_go" "GODEBUG=$kube_godebug" "KUBE_VERSION=$KUBE_VERSION" \
    "STAGING_REPLACES=$staging_replaces"

step="resolving the kube wrapper module's dependencies (go mod tidy)"
log "$step"
(cd "$WORK_DIR/src/kube" && "${NICE[@]}" go mod tidy)

# What kubernetes' hack/lib/version.sh stamps into its release binaries; the build date is the
# tag's time from the proxy, so the same versions give the same binaries.
kube_minor="${KUBE_VERSION#v1.}"
kube_minor="${kube_minor%%.*}"
build_date="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$kube_info")"
build_date="${build_date%%.*}"
build_date="${build_date%Z}Z"
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
    kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

step="building kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubeadm, kube-proxy and kubectl"
log "$step (the long step: 10-20 minutes cold on 2 busy cores)"
t0=$SECONDS
(cd "$WORK_DIR/src/kube" && "${NICE[@]}" go build -tags=selinux,notest -ldflags="$kube_ldflags" \
    -o "$WORK_DIR/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kubeadm \
    k8s.io/kubernetes/cmd/kubectl)
log "kube binaries built in $((SECONDS - t0))s"

# ---------------------------------------------------------------------------------------------
step="resolving go.etcd.io/etcd/server/v3@$ETCD_VERSION"
log "$step"
etcd_gomod="$(download_field "go.etcd.io/etcd/server/v3@$ETCD_VERSION" GoMod)"
[[ -f "$etcd_gomod" ]] || die "could not download go.etcd.io/etcd/server/v3@$ETCD_VERSION through the Go module proxy"
etcd_go="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$etcd_gomod")"
fill_template "$SCRIPT_DIR/etcd/go.mod.in" "$WORK_DIR/src/etcd/go.mod" \
    "GO_DIRECTIVE=$etcd_go" "ETCD_VERSION=$ETCD_VERSION"
(cd "$WORK_DIR/src/etcd" && "${NICE[@]}" go mod tidy)

step="building etcd"
log "$step"
t0=$SECONDS
(cd "$WORK_DIR/src/etcd" && "${NICE[@]}" go build -ldflags="-s -w" -o "$WORK_DIR/bin/etcd" go.etcd.io/etcd/server/v3)
log "etcd built in $((SECONDS - t0))s"

# ---------------------------------------------------------------------------------------------
step="building kwok (go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION)"
log "$step"
t0=$SECONDS
(cd "$WORK_DIR" && GOBIN="$WORK_DIR/bin" "${NICE[@]}" go install -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
log "kwok built in $((SECONDS - t0))s"

# kwok does nothing without Stages; these are the defaults kwokctl gives it (node-initialize,
# node-heartbeat-with-lease, pod-ready, pod-complete, pod-delete), taken from the same module.
step="collecting kwok's default stages"
kwok_dir="$(download_field "sigs.k8s.io/kwok@$KWOK_VERSION" Dir)"
stage_dir="$kwok_dir/kustomize/stage"
{
    echo "# kwok's default Stages (as kwokctl configures them), from sigs.k8s.io/kwok@$KWOK_VERSION"
    first=1
    for stage in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
        pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
        [[ -f "$stage_dir/$stage" ]] || die "kwok $KWOK_VERSION has no $stage_dir/$stage"
        [[ $first == 1 ]] || echo "---"
        first=0
        cat "$stage_dir/$stage"
    done
} >"$WORK_DIR/share/kwok-stages.yaml"

# ---------------------------------------------------------------------------------------------
step="checking the binaries"
for binary in "${BINARIES[@]}"; do
    [[ -x "$WORK_DIR/bin/$binary" ]] || die "$binary was not built"
done
"$WORK_DIR/bin/kube-apiserver" --version >&2
# sed reads to the end: `head` would leave etcd writing into a closed pipe (SIGPIPE, exit 141)
"$WORK_DIR/bin/etcd" --version | sed -n 1p >&2
"$WORK_DIR/bin/kwok" --version >&2

{
    echo "kubernetes $KUBE_VERSION (staging modules $staging_version)"
    echo "etcd $ETCD_VERSION"
    echo "kwok $KWOK_VERSION"
    echo "go $go_version"
    echo "recipe revision $RECIPE_REVISION"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - started))s"
} >"$WORK_DIR/VERSIONS"

step="installing into $KEY_DIR"
rm -rf "$KEY_DIR"
touch "$WORK_DIR/.complete"
mv "$WORK_DIR" "$KEY_DIR"
if [[ "${FLOE_K8S_KEEP_GO_BUILD_CACHE:-0}" != 1 ]]; then
    rm -rf "$GOCACHE"
fi
log "done in $((SECONDS - started))s: $BIN_DIR ($(du -sh "$BIN_DIR" | cut -f1))"
for other in "$CACHE_ROOT"/kube-*; do
    if [[ -d "$other" && "$other" != "$KEY_DIR" ]]; then
        log "note: $other is from other versions and can be deleted"
    fi
done
echo "$BIN_DIR"
