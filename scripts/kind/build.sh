#!/usr/bin/env bash
# Builds, once, everything a local kind cluster needs on a host without a container registry:
#   kind           `go install sigs.k8s.io/kind@KIND_VERSION`
#   node image     localhost/floe-kindnode:<kube version>-<key>, made of
#     base image     kind's base image (images/base of the sigs.k8s.io/kind module: its files/,
#                    our base/Containerfile) rebuilt on localhost/floe-debian-base
#                    (scripts/images/debian-base.sh) with Debian's containerd and runc, plus crictl and
#                    the CNI plugins ptp, bridge, host-local, loopback, portmap built with Go;
#     node binaries  kubelet, kubeadm, kubectl of scripts/k8s-test-env/build.sh;
#     images         the control-plane images `kubeadm config images list` names (kube-apiserver,
#                    kube-controller-manager, kube-scheduler, kube-proxy, etcd, coredns, pause), built
#                    from the k8s-test-env binaries, CoreDNS built from source with only the plugins
#                    in COREDNS_PLUGINS, pause from kubernetes' build/pause/linux/pause.c (static,
#                    gcc), imported into containerd at node boot;
#     node/          a ptp CNI config (the cluster has no kindnetd) and the image import unit.
# Go code comes from the Go module proxy (the module cache of scripts/k8s-test-env/build.sh is
# tried first); apt packages from Debian's archive; nothing else is downloaded.
#
# Cached: kind under ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/kind/kind-<version>, the Go-built tools
# under .../kind/tools/<key>, the images in podman's storage, tagged with content keys made of the
# versions, RECIPE_REVISION and a hash of this directory's input files (base/, images/, node/).
# A run that finds everything does nothing else.
#
# Usage: build.sh          build what is missing; print, on stdout, shell assignments to eval:
#                            FLOE_KIND_BIN=<kind binary>
#                            FLOE_KIND_KUBECTL=<kubectl of the node's Kubernetes version>
#                            FLOE_KIND_NODE_IMAGE=<node image>
#        build.sh --check  print the same and exit 0 if everything is built, else exit 1
# Progress and errors go to stderr. Needs root (rootful podman), podman, gcc, Go; see
# scripts/host/podman.sh.
#
# Environment:
#   FLOE_CACHE_DIR          cache root (default $HOME/.cache/floe)
#   FLOE_KIND_NODE_IMAGE    use this node image (e.g. kindest/node:v1.33.x where Docker can pull it)
#                           instead of building one; it is printed as given
#   FLOE_K8S_KUBE_VERSION   Kubernetes version (shared with scripts/k8s-test-env/build.sh)
#   FLOE_KIND_BUILD_JOBS    go build -p (default 2)
#   FLOE_KIND_BUILD_NICE    nice level of the builds (default 10)
set -euo pipefail

KUBE_VERSION="${FLOE_K8S_KUBE_VERSION:-v1.33.13}"
KIND_VERSION=v0.29.0
# kind v0.29.0's base image uses crictl v1.33.0, which the module proxy here does not serve;
# crictl speaks CRI v1 to any containerd, so v1.34.0 does.
CRICTL_VERSION=v1.34.0
CNI_PLUGINS_VERSION=v1.7.1
CNI_PLUGINS=(main/ptp main/bridge ipam/host-local main/loopback meta/portmap)
# What kubeadm v1.33 deploys; checked against `kubeadm config images list` at build time.
COREDNS_VERSION=v1.12.0
# kubeadm's Corefile uses errors, health, ready, kubernetes, prometheus (plugin/metrics), forward,
# cache, loop, reload and loadbalance; log, hosts, rewrite and template are small and the ones
# a Corefile edited by hand most often adds.
COREDNS_PLUGINS=(errors health ready kubernetes metrics forward cache loop reload loadbalance
    log hosts rewrite template)
