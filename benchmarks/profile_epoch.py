"""Where a fused pack's epoch goes: ``python benchmarks/profile_epoch.py [--members 12]``.

The paper workload (mnist_classification's trials: the GELU paper's 8 × 128 classifier, Adam,
batch 128, all 55,000 training images, 70,000 evaluated per epoch, 13 noisy test copies after the
last) as one fused pack of ``--members`` (4 per activation: gelu, relu, elu; lr 1e-3, no dropout)
on ``--threads`` threads, as one pack of `actsweep bench --workload paper` trains; with
``--seed-slice``, the first members of Figure 2's grid at one seed, as the record's slices ran. Epoch 1 warms
up; epoch 2 is timed without the profiler (trial-epochs/s and % of the fp32 matmul peak measured
in the same run); epoch 3, the last, runs under torch.profiler. Prints, as JSON, the time of each
phase the training loop labels (train.forward, train.backward, train.optimizer, evaluate,
unit_statistics, noise_robustness; the rest is data order, batching and bookkeeping) and the ops
with the most self time.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

from search_spaces import load_spec
from service.benchmarks.speed import flops_per_trial_epoch, matmul_peak
from service.driver.sweeps import load_splits
from service.settings import Settings
from workers.fused import train_pack
from workers.trial import GridPoint, TrialConfig

PHASES = ("train.forward", "train.backward", "train.optimizer", "evaluate", "unit_statistics", "noise_robustness")


def pack_configs(count: int, seed_slice: bool = False) -> list[TrialConfig]:
    """``count`` of the bench's trials (activations × seeds at lr 1e-3, no dropout), or with
    ``seed_slice`` the first ``count`` of Figure 2's grid at seed 0 (activation × lr × dropout), as a
    seed slice of the record packs them."""
    spec = load_spec("mnist_classification")
    if seed_slice:
        points = [GridPoint(activation, lr, dropout, 0) for dropout in (0.0, 0.5) for activation in ("gelu", "relu", "elu")
                  for lr in (1e-3, 1e-4, 1e-5)][:count]
    else:
        points = [GridPoint(activation, 1e-3, 0.0, seed) for activation in ("gelu", "relu", "elu")
                  for seed in range(-(-count // 3))][:count]
    return [replace(spec.trial_config(p), epochs=3) for p in points]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top", type=int, default=12, help="ops listed, by self time")
    parser.add_argument("--seed-slice", action="store_true", help="Figure 2's grid at one seed, not 4 seeds at one lr")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    peak = matmul_peak(args.threads)
    splits = load_splits(load_spec("mnist_classification"), Settings(download=False))
    cfgs = pack_configs(args.members, args.seed_slice)
    epochs = train_pack(cfgs, splits)
    next(epochs)  # warm-up
    started = time.perf_counter()
    next(epochs)
    steady = time.perf_counter() - started
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        next(epochs)
        profiled = time.perf_counter() - started
    events = prof.key_averages()
    phases = {e.key: e.cpu_time_total / 1e6 for e in events if e.key in PHASES}
    ops = sorted((e for e in events if e.key not in PHASES and not e.key.startswith("ProfilerStep")),
                 key=lambda e: e.self_cpu_time_total, reverse=True)[:args.top]
    flops = len(cfgs) * flops_per_trial_epoch(len(splits.train_y), len(splits.train_y) + len(splits.val_y)
                                              + len(splits.test_y))
    result = {
        "pack": f"{len(cfgs)} members of mnist_classification's classifier: " + (
            "Figure 2's grid at seed 0 (activation × lr × dropout)" if args.seed_slice
            else "gelu, relu, elu × 4 seeds, lr 1e-3, dropout 0"),
        "threads": args.threads, "fp32_peak_gflops": round(peak, 1),
        "steady_epoch_s": round(steady, 2), "trial_epochs_per_s": round(len(cfgs) / steady, 3),
        "steady_percent_of_fp32_peak": round(100 * flops / steady / 1e9 / peak, 1),
        "profiled_last_epoch_s": round(profiled, 2),
        "phases_s": {name: round(phases.get(name, 0.0), 2) for name in PHASES},
        "phases_share_of_last_epoch": {name: round(phases.get(name, 0.0) / profiled, 3) for name in PHASES},
        "top_ops_self_s": [{"op": e.key, "self_s": round(e.self_cpu_time_total / 1e6, 2), "calls": e.count,
                            "share": round(e.self_cpu_time_total / 1e6 / profiled, 3)} for e in ops],
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
