#!/usr/bin/env bash
# Builds, once, the Debian bookworm base image every locally built image starts from (the kind
# node image of scripts/kind/ and floe's own images of scripts/images/build.sh): there is no
# registry to pull `debian:bookworm-slim` from, so debootstrap makes the root filesystem from
# Debian's package archive (the apt source this machine is configured with) and podman imports it.
#
# The image is podman's localhost/floe-debian-base:<tag>, where the tag names the suite and this
# recipe's revision; a run that finds it in podman's storage does nothing else.
#
# Usage: debian-base.sh          build if needed; print the image name on stdout
#        debian-base.sh --check  print the image name and exit 0 if it is built, else exit 1
# Progress and errors go to stderr.
#
# Environment:
#   FLOE_CACHE_DIR        cache root (default $HOME/.cache/floe; holds the build lock)
#   FLOE_DEBIAN_MIRROR    the Debian archive (default: the first deb URI of this machine's apt sources)
set -euo pipefail

SUITE=bookworm
# Bump when the way the image is made changes, so an image made the old way is not reused.
RECIPE_REVISION=1
IMAGE="localhost/floe-debian-base:${SUITE}-r${RECIPE_REVISION}"

CACHE_ROOT="${FLOE_CACHE_DIR:-$HOME/.cache/floe}/images"
LOG_TAG=debian-base
RESULT="$IMAGE"
is_built() { command -v podman >/dev/null && podman image exists "$IMAGE"; }
# shellcheck source=scripts/lib/cached-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cached-build.sh"

cached_build_cli "$@"
cached_build_use_cache
command -v podman >/dev/null || die "podman is not on PATH (scripts/host/podman.sh installs it)"
command -v debootstrap >/dev/null || die "debootstrap is not on PATH (scripts/host/podman.sh installs it)"
cached_build_lock

mirror="${FLOE_DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
    mirror="$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)[[:space:]]*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)"
    [[ -n "$mirror" ]] || mirror="$(sed -n 's/^deb[[:space:]]\+\(http[^[:space:]]*\/debian\)[[:space:]].*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n1)"
fi
[[ -n "$mirror" ]] || die "found no Debian archive in the apt sources; set FLOE_DEBIAN_MIRROR"

root="$(mktemp -d "${TMPDIR:-/tmp}/floe-debian-base.XXXXXX")"
trap 'rm -rf "$root"' EXIT
started=$SECONDS
log "debootstrap $SUITE from $mirror (minbase)"
debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$root" "$mirror" >&2
# What the slim images do: no apt lists, docs or caches in the layer; apt keeps no .debs.
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
APT
printf 'APT::Install-Recommends "false";\n' >"$root/etc/apt/apt.conf.d/docker-no-recommends"
printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" "$SUITE" "$SUITE" >"$root/etc/apt/sources.list.d/debian.sources"
rm -f "$root/etc/apt/sources.list"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/tmp/* "$root"/var/log/*
tar -C "$root" -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
log "done in $((SECONDS - started))s: $IMAGE ($(podman image inspect --format '{{.Size}}' "$IMAGE") bytes)"
echo "$IMAGE"
