# shellcheck shell=bash
# What scripts/helm/build.sh and scripts/k8s-test-env/build.sh share: building Go binaries once,
# from source through the Go module proxy, into a cache that a later run finds and uses.
#
# Source it after setting what scripts/lib/cached-build.sh asks for, plus:
#   MIN_GO_VERSION   the oldest Go that builds the modules
#   WHAT             what needs that Go, for messages (e.g. "helm v3.22.0")
# Then, besides cached_build_cli and cached_build_use_cache:
#   go_build_prepare JOBS NICE    check Go, take the cache's build lock (and exit if a
#                                 concurrent run built it meanwhile), export an isolated Go
#                                 environment, set go_version and NICE (the command prefix)
#   download_field MOD@VER FIELD  the field (Dir, GoMod, ...) of `go mod download -json`, run in
#                                 $WORK_DIR under $NICE

# shellcheck source=scripts/lib/cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/cached-build.sh"

go_build_prepare() {
    local jobs="$1" niceness="$2"
    command -v go >/dev/null || die "go is not on PATH; $WHAT needs Go >= $MIN_GO_VERSION"
    cached_build_lock

    go_version="$(go env GOVERSION)"
    go_version="${go_version#go}"
    go_version="${go_version%% *}"
    if [[ "$(printf '%s\n%s\n' "$MIN_GO_VERSION" "$go_version" | sort -V | head -n1)" != "$MIN_GO_VERSION" ]]; then
        die "Go $go_version is too old: $WHAT needs Go >= $MIN_GO_VERSION"
    fi

    # Own module and build caches under the cache root; -modcacherw keeps the module cache
    # deletable with a plain rm -rf; GOTOOLCHAIN=local never downloads another toolchain.
    export GOPATH="$CACHE_ROOT/go"
    export GOMODCACHE="$CACHE_ROOT/go/pkg/mod"
    export GOCACHE="$CACHE_ROOT/go/build-cache"
    export GOTOOLCHAIN=local GOWORK=off GO111MODULE=on CGO_ENABLED=0
    export GOFLAGS="-modcacherw -buildvcs=false -trimpath -p=$jobs"
    # shellcheck disable=SC2034 # the sourcing script runs its go commands under it
    NICE=(nice -n "$niceness")
}

# download_field MODULE@VERSION FIELD: the field (Dir, GoMod, ...) of `go mod download -json`.
download_field() {
    local json
    json="$(cd "$WORK_DIR" && "${NICE[@]}" go mod download -json "$1")" || {
        printf '%s\n' "$json" >&2
        return 1
    }
    printf '%s\n' "$json" | sed -n "s/^[[:space:]]*\"$2\": \"\\(.*\\)\",\{0,1\}\$/\\1/p"
}
