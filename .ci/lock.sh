#!/usr/bin/env bash
# Regenerates requirements.lock from pyproject.toml (make lock), keeping the versions already
# locked where they still satisfy it. Pass --upgrade to move every package to its newest release.
# The lock is universal (every platform's markers and wheels' hashes) for Python 3.11, the floor.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
uv_version=0.13.9
tools=${ACTSWEEP_VENV_ROOT:-$HOME/.cache/actsweep}/uv-$uv_version
if [ ! -x "$tools/bin/uv" ]; then
  python3 -m venv "$tools" && "$tools/bin/pip" install -q "uv==$uv_version"
fi
cd "$repo"
"$tools/bin/uv" pip compile pyproject.toml .ci/build-requirements.in --extra test \
  --override .ci/lock-overrides.txt --generate-hashes --universal --python-version 3.11 \
  --quiet -o requirements.lock "$@"
echo "requirements.lock: $(grep -c '^[A-Za-z].*==' requirements.lock) packages, sha256 $(sha256sum requirements.lock | cut -c1-16)"
