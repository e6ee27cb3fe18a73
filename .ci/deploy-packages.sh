#!/usr/bin/env bash
# Installs what `make deploy-check` needs from Debian's packages, where it is missing and this user may:
# Podman and debootstrap (the base image is made from the Debian archive); podman-compose comes from PyPI.
set -uo pipefail
missing=()
for tool in podman debootstrap; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else
  echo "actsweep: deploy-check needs ${missing[*]} (apt-get install ${missing[*]}); not root, no sudo" >&2; exit 1
fi
echo "actsweep: installing ${missing[*]} with apt-get" >&2
$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" runc uidmap slirp4netns fuse-overlayfs >/dev/null
