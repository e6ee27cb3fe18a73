"""ELU on the CPU through ATen's kernel (float32 ``expm1``, what trials run) or through a float64
``expm1`` rounded back (what they ran before): ``python benchmarks/elu_route.py [--rounds 2] [--epochs 3]``.

First each route alone on one thread, on a (4, 2000, 128) input (a third of an evaluation batch of
the demo's pack) and a 2,000 × 1,536 one, with torch's vector path named (``ATEN_CPU_CAPABILITY``
picks another). Then the demo's pack at seed 0 (``actsweep run mnist_classification --quick``: 12
members, 4 of them ELU, 20,000 images, no noisy test copies) trained in two processes of one thread
each, side by side, one per route; the two swap roles each round, so both see the same machine.
Prints JSON: the kernels' milliseconds, each process's epoch times and steady epoch (the median
after the first), and the ratio of the steady epochs.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the checkout's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def elu_float64(x, out):
    """ELU of ``x`` into ``out`` as trials computed it before: max(x, 0) + expm1(min(x, 0)), the
    expm1 in float64 and rounded back (the two terms never overlap, so the sum is exact)."""
    import torch

    negative = x.to(torch.float64, copy=True).clamp_max_(0).expm1_()
    torch.clamp_min(x, 0, out=out)
    return out.add_(negative.to(out.dtype))


def kernels() -> dict:
    """Milliseconds of each route alone (median of 20 after 2 warm-ups), on one thread."""
    import torch

    from benchmarks import median_seconds
    from workers.allocator import keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(1)
    found = {"vector_path": torch.backends.cpu.get_cpu_capability()}
    for shape in ((4, 2000, 128), (2000, 1536)):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * 3
        out = torch.empty_like(x)
        aten = median_seconds(lambda: torch.ops.aten.elu.out(x, 1.0, 1, 1, out=out), 20)
        wide = median_seconds(lambda: elu_float64(x, out), 20)
        found["x".join(map(str, shape))] = {"aten_ms": round(aten * 1e3, 3), "float64_ms": round(wide * 1e3, 3),
                                            "float64_over_aten": round(wide / aten, 2)}
    return found


def train(route: str, epochs: int) -> dict:
    """The pack's epochs in this process, its ELU through ``route`` (aten or float64)."""
    from dataclasses import replace

    import torch

    from search_spaces import load_spec
    from service.driver.data import load_splits
    from service.settings import Settings
    from workers import fused
    from workers.allocator import keep_freed_memory
    from workers.fused import train_pack

    torch.set_num_threads(1)
    keep_freed_memory()  # (as trial processes do)
    if route == "float64":  # (this process only: the grouped activation's ELU forward)
        fused._INTO["elu"] = (elu_float64, fused._INTO["elu"][1])
    spec = load_spec("mnist_classification", quick=True)
    cfgs = [replace(spec.trial_config(p), epochs=epochs, eval_noise=()) for p in spec.grid_points() if p.seed == 0]
    splits = load_splits(spec, Settings(download=False))
    seconds = [round(next(m for m in report if m)["epoch_seconds"], 2) for report in train_pack(cfgs, splits)]
    return {"route": route, "epoch_s": seconds, "steady_epoch_s": round(statistics.median(seconds[1:]), 2)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        result = {"kernels": pool.apply(kernels)}
    rounds = []
    with context.Pool(2, maxtasksperchild=1) as pool:  # (a fresh process each)
        for number in range(args.rounds):
            order = ("aten", "float64") if number % 2 == 0 else ("float64", "aten")
            rounds.append(pool.starmap(train, [(route, args.epochs) for route in order]))
    steady = {route: statistics.mean(r["steady_epoch_s"] for pair in rounds for r in pair if r["route"] == route)
              for route in ("aten", "float64")}
    result.update({"rounds": rounds, "steady_epoch_s_float64": round(steady["float64"], 2),
                   "steady_epoch_s_aten": round(steady["aten"], 2), "speedup": round(steady["float64"] / steady["aten"], 3)})
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
