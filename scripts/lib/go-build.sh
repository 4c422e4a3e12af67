# shellcheck shell=bash
# What scripts/helm/build.sh and scripts/k8s-test-env/build.sh share: building Go binaries once,
# from source through the Go module proxy, into a cache that a later run finds and uses.
#
# Source it after setting:
#   LOG_TAG          prefix of the log lines
#   CACHE_ROOT       the cache directory (holds the lock, the Go caches and the results)
#   MIN_GO_VERSION   the oldest Go that builds the modules
#   WHAT             what needs that Go, for messages (e.g. "helm v3.22.0")
#   RESULT           what the script prints on stdout once built (a binary or a directory)
# and defining is_built (true when RESULT is complete). Then:
#   go_build_cli "$@"             handle --check / --help; exit on them
#   go_build_use_cache            exit 0, printing RESULT, if it is built
#   go_build_prepare JOBS NICE    check Go and flock, take the cache's build lock (and exit if a
#                                 concurrent run built it meanwhile), export an isolated Go
#                                 environment, set go_version and NICE (the command prefix)

log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

go_build_cli() {
    case "${1:-}" in
        "") ;;
        --check)
            is_built || exit 1
            echo "$RESULT"
            exit 0
            ;;
        -h | --help)
            # The calling script's header comment, up to its `set -euo pipefail`.
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument: $1 (try --help)" ;;
    esac
}

go_build_use_cache() {
    if is_built; then
        log "cached${1:+ ($1)}: $RESULT"
        echo "$RESULT"
        exit 0
    fi
}

go_build_prepare() {
    local jobs="$1" niceness="$2"
    command -v go >/dev/null || die "go is not on PATH; $WHAT needs Go >= $MIN_GO_VERSION"
    command -v flock >/dev/null || die "flock (util-linux) is not on PATH"
    mkdir -p "$CACHE_ROOT"
    # One build at a time per cache root: a second run waits, then finds the result.
    exec 9>"$CACHE_ROOT/.build.lock"
    if ! flock -n 9; then
        log "another build holds $CACHE_ROOT/.build.lock; waiting for it"
        flock 9
    fi
    go_build_use_cache "built by a concurrent run"

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