# Bump when the way anything here is built changes, so results built the old way are not reused.
RECIPE_REVISION=1
MIN_GO_VERSION=1.24.1

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_BASE="${FLOE_CACHE_DIR:-$HOME/.cache/floe}"
CACHE_ROOT="$CACHE_BASE/kind"
KIND_DIR="$CACHE_ROOT/kind-$KIND_VERSION"
KIND_BIN="$KIND_DIR/kind"
LOG_TAG=kind-build
WHAT="kind $KIND_VERSION"
JOBS="${FLOE_KIND_BUILD_JOBS:-2}"

mode=build
[[ "${1:-}" == --check ]] && mode=check

kind_built() { [[ -x "$KIND_BIN" && "$(cat "$KIND_DIR/.complete" 2>/dev/null)" == "recipe $RECIPE_REVISION" ]]; }

# sha KEY-MATERIAL...: a short hash of its arguments.
short_hash() { printf '%s\n' "$@" | sha256sum | cut -c1-12; }
# files_hash DIR...: a hash of the names and contents of the files under DIRs (of this directory).
files_hash() {
    (cd "$SCRIPT_DIR" && find "$@" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-12
}

K8S_BIN=""
DEBIAN_BASE=""
NODE_IMAGE="${FLOE_KIND_NODE_IMAGE:-}"
TOOLS_KEY="crictl-${CRICTL_VERSION}_cni-${CNI_PLUGINS_VERSION}_coredns-${COREDNS_VERSION}-$(short_hash "${COREDNS_PLUGINS[@]}")_kube-${KUBE_VERSION}_r${RECIPE_REVISION}"
TOOLS_DIR="$CACHE_ROOT/tools/$TOOLS_KEY"
BASE_IMAGE=""

# The keys of the images; the node key needs the k8s-test-env binaries (K8S_BIN).
compute_keys() {
    local base_key node_key
    base_key="$(short_hash "$DEBIAN_BASE" "$KIND_VERSION" "$TOOLS_KEY" "$RECIPE_REVISION" "$(files_hash base)")"
    BASE_IMAGE="localhost/floe-kindbase:$base_key"
    if [[ -n "$K8S_BIN" && -z "${FLOE_KIND_NODE_IMAGE:-}" ]]; then
        node_key="$(short_hash "$BASE_IMAGE" "$KUBE_VERSION" "$(basename "$(dirname "$K8S_BIN")")" \
            "$RECIPE_REVISION" "$(files_hash images node)")"
        NODE_IMAGE="localhost/floe-kindnode:$KUBE_VERSION-$node_key"
    fi
}

result() {
    printf 'FLOE_KIND_BIN=%q\nFLOE_KIND_KUBECTL=%q\nFLOE_KIND_NODE_IMAGE=%q\n' \
        "$KIND_BIN" "$K8S_BIN/kubectl" "$NODE_IMAGE"
}
is_built() {
    kind_built && [[ -n "$K8S_BIN" && -n "$NODE_IMAGE" ]] || return 1
    [[ -n "${FLOE_KIND_NODE_IMAGE:-}" ]] || podman image exists "$NODE_IMAGE"
}
RESULT=""
# shellcheck source=scripts/lib/go-build.sh
source "$SCRIPT_DIR/../lib/go-build.sh"

case "${1:-}" in
    "" | --check) ;;
    *) cached_build_cli "$@" ;; # --help, or an unknown argument
esac

# What is already there, without building: the k8s-test-env binaries and the Debian base.
K8S_BIN="$("$SCRIPT_DIR/../k8s-test-env/build.sh" --check 2>/dev/null)" || K8S_BIN=""
if [[ -z "${FLOE_KIND_NODE_IMAGE:-}" ]]; then
    command -v podman >/dev/null || die "podman is not on PATH (run scripts/host/podman.sh as root)"
    if [[ $mode == check ]]; then
        DEBIAN_BASE="$("$SCRIPT_DIR/../images/debian-base.sh" --check 2>/dev/null)" || exit 1
    else
        DEBIAN_BASE="$("$SCRIPT_DIR/../images/debian-base.sh")"
    fi
    compute_keys
