#!/usr/bin/env bash
# The one install script of floe's two images (operator.Dockerfile, optimizer_image/Dockerfile):
# both Dockerfiles run it, and scripts/images/build.sh runs its `wheels` step on the build host.
#
#   install-floe.sh wheels SRC OUT ROLE   build wheels of the checkout SRC and every dependency
#                                         into OUT/ with pip (ROLE optimizer adds the `spark` extra)
#   install-floe.sh install ROLE WHEELS   on a Debian image: install ROLE's system packages, the user
#                                         it runs as and a virtualenv /opt/floe/venv holding floe from
#                                         the wheels in WHEELS only (no index is asked)
#
# The roles:
#   operator   Python 3.11 and tini; user floe, UID 10001. No Java, no pyspark.
#   optimizer  the same plus Java 17 (JRE), nss_wrapper and procps, pyspark (its bundled Spark) and
#              /opt/java linked to the JRE; user floe, UID 185 (Spark's images' UID).
set -euo pipefail

die() {
    echo "install-floe.sh: $*" >&2
    exit 64
}

extras_of() {
    case "$1" in
        operator) echo "" ;;
        optimizer) echo "[spark]" ;;
        *) die "unknown role '$1' (operator or optimizer)" ;;
    esac
}

apt_install() {
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
    rm -rf /var/lib/apt/lists/*
}

build_wheels() {
    local src="$1" out="$2" role="$3" python="${PYTHON:-python3}" extras
    extras="$(extras_of "$role")"
    [[ -f "$src/pyproject.toml" ]] || die "$src has no pyproject.toml"
    if ! "$python" -m pip --version >/dev/null 2>&1; then
        command -v apt-get >/dev/null || die "$python has no pip"
        apt_install python3-pip python3-venv
    fi
    mkdir -p "$out"
    "$python" -m pip wheel --no-cache-dir --disable-pip-version-check -q --wheel-dir "$out" "$src$extras"
}

install_role() {
    local role="$1" wheels="$2" extras uid packages=(python3 python3-venv tini)
    extras="$(extras_of "$role")"
    [[ -d "$wheels" ]] || die "no wheel directory $wheels"
    case "$role" in
        operator) uid=10001 ;;
        optimizer)
            uid=185
            packages+=(openjdk-17-jre-headless libnss-wrapper procps)
            ;;
    esac
    apt_install "${packages[@]}"
    if [[ "$role" == optimizer ]]; then
        ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java
    fi
    groupadd --gid "$uid" floe
    useradd --uid "$uid" --gid "$uid" --home-dir /opt/floe --no-create-home --shell /usr/sbin/nologin floe
    mkdir -p /opt/floe
    python3 -m venv /opt/floe/venv
    /opt/floe/venv/bin/pip install --no-cache-dir --disable-pip-version-check -q --no-index \
        --find-links "$wheels" "floe$extras"
    # The interpreter's byte-code caches are written at first import as the floe user otherwise,
    # which a read-only root filesystem refuses; compile them now.
    /opt/floe/venv/bin/python -m compileall -q /opt/floe/venv/lib >/dev/null
    chown floe:floe /opt/floe
}

case "${1:-}" in
    wheels)
        [[ $# -eq 4 ]] || die "usage: install-floe.sh wheels SRC OUT ROLE"
        build_wheels "$2" "$3" "$4"
        ;;
    install)
        [[ $# -eq 3 ]] || die "usage: install-floe.sh install ROLE WHEELS"
        install_role "$2" "$3"
        ;;
    *) die "usage: install-floe.sh wheels SRC OUT ROLE | install ROLE WHEELS" ;;
esac
