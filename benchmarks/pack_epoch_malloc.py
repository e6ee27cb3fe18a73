"""A demo pack's epoch with and without ``workers.allocator.keep_freed_memory``:
``python benchmarks/pack_epoch_malloc.py [--rounds 2] [--epochs 3]``.

Trains the demo's pack at seed 0 (``actsweep run mnist_classification --quick``: 12 members,
20,000 images, no noisy test copies) in two processes of one thread each, side by side, one with
glibc's thresholds raised and one with its defaults; the two swap cores' roles each round, so both
see the same machine. Prints each process's epoch times, its steady epoch (the median after the
first) and its peak resident memory, as JSON, then the ratio of the steady epochs.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import statistics


def train(keep: bool, epochs: int) -> dict:
    """The pack's epochs in this process, with glibc's thresholds raised when ``keep``."""
    from dataclasses import replace

    import torch

    from search_spaces import load_spec
    from service.driver.data import load_splits
    from service.settings import Settings
    from workers.allocator import keep_freed_memory
    from workers.fused import train_pack

    torch.set_num_threads(1)
    raised = keep_freed_memory() if keep else False
    spec = load_spec("mnist_classification", quick=True)
    cfgs = [replace(spec.trial_config(p), epochs=epochs, eval_noise=()) for p in spec.grid_points() if p.seed == 0]
    splits = load_splits(spec, Settings(download=False))
    seconds = [round(next(m for m in report if m)["epoch_seconds"], 2) for report in train_pack(cfgs, splits)]
    return {"thresholds_raised": raised, "epoch_s": seconds, "steady_epoch_s": statistics.median(seconds[1:]),
            "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)
    rounds = []
    with multiprocessing.get_context("spawn").Pool(2, maxtasksperchild=1) as pool:  # (a fresh process each)
        for number in range(args.rounds):
            order = (True, False) if number % 2 == 0 else (False, True)
            rounds.append(pool.starmap(train, [(keep, args.epochs) for keep in order]))
    steady = {keep: statistics.mean(r["steady_epoch_s"] for pair in rounds for r in pair if r["thresholds_raised"] == keep)
              for keep in (True, False)}
    result = {"rounds": rounds, "steady_epoch_s_default": round(steady[False], 2),
              "steady_epoch_s_raised": round(steady[True], 2), "speedup": round(steady[False] / steady[True], 3)}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