fi
RESULT="$(result)"
cached_build_cli "$@"
if is_built; then
    log "cached: $NODE_IMAGE, $KIND_BIN"
    echo "$RESULT"
    exit 0
fi

# ---------------------------------------------------------------------------------------------
go_build_prepare "$JOBS" "${FLOE_KIND_BUILD_NICE:-10}"
K8S_GOMOD_DOWNLOAD="$CACHE_BASE/k8s/go/pkg/mod/cache/download"
if [[ -d "$K8S_GOMOD_DOWNLOAD" ]]; then
    GOPROXY="file://$K8S_GOMOD_DOWNLOAD,$(go env GOPROXY)"
    export GOPROXY
fi

WORK_DIR="$CACHE_ROOT/.work-$$"
step="preparing"
on_exit() {
    local rc=$?
    if ((rc != 0)); then
        log "ERROR: failed while $step (exit code $rc); finished pieces stay cached, so a re-run resumes"
    else
        rm -rf "$GOCACHE" # compiled packages (GBs); the module cache stays, so a rebuild downloads nothing
    fi
    rm -rf "$WORK_DIR"
}
trap on_exit EXIT
rm -rf "$WORK_DIR"
mkdir -p "$WORK_DIR"
started=$SECONDS
log "Go $go_version, GOPROXY=$GOPROXY, go build -p=$JOBS"

# podman_build TAG CONTAINERFILE CONTEXT [BUILD-ARG...]
podman_build() {
    local tag="$1" file="$2" context="$3" arg args=()
    shift 3
    for arg in "$@"; do args+=(--build-arg "$arg"); done
    "${NICE[@]}" podman build --pull=never --network=host -f "$file" "${args[@]}" -t "$tag" "$context" >&2
}

# ---------------------------------------------------------------------------------------------
if ! kind_built; then
    step="building kind $KIND_VERSION"
    log "$step"
    t0=$SECONDS
    mkdir -p "$WORK_DIR/kind"
    (cd "$WORK_DIR" && GOBIN="$WORK_DIR/kind" "${NICE[@]}" go install -ldflags="-s -w" "sigs.k8s.io/kind@$KIND_VERSION")
    "$WORK_DIR/kind/kind" version >&2
    rm -rf "$KIND_DIR"
    mkdir -p "$KIND_DIR"
    mv "$WORK_DIR/kind/kind" "$KIND_BIN"
    echo "recipe $RECIPE_REVISION" >"$KIND_DIR/.complete"
    log "kind built in $((SECONDS - t0))s: $KIND_BIN"
fi
if [[ -n "${FLOE_KIND_NODE_IMAGE:-}" ]]; then
    [[ -n "$K8S_BIN" ]] || K8S_BIN="$("$SCRIPT_DIR/../k8s-test-env/build.sh")"
    log "node image from FLOE_KIND_NODE_IMAGE: $NODE_IMAGE (not built)"
    result
    exit 0
fi
command -v gcc >/dev/null || die "gcc is not on PATH (run scripts/host/podman.sh as root)"

