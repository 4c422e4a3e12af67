#!/usr/bin/env bash
# Sets up this (Debian) host for the local container builds and the kind cluster of scripts/kind/:
#   - apt packages: podman, runc, debootstrap (scripts/images/debian-base.sh), gcc + libc6-dev (the
#     static pause binary of scripts/kind/build.sh), chromium + chromium-driver (the headless browser
#     tests/test_ui_browser.py drives the web UI with), libfaketime (the REST catalog server's
#     simulated clock in bench/catalog_cadence.py); `apt-get update` runs only when one is missing;
#   - /etc/containers/containers.conf: podman's OCI runtime is runc (crun refuses the hybrid cgroup v1
#     layout of these hosts) and containers get finite nofile/nproc limits (the host's limits are
#     not raisable without CAP_SYS_RESOURCE):
#       [engine]      runtime = "runc"
#       [containers]  default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
#     merged into an existing file (other settings stay) or written new;
#   - /lib/modules exists (empty if the kernel has no module tree, as on VMs with a built-in kernel):
#     kind bind-mounts it into every node and podman refuses a missing source.
# Only what is missing is changed; a second run changes nothing. It must run as root when something
# is missing; otherwise it says what to run and fails.
#
# Usage: podman.sh          set up what is missing (progress on stderr, nothing on stdout)
#        podman.sh --check  exit 0 if nothing is missing, else 1 (changes nothing)
set -euo pipefail

PACKAGES=(podman runc debootstrap gcc libc6-dev chromium chromium-driver libfaketime)
CONF=/etc/containers/containers.conf
# section|key|value (TOML, value verbatim)
SETTINGS=(
    'engine|runtime|"runc"'
    'containers|default_ulimits|["nofile=20000:20000", "nproc=32768:32768"]'
)

log() { printf '[host-podman %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

check_only=0
case "${1:-}" in
    "") ;;
    --check) check_only=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *) die "unknown argument: $1 (try --help)" ;;
esac

# toml_get FILE SECTION KEY: the value of KEY in [SECTION] (uncommented), or nothing.
toml_get() {
    [[ -f "$1" ]] || return 0
    awk -v section="$2" -v key="$3" '
        /^[[:space:]]*\[/ { s = $0; gsub(/^[[:space:]]*\[[[:space:]]*|[[:space:]]*\][[:space:]]*$/, "", s); insec = (s == section); next }
        insec && $0 ~ "^[[:space:]]*" key "[[:space:]]*=" { v = $0; sub(/^[^=]*=[[:space:]]*/, "", v); sub(/[[:space:]]*$/, "", v); print v; exit }
    ' "$1"
}

# toml_set FILE SECTION KEY VALUE: sets KEY = VALUE in [SECTION]: replaces the key's line, else adds
# it right after the section header, else appends the section. Comments and the rest stay.
toml_set() {
    local tmp
    tmp="$(mktemp "$1.floe.XXXXXX")"
    awk -v section="$2" -v key="$3" -v value="$4" '
        function emit() { print key " = " value; done = 1 }
        /^[[:space:]]*\[/ {
            s = $0; gsub(/^[[:space:]]*\[[[:space:]]*|[[:space:]]*\][[:space:]]*$/, "", s)
            insec = (s == section); print
            if (insec && !done) { emit() }
            next
        }
        insec && $0 ~ "^[[:space:]]*" key "[[:space:]]*=" {
            # the value was just written after the header; drop the old line (and a multi-line array)
            if ($0 ~ /\[[^]]*$/) { skiparray = 1 }
            next
        }
        skiparray { if ($0 ~ /\]/) { skiparray = 0 } next }
        { print }
        END { if (!done) { print ""; print "[" section "]"; print key " = " value } }
    ' "$1" >"$tmp"
    chmod 644 "$tmp"
    mv "$tmp" "$1"
}

missing_packages=()
for package in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null)" != installed ]]; then
        missing_packages+=("$package")
    fi
done
missing_settings=()
for setting in "${SETTINGS[@]}"; do
    IFS='|' read -r section key value <<<"$setting"
    if [[ "$(toml_get "$CONF" "$section" "$key")" != "$value" ]]; then
        missing_settings+=("$setting")
    fi
done

missing_modules_dir=0
[[ -d /lib/modules ]] || missing_modules_dir=1

if ((${#missing_packages[@]} == 0 && ${#missing_settings[@]} == 0 && missing_modules_dir == 0)); then
    exit 0
fi
if ((check_only)); then
    ((${#missing_packages[@]} == 0)) || log "missing packages: ${missing_packages[*]}"
    for setting in "${missing_settings[@]}"; do
        IFS='|' read -r section key value <<<"$setting"
        log "missing in $CONF: [$section] $key = $value"
    done
    ((missing_modules_dir == 0)) || log "missing: /lib/modules"
    exit 1
fi
if ((EUID != 0)); then
    msg="missing:"
    ((${#missing_packages[@]} == 0)) || msg+=" packages ${missing_packages[*]};"
    ((${#missing_settings[@]} == 0)) || msg+=" settings in $CONF;"
    ((missing_modules_dir == 0)) || msg+=" /lib/modules;"
    die "$msg run as root: sudo $0"
fi

if ((${#missing_packages[@]} > 0)); then
    log "installing ${missing_packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2
    apt-get install -y --no-install-recommends "${missing_packages[@]}" >&2
fi

if ((${#missing_settings[@]} > 0)); then
    mkdir -p "$(dirname "$CONF")"
    [[ -f "$CONF" ]] || printf '# Written by floe scripts/host/podman.sh\n' >"$CONF"
    for setting in "${missing_settings[@]}"; do
        IFS='|' read -r section key value <<<"$setting"
        log "$CONF: [$section] $key = $value"
        toml_set "$CONF" "$section" "$key" "$value"
    done
    for setting in "${SETTINGS[@]}"; do
        IFS='|' read -r section key value <<<"$setting"
        [[ "$(toml_get "$CONF" "$section" "$key")" == "$value" ]] || die "could not set [$section] $key in $CONF"
    done
fi

if ((missing_modules_dir)); then
    log "creating an empty /lib/modules (this kernel has no module tree; kind mounts it into its nodes)"
    mkdir -p /lib/modules
fi
