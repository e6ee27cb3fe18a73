#!/usr/bin/env bash
# `make test` under BSD process accounting, then each test's CPU, its processes' included
# (benchmarks/suite_cpu.py). Needs root and Debian's acct (accton, dump-acct). Usage:
#   bash benchmarks/suite_cpu.sh [N]     # the N costliest tests (40), and the costliest modules
set -uo pipefail
cd "$(dirname "$0")/.."
command -v accton >/dev/null && command -v dump-acct >/dev/null || { echo "needs accton and dump-acct: apt-get install acct" >&2; exit 2; }
out=$(mktemp -d)
touch "$out/acct" && accton "$out/acct" >/dev/null || exit 2
trap 'accton off >/dev/null' EXIT
ACTSWEEP_SUITE_CPU_DIR="$out" PYTEST_ADDOPTS="-p benchmarks.suite_cpu" make test
status=$?
accton off >/dev/null
trap - EXIT
venv=$(bash .ci/venv.sh) && "$venv/bin/python" -m benchmarks.suite_cpu "$out/acct" "$out" "${1:-40}"
echo "(records in $out; make test exited $status)"
exit $status