# ---------------------------------------------------------------------------------------------
# crictl, the CNI plugins, CoreDNS, pause
if [[ ! -f "$TOOLS_DIR/.complete" ]]; then
    t0=$SECONDS
    tools="$WORK_DIR/tools"
    mkdir -p "$tools/bin" "$tools/cni"
    step="building crictl $CRICTL_VERSION"
    log "$step"
    (cd "$WORK_DIR" && GOBIN="$tools/bin" "${NICE[@]}" go install \
        -ldflags="-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION#v}" \
        "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION")

    step="building the CNI plugins $CNI_PLUGINS_VERSION (${CNI_PLUGINS[*]})"
    log "$step"
    packages=()
    for plugin in "${CNI_PLUGINS[@]}"; do
        packages+=("github.com/containernetworking/plugins/plugins/$plugin@$CNI_PLUGINS_VERSION")
    done
    (cd "$WORK_DIR" && GOBIN="$tools/cni" "${NICE[@]}" go install \
        -ldflags="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" \
        "${packages[@]}")

    step="building CoreDNS $COREDNS_VERSION"
    log "$step"
    coredns_dir="$(download_field "github.com/coredns/coredns@$COREDNS_VERSION" Dir)"
    [[ -d "$coredns_dir" ]] || die "could not download github.com/coredns/coredns@$COREDNS_VERSION"
    cp -r "$coredns_dir" "$WORK_DIR/coredns-src"
    chmod -R u+w "$WORK_DIR/coredns-src"
    # Only the plugins in COREDNS_PLUGINS are linked in: the full set pulls in the cloud SDKs
    # (route53, azure, clouddns) and etcd, 1.6 times the CPU time to build (253 s against 158).
    {
        echo "// The plugins scripts/kind/build.sh builds CoreDNS with (COREDNS_PLUGINS)."
        echo
        echo "package plugin"
        echo
        echo "import ("
        for plugin in "${COREDNS_PLUGINS[@]}"; do
            [[ -d "$WORK_DIR/coredns-src/plugin/$plugin" ]] || die "CoreDNS $COREDNS_VERSION has no plugin/$plugin"
            echo "	_ \"github.com/coredns/coredns/plugin/$plugin\""
        done
        echo ")"
    } >"$WORK_DIR/coredns-src/core/plugin/zplugin.go"
    (cd "$WORK_DIR/coredns-src" && "${NICE[@]}" go build -ldflags="-s -w" -o "$tools/bin/coredns" .)
    "$tools/bin/coredns" -version >&2

    step="building pause from k8s.io/kubernetes@$KUBE_VERSION build/pause/linux/pause.c"
    log "$step"
    kube_dir="$CACHE_BASE/k8s/go/pkg/mod/k8s.io/kubernetes@$KUBE_VERSION"
    [[ -f "$kube_dir/build/pause/linux/pause.c" ]] || kube_dir="$(download_field "k8s.io/kubernetes@$KUBE_VERSION" Dir)"
    pause_c="$kube_dir/build/pause/linux/pause.c"
    [[ -f "$pause_c" ]] || die "found no $pause_c"
    pause_tag="$(sed -n 's/^TAG ?= *//p' "$kube_dir/build/pause/Makefile")"
    "${NICE[@]}" gcc -Os -Wall -Werror -static -DVERSION="v${pause_tag:-unknown}-floe" -o "$tools/bin/pause" "$pause_c"
    strip "$tools/bin/pause"
    "$tools/bin/pause" -v >&2

    {
        echo "crictl $CRICTL_VERSION, CNI plugins $CNI_PLUGINS_VERSION, CoreDNS $COREDNS_VERSION"
        echo "pause v$pause_tag from k8s.io/kubernetes@$KUBE_VERSION; go $go_version"
        echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - t0))s"
    } >"$tools/VERSIONS"
    touch "$tools/.complete"
    rm -rf "$TOOLS_DIR"
    mkdir -p "$(dirname "$TOOLS_DIR")"
    mv "$tools" "$TOOLS_DIR"
    log "tools built in $((SECONDS - t0))s: $TOOLS_DIR"
fi

# ---------------------------------------------------------------------------------------------
if ! podman image exists "$BASE_IMAGE"; then
    step="building the kind base image $BASE_IMAGE"
    log "$step (on $DEBIAN_BASE)"
    t0=$SECONDS
    kind_dir="$(download_field "sigs.k8s.io/kind@$KIND_VERSION" Dir)"
    [[ -d "$kind_dir/images/base/files" ]] || die "sigs.k8s.io/kind@$KIND_VERSION has no images/base/files"
    ctx="$WORK_DIR/base"
    mkdir -p "$ctx"
    cp -r "$kind_dir/images/base/files" "$ctx/kind-files"
    chmod -R u+w "$ctx/kind-files"
    cp -r "$TOOLS_DIR/cni" "$ctx/cni"
    mkdir -p "$ctx/bin"
    cp "$TOOLS_DIR/bin/crictl" "$ctx/bin/"
    podman_build "$BASE_IMAGE" "$SCRIPT_DIR/base/Containerfile" "$ctx" "DEBIAN_BASE=$DEBIAN_BASE"
    rm -rf "$ctx"
    log "base image built in $((SECONDS - t0))s: $BASE_IMAGE"
