#!/usr/bin/env bash
# Seeds until decided, on a GPU, for the record's open claims (docs/statistics.md): each sweep a
# group-sequential design of its own, its packs planned by `auto` (one pack per round on the GPU), its
# runs exported to $OUT/exports to be checked against the CPU seeds (same_distribution.py) before pooling.
# Run by `GPU_CHECK_SEEDS=1 make gpu-check` beside its CUDA tests, or alone; $PYTHON as there.
set -u
py=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT/exports"
export PYTHONUNBUFFERED=1 ACTSWEEP_HOME=${ACTSWEEP_HOME:-/tmp/actsweep-gpu-check}

until_decided() {  # NAME LIMIT_S ARGS...: one sweep, its log, its export
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "== $name (up to ${limit} s): actsweep run $*"
  timeout "$limit" "$py" -m service.cli run "$@" > "$OUT/$name.log" 2>&1
  echo "-- $name: rc=$? in $((SECONDS - t0)) s"
  grep -E "^Plan:|look [0-9]+ at|round [0-9]+:|Wall time|decided|inconclusive|reproduced" "$OUT/$name.log" | head -40
  local sweep; sweep=$(grep -o 'actsweep report [0-9a-f]*' "$OUT/$name.log" | head -1 | cut -d' ' -f3)
  [ -n "$sweep" ] && "$py" -m service.cli export "$sweep" --format csv.gz --out "$OUT/exports" > /dev/null 2>&1 \
    && echo "exported sweep $sweep"
}

# mnist_7layer (the earlier version's Figure 2): both claims open at the CPU record's budget of 11 seeds.
# Looks after the spec's 5 seeds, then at 69 and 133 (a budget fixed before the run: 133 seeds).
until_decided mnist_7layer "${SEEDS_7LAYER_S:-280}" mnist_7layer --until-decided --max-seeds 133 --seeds-per-round 64
