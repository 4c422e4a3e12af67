#!/usr/bin/env bash
# Brings a local single-node kind cluster up or down (`make cluster`, debugging, e2e tests).
#
# up NAME    sets the host up (scripts/host/podman.sh), builds what is missing
#            (scripts/kind/build.sh), saves the host sysctls the node changes
#            (scripts/kind/host-sysctls.sh), creates the cluster from scripts/kind/cluster.yaml,
#            makes its node refuse unrouted Service IPs (scripts/kind/reject-unrouted-services.sh),
#            waits for the node to be Ready and CoreDNS to be rolled out, and prints the path of
#            its kubeconfig, ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/kind/NAME.kubeconfig.
#            An existing cluster NAME is reused (its kubeconfig is rewritten, the waits repeated).
# down NAME  deletes the cluster, removes the podman network "kind" once no kind cluster is left,
#            and writes the saved host sysctls back (once no kind cluster is left).
#
# kind runs with the docker provider when `docker` is on PATH and its daemon answers, else with podman
# (KIND_EXPERIMENTAL_PROVIDER=podman); an explicit KIND_EXPERIMENTAL_PROVIDER is kept.
# Progress and errors go to stderr; `up` prints only the kubeconfig path on stdout.
#
# Environment:
#   FLOE_CACHE_DIR         cache root (default $HOME/.cache/floe)
#   FLOE_KIND_NODE_IMAGE   node image to use instead of building one (see build.sh)
#   FLOE_KIND_WAIT         how long to wait for the node and CoreDNS (default 180s)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE_DIR="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/kind"
CONFIG="$SCRIPT_DIR/cluster.yaml"
WAIT="${FLOE_KIND_WAIT:-180s}"

LOG_TAG=kind-cluster
# shellcheck source=scripts/lib/cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cached-build.sh" # log, die
usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit "${1:-2}"
}

[[ "${1:-}" == -h || "${1:-}" == --help ]] && usage 0
(($# == 2)) || usage
action="$1" name="$2"
[[ "$name" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || die "invalid cluster name: $name"
KUBECONFIG_FILE="$STATE_DIR/$name.kubeconfig"
SYSCTLS_FILE="$STATE_DIR/$name.sysctls"

# A docker CLI without a reachable daemon does not count.
if [[ -z "${KIND_EXPERIMENTAL_PROVIDER:-}" ]] && ! { command -v docker >/dev/null && docker info >/dev/null 2>&1; }; then
    export KIND_EXPERIMENTAL_PROVIDER=podman
fi
provider="${KIND_EXPERIMENTAL_PROVIDER:-docker}"

# other_clusters: the kind clusters other than NAME.
other_clusters() { "$FLOE_KIND_BIN" get clusters 2>/dev/null | grep -v -x -F "$name" || true; }

# The host state kept while clusters run: the podman network and the original sysctls.
release_host() {
    local others other_file
    others="$(other_clusters)"
    if [[ -n "$others" ]]; then
        log "other kind clusters remain ($(echo "$others" | tr '\n' ' ')): the host sysctls and network stay"
        # The first cluster's file has the original values: hand it on rather than lose them.
        if [[ -f "$SYSCTLS_FILE" ]]; then
            other_file="$STATE_DIR/$(echo "$others" | head -n1).sysctls"
            [[ -f "$other_file" ]] || mv "$SYSCTLS_FILE" "$other_file"
            rm -f "$SYSCTLS_FILE"
        fi
        return 0
    fi
    if [[ "$provider" == podman ]] && podman network exists kind 2>/dev/null; then
        log "removing the podman network kind"
        podman network rm kind >/dev/null
    fi
    if [[ -f "$SYSCTLS_FILE" ]]; then
        "$SCRIPT_DIR/host-sysctls.sh" restore "$SYSCTLS_FILE"
        rm -f "$SYSCTLS_FILE"
    fi
}

wait_ready() {
    log "waiting for the node to be Ready and CoreDNS to be rolled out (up to $WAIT each)"
    "$FLOE_KIND_KUBECTL" --kubeconfig "$KUBECONFIG_FILE" wait node --all --for=condition=Ready --timeout="$WAIT" >&2
    "$FLOE_KIND_KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n kube-system rollout status deployment/coredns \
        --timeout="$WAIT" >&2
}

case "$action" in
    up)
        if [[ "$provider" == podman || -z "${FLOE_KIND_NODE_IMAGE:-}" ]]; then
            "$SCRIPT_DIR/../host/podman.sh"
        fi
        eval "$("$SCRIPT_DIR/build.sh")"
        mkdir -p "$STATE_DIR"
        if "$FLOE_KIND_BIN" get clusters 2>/dev/null | grep -q -x -F "$name"; then
            log "cluster $name exists; reusing it"
            "$FLOE_KIND_BIN" export kubeconfig --name "$name" --kubeconfig "$KUBECONFIG_FILE" >&2
        else
            # Save the original values: another running cluster's file has them, the host may not.
            saved="$(find "$STATE_DIR" -maxdepth 1 -name '*.sysctls' ! -name "$name.sysctls" | head -n1)"
            if [[ -n "$saved" && -n "$(other_clusters)" ]]; then
                cp "$saved" "$SYSCTLS_FILE"
            elif [[ ! -f "$SYSCTLS_FILE" ]]; then
                "$SCRIPT_DIR/host-sysctls.sh" save "$SYSCTLS_FILE"
            fi
            log "creating kind cluster $name ($provider provider, image $FLOE_KIND_NODE_IMAGE)"
            started=$SECONDS
            rm -f "$KUBECONFIG_FILE"
            if ! "$FLOE_KIND_BIN" create cluster --name "$name" --image "$FLOE_KIND_NODE_IMAGE" \
                --config "$CONFIG" --kubeconfig "$KUBECONFIG_FILE" --wait "$WAIT" >&2; then
                log "ERROR: kind create cluster failed; cleaning up"
                "$FLOE_KIND_BIN" delete cluster --name "$name" --kubeconfig "$KUBECONFIG_FILE" >&2 || true
                rm -f "$KUBECONFIG_FILE"
                release_host
                exit 1
            fi
            log "cluster created in $((SECONDS - started))s"
        fi
        "$SCRIPT_DIR/reject-unrouted-services.sh" "$name-control-plane"
        wait_ready
        log "cluster $name is up; export KUBECONFIG=$KUBECONFIG_FILE"
        echo "$KUBECONFIG_FILE"
        ;;
    down)
        # Only kind itself is needed: use the built binary, building nothing.
        if built="$("$SCRIPT_DIR/build.sh" --check 2>/dev/null)"; then
            eval "$built"
        else
            FLOE_KIND_BIN="$(find "${FLOE_CACHE_DIR:-$HOME/.cache/floe}/kind" -maxdepth 2 -path '*/kind-v*/kind' -type f | sort -V | tail -n1)"
            [[ -x "$FLOE_KIND_BIN" ]] || FLOE_KIND_BIN="$(command -v kind || true)"
            [[ -x "$FLOE_KIND_BIN" ]] || die "no kind binary: run scripts/kind/build.sh"
        fi
        started=$SECONDS
        if "$FLOE_KIND_BIN" get clusters 2>/dev/null | grep -q -x -F "$name"; then
            log "deleting kind cluster $name"
            "$FLOE_KIND_BIN" delete cluster --name "$name" --kubeconfig "$KUBECONFIG_FILE" >&2
        else
            log "no kind cluster $name"
        fi
        rm -f "$KUBECONFIG_FILE"
        release_host
        log "down in $((SECONDS - started))s"
        ;;
    *) usage ;;
esac
