#!/usr/bin/env bash
# Saves and restores the host's kernel settings that a kind node changes for the whole machine:
# the kubelet in the privileged node container (kind sets protectKernelDefaults=false) writes
#   vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1
# globally, and they stay after `kind delete cluster`.
#
# Usage: host-sysctls.sh save FILE      write the current values to FILE (lines NAME=VALUE)
#        host-sysctls.sh restore FILE   write the values in FILE back where they differ (root)
# Progress and errors go to stderr; nothing goes to stdout.
set -euo pipefail

SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)

LOG_TAG=host-sysctls
# shellcheck source=scripts/lib/cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cached-build.sh" # log, die
usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit "${1:-2}"
}
proc_path() { printf '/proc/sys/%s' "${1//./\/}"; }

[[ "${1:-}" == -h || "${1:-}" == --help ]] && usage 0
(($# == 2)) || usage
action="$1" file="$2"
case "$action" in
    save)
        mkdir -p "$(dirname "$file")"
        tmp="$(mktemp "$file.XXXXXX")"
        for name in "${SYSCTLS[@]}"; do
            printf '%s=%s\n' "$name" "$(<"$(proc_path "$name")")" >>"$tmp"
        done
        mv "$tmp" "$file"
        log "saved $(tr '\n' ' ' <"$file")to $file"
        ;;
    restore)
        [[ -f "$file" ]] || die "$file does not exist"
        while IFS='=' read -r name value; do
            [[ -n "$name" ]] || continue
            [[ " ${SYSCTLS[*]} " == *" $name "* ]] || die "$file: unexpected setting $name"
            current="$(<"$(proc_path "$name")")"
            if [[ "$current" != "$value" ]]; then
                ((EUID == 0)) || die "$name is $current, should be $value: run as root: sudo $0 restore $file"
                printf '%s\n' "$value" >"$(proc_path "$name")"
                log "$name: $current -> $value"
            fi
        done <"$file"
        ;;
    *) usage ;;
esac
