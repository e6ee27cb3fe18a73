#!/usr/bin/env bash
# `make gpu-check`: the GPU checks, on a machine with a CUDA GPU, with the Python that runs it ($PYTHON,
# default python3: on a GPU machine without a package index, the one ../shared/gpu/check.sh sets up).
#   1. the tests that need CUDA (marked cuda; ACTSWEEP_REQUIRE_CUDA=1 makes them fail, not skip);
#      with GPU_CHECK_SEEDS=1, docs/reproductions/gpu_seeds.sh beside them (its numbers, not its speed,
#      matter: it shares the GPU with the tests, never with the timed steps below)
#   (GPU_CHECK_START_AB=1: first, each of the driver's big imports timed alone, then Figure 2 for one epoch with Ray started first and then after the
#   spec's checks, ACTSWEEP_EARLY_RAY_CPUS=1 and 100000, then first with its workers preloading torch
#   (ACTSWEEP_PRELOAD_WORKERS=true), each in a new home (no trial cache): their last lines' marks compared)
#   2. `actsweep run mnist_classification` with no flags: Figure 2's full protocol (90 trials × 50 epochs
#      on real MNIST), the execution plan left to `auto`, timed from the command to the printed tables;
#      its sweep exported to $OUT/exports (to compare its seeds with the CPU record's)
#   3. `actsweep bench --device cuda --workload paper --variants engine,fused`
#   4. `actsweep bench --device cuda --workload cifar` (the convnets)
# Each step has its own time limit, and none runs past GPU_CHECK_BUDGET_S from the start (a lent machine's
# call limit); a limit of 0 skips its step. Logs and JSON go to $OUT (default ./gpu-out).
set -u
py=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT/exports"
export ACTSWEEP_REQUIRE_CUDA=1 PYTHONUNBUFFERED=1 ACTSWEEP_HOME=${ACTSWEEP_HOME:-/tmp/actsweep-gpu-check} PYTHON=$py OUT
end=$((SECONDS + ${GPU_CHECK_BUDGET_S:-100000}))

step() {  # step NAME LIMIT_S COMMAND...: run it with a limit, its output to $OUT/NAME.log, its tail here
  local name=$1 limit=$2; shift 2
  local left=$((end - SECONDS - 10)); [ "$limit" -le "$left" ] || limit=$left
  if [ "$limit" -lt 20 ]; then echo "== $name: skipped (its limit: ${limit} s)"; return; fi
  local t0=$SECONDS
  echo "== $name (up to ${limit} s): $*"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "-- $name: rc=$rc in $((SECONDS - t0)) s"
  tail -n "${TAIL:-25}" "$OUT/$name.log"
}

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
"$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name(0))'

if [ "${GPU_CHECK_SEEDS:-0}" = 1 ]; then
  bash docs/reproductions/gpu_seeds.sh > "$OUT/gpu_seeds.log" 2>&1 &
  seeds=$!
fi
step cuda_tests "${GPU_CHECK_TESTS_S:-150}" "$py" -m pytest -q -p no:cacheprovider -o addopts="-rs" -m cuda tests/workers tests/service/driver
if [ -n "${seeds:-}" ]; then
  t0=$SECONDS; wait "$seeds"; echo "== seeds until decided (beside the tests): rc=$? after $((SECONDS - t0)) s more"
  cat "$OUT/gpu_seeds.log"
fi
step plan "${GPU_CHECK_PLAN_S:-60}" "$py" -m service.cli plan mnist_classification
if [ "${GPU_CHECK_START_AB:-0}" = 1 ]; then
  # what the driver's imports cost here, each in a new interpreter (the start's longest part on an H100)
  for module in torch ray ray.tune mlflow scipy.stats matplotlib.pyplot workers.trainable service.driver.sweeps; do
    "$py" -c "import time; t = time.perf_counter(); import $module; print(f'import $module: {time.perf_counter() - t:.2f} s')"
  done 2>&1 | tee "$OUT/imports.log"
  for way in "ray_first 1 false" "ray_after_checks 100000 false" "ray_first_preload 1 true"; do
    set -- $way  # NAME ACTSWEEP_EARLY_RAY_CPUS ACTSWEEP_PRELOAD_WORKERS
    ACTSWEEP_HOME=/tmp/actsweep-start-$1 ACTSWEEP_EARLY_RAY_CPUS=$2 ACTSWEEP_PRELOAD_WORKERS=$3 TAIL=2 \
      step "start_$1" 120 "$py" -m service.cli run mnist_classification --set epochs=1
  done
fi
TAIL=60 step fig2_full_protocol "${GPU_CHECK_FIG2_S:-240}" "$py" -m service.cli run mnist_classification
sweep=$(grep -o 'actsweep report [0-9a-f]*' "$OUT/fig2_full_protocol.log" 2>/dev/null | head -1 | cut -d' ' -f3)
[ -n "$sweep" ] && "$py" -m service.cli export "$sweep" --format csv.gz --out "$OUT/exports" > /dev/null 2>&1 \
  && echo "exported sweep $sweep to $OUT/exports"
step bench_paper "${GPU_CHECK_BENCH_S:-150}" "$py" -m service.cli bench --device cuda --workload paper \
  --variants engine,fused --out "$OUT/speed_paper_cuda.json"
# (GPU_CHECK_CIFAR_ARGS picks nets and rows, e.g. "--rows streams --nets cifar10_shallow"; the streams
# row, in a child process, gets 45 s: on an H100 at a70db31 it had not finished after 100 s)
step bench_cifar "${GPU_CHECK_CIFAR_S:-180}" "$py" -m service.cli bench --device cuda --workload cifar \
  --out "$OUT/speed_cifar_cuda.json" --row-timeout 45 ${GPU_CHECK_CIFAR_ARGS:-}
