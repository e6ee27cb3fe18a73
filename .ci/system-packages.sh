#!/usr/bin/env bash
# Installs the Debian packages the project and some tests use, where they are missing:
#   python3-venv           the project's environment (.ci/venv.sh); always needed
#   chromium               the HTML report and the UIs' screenshots in a headless browser
#   postgresql             the sweep database and an MLflow server on PostgreSQL (tests start their own)
#   dataset-fashion-mnist  Fashion-MNIST (the activation_zoo spec, its test)
#   g++                    torch.compile on a CPU (execution.compile; its test)
# A package that cannot be installed fails here, at the start, naming it, if it is needed: always
# for python3-venv, and where CI requires the tests that use it (ACTSWEEP_REQUIRE_CHROMIUM,
# _POSTGRES, _FASHION_MNIST, _CXX). Elsewhere those tests skip and say why.
set -uo pipefail
missing=()
"${PYTHON:-python3}" -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
[ -d /usr/share/datasets/fashion-mnist ] || missing+=(dataset-fashion-mnist)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
[ ${#missing[@]} -eq 0 ] && exit 0

required() {  # is this package needed here, not only nice to have?
  case $1 in
    python3-venv) return 0 ;;
    chromium) [ "${ACTSWEEP_REQUIRE_CHROMIUM:-}" = 1 ] ;;
    postgresql) [ "${ACTSWEEP_REQUIRE_POSTGRES:-}" = 1 ] ;;
    dataset-fashion-mnist) [ "${ACTSWEEP_REQUIRE_FASHION_MNIST:-}" = 1 ] ;;
    g++) [ "${ACTSWEEP_REQUIRE_CXX:-}" = 1 ] ;;
  esac
}

fail_or_warn() {  # $1: why nothing was installed
  local needed=() package
  for package in "${missing[@]}"; do required "$package" && needed+=("$package"); done
  if [ ${#needed[@]} -gt 0 ]; then
    echo "actsweep: cannot install ${needed[*]} ($1), and they are required here; stopping" >&2
    exit 1
  fi
  echo "actsweep: cannot install ${missing[*]} ($1); the tests that need them will skip" >&2
  exit 0
}

if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else
  fail_or_warn "not root, no sudo"
fi
log=${TMPDIR:-/tmp}/actsweep-apt.log
echo "actsweep: installing ${missing[*]} with apt-get (log: $log)" >&2
if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
         --no-install-recommends "${missing[@]}" fonts-dejavu-core; } >"$log" 2>&1; then
  tail -20 "$log" >&2
  fail_or_warn "apt-get failed, see $log"
fi
exit 0
