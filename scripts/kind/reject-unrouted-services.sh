#!/usr/bin/env bash
# Makes a kind node refuse TCP connections to Service IPs that kube-proxy has not routed (yet).
#
# usage: reject-unrouted-services.sh NODE_CONTAINER [SERVICE_CIDR]   (default 10.96.0.0/16, kind's)
#
# A connection to a ClusterIP that kube-proxy has not programmed leaves the node by its default
# route. On a plain network that goes nowhere and the caller retries; behind an intercepting
# proxy (such as this CI machine's), the proxy answers it, and the API server's aggregation
# layer keeps that connection alive: an APIService created a moment before kube-proxy routes its
# Service then fails its checks with the proxy's 404 for as long as the connection lives. A reset
# instead makes the caller dial again, as on a real network. The rules run after kube-proxy's
# DNAT (nat hooks at priority -100, these at 0), so a routed Service never meets them.
set -euo pipefail

(($# >= 1 && $# <= 2)) || {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}
node="$1" cidr="${2:-10.96.0.0/16}"
runtime=docker
[[ "${KIND_EXPERIMENTAL_PROVIDER:-}" == podman ]] && runtime=podman
"$runtime" exec -i "$node" nft -f - <<NFT
table inet floe_unrouted_services
delete table inet floe_unrouted_services
table inet floe_unrouted_services {
    chain output {
        type filter hook output priority 0; policy accept;
        ip daddr $cidr meta l4proto tcp reject with tcp reset
    }
    chain forward {
        type filter hook forward priority 0; policy accept;
        ip daddr $cidr meta l4proto tcp reject with tcp reset
    }
}
NFT
