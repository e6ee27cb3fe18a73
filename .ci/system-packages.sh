#!/usr/bin/env bash
# Installs the Debian packages some tests use, where they are missing and this user may install:
# chromium (the HTML report in a headless browser) and postgresql (the sweep database and an
# MLflow server on PostgreSQL; the tests start their own server on loopback). Without them those
# tests skip and say why (CI sets ACTSWEEP_REQUIRE_CHROMIUM=1 and ACTSWEEP_REQUIRE_POSTGRES=1, so
# there they fail instead). dataset-fashion-mnist: Fashion-MNIST (the activation_zoo spec, its test).
set -uo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
[ -d /usr/share/datasets/fashion-mnist ] || missing+=(dataset-fashion-mnist)
command -v g++ >/dev/null 2>&1 || missing+=(g++)  # torch.compile on a CPU (execution.compile; its test)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else
  echo "actsweep: cannot install ${missing[*]} (not root, no sudo); the tests that need them will skip" >&2; exit 0
fi
log=${TMPDIR:-/tmp}/actsweep-apt.log
echo "actsweep: installing ${missing[*]} with apt-get (log: $log)" >&2
{ $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" fonts-dejavu-core; } >"$log" 2>&1 || { tail -20 "$log" >&2; echo "actsweep: apt-get failed" >&2; }
exit 0
