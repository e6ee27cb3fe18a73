#!/usr/bin/env bash
# Prints the path of the project's virtual environment, creating it on first use.
#
# The environment holds exactly requirements.lock (every package pinned, with its hashes; `make
# lock` regenerates it from pyproject.toml). It lives outside the clone, in $ACTSWEEP_VENV_ROOT
# (default ~/.cache/actsweep), keyed by the lock's hash and the Python version, so CI and reruns
# reuse it until the lock changes. The project itself is installed editable, without
# dependencies, from the checkout that calls this script. pip's output goes to a log beside it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "actsweep: needs Python 3.11 or newer; $python is $("$python" -V 2>&1)" >&2; exit 1; }
"$python" -c 'import ensurepip, venv' 2>/dev/null \
  || { echo "actsweep: $python has no venv module: install python3-venv (bash .ci/system-packages.sh does)" >&2; exit 1; }
key=$( (cat "$repo/requirements.lock"; "$python" -c 'import sys; print(sys.version_info[:2])') \
  | sha256sum | cut -c1-16)
root=${ACTSWEEP_VENV_ROOT:-$HOME/.cache/actsweep}
venv=$root/venv-$key
log=$venv.log

mkdir -p "$root"
exec 9>"$root/.lock"
flock 9  # one creator at a time

if [ ! -f "$venv/.complete" ]; then
  echo "actsweep: creating $venv from requirements.lock (first time only: torch, Ray and MLflow take a few minutes)" >&2
  rm -rf "$venv"
  {
    "$python" -m venv "$venv" &&
    # exactly the lock: every requirement pinned and hash-checked, nothing resolved here
    "$venv/bin/pip" install --require-hashes --no-deps -r "$repo/requirements.lock" &&
    cp "$repo/requirements.lock" "$venv/requirements.lock" &&  # what sweeps record as their environment (service.lock)
    "$venv/bin/pip" install --no-deps --no-build-isolation -e "$repo"
  } >"$log" 2>&1 || { tail -30 "$log" >&2; echo "actsweep: install failed, see $log" >&2; exit 1; }
  touch "$venv/.complete"
fi

# Point the environment at this checkout (a new clone reuses the environment of an older one).
# (asked from / so that the current directory does not shadow the installed package)
installed=$(cd / && "$venv/bin/python" -c 'import pathlib, service; print(pathlib.Path(service.__file__).parent.parent)' 2>/dev/null || true)
if [ "$installed" != "$repo" ]; then
  "$venv/bin/pip" install --no-deps --no-build-isolation -e "$repo" >>"$log" 2>&1 \
    || { tail -30 "$log" >&2; exit 1; }
fi
echo "$venv"
