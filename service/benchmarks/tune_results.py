"""What Tune's own result files cost a sweep's driver when each result is a fused pack's: a Tune
experiment of 2 trials, each reporting 20 results of MEMBERS members × the 16 metrics a classifier's
epoch logs, as fast as Tune takes them; with Tune's default result loggers (progress.csv,
result.json, TensorBoard events), with result.json alone (what a sweep's driver keeps:
TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1 and Tune's JsonLoggerCallback), and with none. Each in a fresh
process: its wall time and its peak memory, all rows in one run.

    python -m service.benchmarks.tune_results [--members 204] [--results 20]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from service.benchmarks.bookkeeping import METRICS


def _pack_result(epoch: int, members: int) -> dict:
    return {"epoch": epoch, "members": {str(i): {"epoch": epoch, **{m: 1.0 / (epoch + i + k) for k, m in enumerate(METRICS)}}
                                        for i in range(members)}}


def _one(members: int, results: int, files: str) -> dict:
    """The experiment in this process: {"wall_s", "peak_mb"}."""
    import resource
    import tempfile
    import time

    import ray
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    def trainable(config):
        for epoch in range(1, results + 1):
            tune.report(_pack_result(epoch, members))

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    started = time.perf_counter()
    tune.Tuner(trainable, param_space={"x": tune.grid_search([0, 1])},
               run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(), verbose=0,
                                         callbacks=[JsonLoggerCallback()] if files == "result.json" else [])).fit()
    wall = time.perf_counter() - started
    ray.shutdown()
    return {"wall_s": round(wall, 2), "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=204)
    parser.add_argument("--results", type=int, default=20)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # (a row, in its own process)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(_one(args.members, args.results, args.one)))
        return []
    rows = []
    for files in ("all", "result.json", "none"):
        env = {**os.environ, "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "0" if files == "all" else "1", "RAY_ADDRESS": ""}
        done = subprocess.run([sys.executable, "-m", "service.benchmarks.tune_results", "--one", files,
                               "--members", str(args.members), "--results", str(args.results)],
                              env=env, capture_output=True, text=True, check=True)
        row = {"tune_result_files": files, **json.loads(done.stdout.strip().splitlines()[-1])}
        rows.append(row)
        print(f"Tune's result files {files:>11}: 2 trials × {args.results} results of {args.members} members in "
              f"{row['wall_s']:.1f} s, process peak {row['peak_mb']} MB", flush=True)
    return rows


if __name__ == "__main__":
    main()
