# shellcheck shell=bash
# What the build scripts under scripts/ share: making a tool once into a cache that a later run
# finds and uses, one build at a time per cache.
#
# Source it after setting:
#   LOG_TAG          prefix of the log lines
#   CACHE_ROOT       the cache directory (holds the lock and the results)
#   RESULT           what the script prints on stdout once built (a binary or a directory)
# and defining is_built (true when RESULT is complete). Then:
#   cached_build_cli "$@"         handle --check / --help; exit on them
#   cached_build_use_cache        exit 0, printing RESULT, if it is built
#   cached_build_lock             take the cache's build lock, waiting for a concurrent build,
#                                 and exit 0 if that build made RESULT meanwhile
#   cached_build_venv VENV PYTHON REQUIREMENT
#                                 make a virtualenv of its own for a Python tool and pip-install
#                                 the pinned REQUIREMENT into it

log() { printf '[%s %s] %s\n' "$LOG_TAG" "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

cached_build_cli() {
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

cached_build_use_cache() {
    if is_built; then
        log "cached${1:+ ($1)}: $RESULT"
        echo "$RESULT"
        exit 0
    fi
}

cached_build_lock() {
    command -v flock >/dev/null || die "flock (util-linux) is not on PATH"
    mkdir -p "$CACHE_ROOT"
    # One build at a time per cache root: a second run waits, then finds the result.
    exec 9>"$CACHE_ROOT/.build.lock"
    if ! flock -n 9; then
        log "another build holds $CACHE_ROOT/.build.lock; waiting for it"
        flock 9
    fi
    cached_build_use_cache "built by a concurrent run"
}

cached_build_venv() {
    local venv="$1" python="$2" requirement="$3"
    command -v "$python" >/dev/null || die "$python is not on PATH"
    log "installing $requirement into $venv"
    # Low priority: the machine's other work goes first.
    nice -n 10 "$python" -m venv "$venv"
    nice -n 10 "$venv/bin/python" -m pip install -q --disable-pip-version-check "$requirement" >&2
}
