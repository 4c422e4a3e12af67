#!/usr/bin/env bash
# Puts floe into a kind cluster made by scripts/kind/cluster.sh (`make cluster`): builds floe's two
# images from this checkout (scripts/images/build.sh, cached by content), loads them into the
# cluster's node with `kind load image-archive`, and installs or upgrades the Helm chart
# (charts/floe) with them, as release "floe" in namespace floe-system, waiting until the
# operator is Ready. The CRDs are applied first: Helm installs a chart's CRDs once and never
# upgrades them, so a checkout with changed CRDs would otherwise meet the old ones. The operator
# serves namespace analytics, the demo's (examples/kind/, make cluster-catalog), which is made
# first: the chart puts the operator's Role and the drivers' ServiceAccount there.
#
# Usage: deploy-floe.sh NAME [HELM ARGS...]   e.g. deploy-floe.sh floe --set 'watchNamespaces={analytics,team-b}'
# (a namespace named in HELM ARGS must exist already).
# Progress and errors go to stderr; the kubeconfig is ${FLOE_CACHE_DIR:-$HOME/.cache/floe}/kind/NAME.kubeconfig.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
(($# >= 1)) || {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}
name="$1"
shift
kubeconfig="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/kind/$name.kubeconfig"
[[ -f "$kubeconfig" ]] || {
    echo "deploy-floe.sh: no kubeconfig for cluster $name; run scripts/kind/cluster.sh up $name first" >&2
    exit 1
}
if [[ -z "${KIND_EXPERIMENTAL_PROVIDER:-}" ]] && ! { command -v docker >/dev/null && docker info >/dev/null 2>&1; }; then
    export KIND_EXPERIMENTAL_PROVIDER=podman
fi

eval "$("$SCRIPT_DIR/build.sh" --check)"
eval "$("$REPO/scripts/images/build.sh")"
helm="$("$REPO/scripts/helm/build.sh")"
"$FLOE_KIND_KUBECTL" --kubeconfig "$kubeconfig" apply --server-side --force-conflicts \
    -f "$REPO/charts/floe/crds/" >&2
"$FLOE_KIND_KUBECTL" --kubeconfig "$kubeconfig" create namespace analytics --dry-run=client -o yaml |
    "$FLOE_KIND_KUBECTL" --kubeconfig "$kubeconfig" apply -f - >&2
for archive in "$FLOE_OPERATOR_ARCHIVE" "$FLOE_OPTIMIZER_ARCHIVE"; do
    "$FLOE_KIND_BIN" load image-archive "$archive" --name "$name" >&2
done
"$helm" upgrade --install floe "$REPO/charts/floe" --kubeconfig "$kubeconfig" \
    --namespace floe-system --create-namespace \
    --set "image.repository=${FLOE_OPERATOR_IMAGE%:*}" --set-string "image.tag=${FLOE_OPERATOR_IMAGE##*:}" \
    --set image.pullPolicy=Never \
    --set "optimizerImage.repository=${FLOE_OPTIMIZER_IMAGE%:*}" --set-string "optimizerImage.tag=${FLOE_OPTIMIZER_IMAGE##*:}" \
    --set 'watchNamespaces={analytics}' \
    --wait --timeout 5m "$@" >&2
echo "floe is installed in cluster $name: export KUBECONFIG=$kubeconfig" >&2
