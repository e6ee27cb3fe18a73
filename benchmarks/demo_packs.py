"""The demo's training without Ray: ``python benchmarks/demo_packs.py``.

`make demo` (``actsweep run mnist_classification --quick``) plans two fused packs of 12 members on
2 CPUs, one per seed, side by side. This trains the same two packs (the same configs, data and
engine, ``workers.fused.train_pack``) in two processes of one thread each, started together, and
prints each epoch's time and each pack's total as JSON: the part of the demo's wall time that no
start-up work can remove (docs/plan.md, "Where a run's time goes").
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import time


def train_one_seed(seed: int) -> dict:
    """One pack: the quick grid's points at ``seed``, trained to the end on one thread."""
    import torch

    from search_spaces import load_spec
    from service.driver.data import load_splits
    from service.settings import Settings
    from workers.allocator import keep_freed_memory
    from workers.fused import train_pack

    torch.set_num_threads(1)
    keep_freed_memory()  # as a trial's process does (workers.trainable)
    spec = load_spec("mnist_classification", quick=True)
    cfgs = [spec.trial_config(p) for p in spec.grid_points() if p.seed == seed]
    splits = load_splits(spec, Settings(download=False))
    started, epochs = time.perf_counter(), []
    for report in train_pack(cfgs, splits):
        epochs.append(round(next(m for m in report if m)["epoch_seconds"], 2))
    return {"seed": seed, "members": len(cfgs), "epoch_s": epochs, "total_s": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2, help="packs side by side, one per seed (the demo: 2)")
    args = parser.parse_args(argv)
    with multiprocessing.get_context("spawn").Pool(args.seeds) as pool:
        packs = pool.map(train_one_seed, range(args.seeds))
    print(json.dumps(packs, indent=2))
    return packs


if __name__ == "__main__":
    main()
