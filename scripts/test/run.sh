#!/usr/bin/env bash
# `make test`: the venv, every build the tests use, lint and the docs site's strict build beside
# pytest on two workers, and at the end each phase's wall-clock time, so a phase that grows shows
# in every run's output.
#
# Usage: scripts/test/run.sh [PYTEST_ARGS...]   (make test passes none: every test runs)
#
# pytest runs with pytest-xdist on two workers, one test file at a time each (`--dist loadfile`):
# the tests of a file share its fixtures, and tests/e2e is one file on one kind cluster. Each
# worker starts its own Spark session and, if it runs a tests/k8s file, its own control plane.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

make=("${MAKE:-make}" --no-print-directory)
phases="$(mktemp)"
lint_log="$(mktemp)"
docs_log="$(mktemp)"
start="$(date +%s)"
trap 'rm -f "$phases" "$lint_log" "$docs_log"' EXIT

# phase NAME CMD...: run CMD, appending "NAME start end rc" (seconds from the start) to $phases.
phase() {
    local name="$1" began rc=0
    shift
    began="$(date +%s)"
    "$@" || rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$((began - start))" "$(($(date +%s) - start))" "$rc" >>"$phases"
    return "$rc"
}

clock() { printf '%d:%02d' "$(($1 / 60))" "$(($1 % 60))"; }

report() {
    local name began ended rc
    echo
    echo "== make test: phases (wall clock from the start) =="
    printf '%-10s %7s %7s %7s  %s\n' phase start end took result
    while IFS=$'\t' read -r name began ended rc; do
        printf '%-10s %7s %7s %7s  %s\n' "$name" "$(clock "$began")" "$(clock "$ended")" \
            "$(clock $((ended - began)))" "$([ "$rc" -eq 0 ] && echo ok || echo "failed ($rc)")"
    done <"$phases"
    printf '%-10s %7s %7s %7s\n' total "" "" "$(clock $(($(date +%s) - start)))"
}

rc=0
phase venv "${make[@]}" venv || rc=$?
[ "$rc" -eq 0 ] && { phase builds "${make[@]}" test-envs || rc=$?; }
if [ "$rc" -eq 0 ]; then
    # Lint needs about one core for two minutes, then the docs build (mkdocs --strict) a few
    # seconds; they run one after the other beside pytest, their output kept until pytest ends so
    # nothing interleaves.
    (
        side_rc=0
        phase lint "${make[@]}" lint >"$lint_log" 2>&1 || side_rc=$?
        phase docs "${make[@]}" docs >"$docs_log" 2>&1 || side_rc=$?
        exit "$side_rc"
    ) &
    side_pid=$!
    pytest_rc=0
    phase pytest .venv/bin/pytest -q -n 2 --dist loadfile "$@" || pytest_rc=$?
    side_rc=0
    wait "$side_pid" || side_rc=$?
    echo
    echo "== lint =="
    cat "$lint_log"
    echo
    echo "== docs =="
    cat "$docs_log"
    if [ "$pytest_rc" -eq 5 ]; then echo "error: pytest collected no tests" >&2; fi
    rc=$((pytest_rc != 0 ? pytest_rc : side_rc))
fi
report
exit "$rc"