fi

# ---------------------------------------------------------------------------------------------
[[ -n "$K8S_BIN" ]] || {
    step="waiting for / building the Kubernetes binaries (scripts/k8s-test-env/build.sh)"
    log "$step"
    K8S_BIN="$("$SCRIPT_DIR/../k8s-test-env/build.sh")"
    compute_keys
}
if podman image exists "$NODE_IMAGE"; then
    log "done in $((SECONDS - started))s"
    result
    exit 0
fi

step="building the control-plane images"
log "$step"
t0=$SECONDS
mapfile -t image_tags < <("$K8S_BIN/kubeadm" config images list --kubernetes-version "$KUBE_VERSION")
((${#image_tags[@]} > 0)) || die "kubeadm config images list printed nothing"
for tag in "${image_tags[@]}"; do
    name="${tag%:*}"
    name="${name##*/}"
    ctx="$WORK_DIR/image-$name"
    mkdir -p "$ctx"
    case "$name" in
        kube-apiserver | kube-controller-manager | kube-scheduler | etcd)
            cp "$K8S_BIN/$name" "$ctx/"
            podman_build "$tag" "$SCRIPT_DIR/images/binary.Containerfile" "$ctx" \
                "DEBIAN_BASE=$DEBIAN_BASE" "BINARY=$name"
            ;;
        kube-proxy)
            cp "$K8S_BIN/kube-proxy" "$ctx/"
            podman_build "$tag" "$SCRIPT_DIR/images/kube-proxy.Containerfile" "$ctx" "DEBIAN_BASE=$DEBIAN_BASE"
            ;;
        coredns)
            [[ "${tag##*:}" == "$COREDNS_VERSION" ]] || die "kubeadm wants $tag; this script builds CoreDNS $COREDNS_VERSION"
            cp "$TOOLS_DIR/bin/coredns" "$ctx/"
            podman_build "$tag" "$SCRIPT_DIR/images/coredns.Containerfile" "$ctx" "DEBIAN_BASE=$DEBIAN_BASE"
            ;;
        pause)
            cp "$TOOLS_DIR/bin/pause" "$ctx/"
            podman_build "$tag" "$SCRIPT_DIR/images/pause.Containerfile" "$ctx"
            ;;
        *) die "kubeadm lists an image this script cannot build: $tag" ;;
    esac
    rm -rf "$ctx"
    log "  $tag"
done
log "control-plane images built in $((SECONDS - t0))s"

step="building the node image $NODE_IMAGE"
log "$step"
t0=$SECONDS
ctx="$WORK_DIR/node"
mkdir -p "$ctx/images"
cp "$SCRIPT_DIR"/node/* "$ctx/"
rm "$ctx/Containerfile"
cp "$K8S_BIN/kubelet" "$K8S_BIN/kubeadm" "$K8S_BIN/kubectl" "$ctx/"
"${NICE[@]}" podman save -m --format docker-archive -o "$ctx/images/control-plane.tar" "${image_tags[@]}"
podman_build "$NODE_IMAGE" "$SCRIPT_DIR/node/Containerfile" "$ctx" \
    "KIND_BASE=$BASE_IMAGE" "KUBE_VERSION=$KUBE_VERSION"
rm -rf "$ctx"
# The node image holds them; podman's copies would only take space.
podman rmi "${image_tags[@]}" >/dev/null 2>&1 || true
log "node image built in $((SECONDS - t0))s: $NODE_IMAGE ($(podman image inspect --format '{{.Size}}' "$NODE_IMAGE") bytes)"

while read -r other; do
    [[ "$other" == "$NODE_IMAGE" ]] || log "note: $other is from another recipe and can be removed (podman rmi $other)"
done < <(podman images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/floe-kind(node|base):' | grep -v -x -F "$BASE_IMAGE" || true)
log "done in $((SECONDS - started))s"
result
