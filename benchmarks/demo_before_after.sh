#!/bin/bash
# make demo's sweep timed at an older commit and at this checkout, alternating, in one run.
#   bash benchmarks/demo_before_after.sh OLD_COMMIT [ROUNDS] [ACTSWEEP RUN ARGUMENTS...]
# e.g. bash benchmarks/demo_before_after.sh 9f15b6b 2
#      bash benchmarks/demo_before_after.sh 9f15b6b 3 --set epochs=1 --set train_subset=2000 --set 'eval_noise=[]'
# Each run gets a fresh ACTSWEEP_HOME (a new MLflow store, no trial cache) and this checkout's
# environment (.ci/venv.sh), with PYTHONPATH pointing at the commit under test. Prints each run's
# "Wall time" line and the time until its process exited (what a user waits; the line is printed
# before Ray stops); the logs stay in the folder it names.
set -euo pipefail
old=${1:?usage: demo_before_after.sh OLD_COMMIT [ROUNDS] [ARGS...]}
rounds=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
args=("$@")
root=$(cd "$(dirname "$0")/.." && pwd)
python="$(bash "$root/.ci/venv.sh")/bin/python"
work=$(mktemp -d /tmp/demo-before-after.XXXX)
git -C "$root" worktree add -q --detach "$work/before" "$old"
trap 'git -C "$root" worktree remove --force "$work/before"' EXIT
for round in $(seq "$rounds"); do
  for side in before after; do
    code=$([ "$side" = after ] && echo "$root" || echo "$work/before")
    mkdir -p "$work/home-$side-$round"
    began=$EPOCHREALTIME
    (cd /tmp && ACTSWEEP_HOME="$work/home-$side-$round" PYTHONPATH="$code" "$python" -c \
      "import sys; from service.cli import main; sys.argv = ['actsweep', *sys.argv[1:]]; sys.exit(main())" \
      run mnist_classification --quick "${args[@]}" > "$work/$side-$round.log" 2>&1) || true
    exited=$(awk -v a="$began" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    echo "$side $round: exited after $exited s; $(grep -h 'Wall time' "$work/$side-$round.log" || echo "failed: see $work/$side-$round.log")"
  done
done
echo "logs: $work"
