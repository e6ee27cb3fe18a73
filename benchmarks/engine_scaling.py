"""How the fused engine's rate grows with the pack, on a CPU or a GPU: ``workers.fused.train_pack``
alone (``actsweep bench``'s engine variants), one pack of every trial per row.

    python benchmarks/engine_scaling.py --device cuda --members 24,96,384 --variants engine,engine_eager

The Fig. 2 MLP on MNIST, or synthetic data of its shape where MNIST is not installed; each row
prints its steady trial-epochs per second and its share of each peak the run measured first.
"""
from __future__ import annotations

from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> list[dict]:
    """The rows of the module's docstring, printed and returned (and written to ``--out``)."""
    import argparse
    import json
    import os

    from service.benchmarks.speed import (ACTIVATIONS, ENGINE, flops_per_trial_epoch, left_out_peaks,
                                          load_mnist_or_synthetic, native_peaks, peaks, run_engine)
    from workers.precision import has_native_bf16

    parser = argparse.ArgumentParser(prog="python benchmarks/engine_scaling.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--members", default="24,96,384", help="comma list of pack sizes (multiples of 3)")
    parser.add_argument("--variants", default="engine,engine_eager", help=f"comma list of {', '.join(ENGINE)}")
    parser.add_argument("--skip", action="append", default=[], help="VARIANT:MEMBERS to leave out (repeatable)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--out", default=None, help="a JSON file for the rows")
    args = parser.parse_args(argv)
    splits = load_mnist_or_synthetic(None)
    cores = os.cpu_count() or 1
    native_bf16 = has_native_bf16() if args.device == "cpu" else True
    measured = peaks(cores, args.device, native_bf16)
    peak = native_peaks(measured, native_bf16)  # shares are taken only of the peaks the hardware has
    evaluated = len(splits.train_y) + len(splits.val_y) + len(splits.test_y)
    per_trial_epoch = flops_per_trial_epoch(len(splits.train_y), evaluated)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{name}; peaks (GFLOP/s): " + ", ".join(f"{k} {v:.1f}" for k, v in peak.items()) + f"; torch {torch.__version__}",
          flush=True)
    if left_out_peaks(measured, native_bf16):
        print(left_out_peaks(measured, native_bf16), flush=True)
    rows = []
    for members in (int(m) for m in args.members.split(",")):
        grid = [{"activation": a, "dropout": args.dropout, "seed": s} for a in ACTIVATIONS for s in range(members // 3)]
        for variant in args.variants.split(","):
            if f"{variant}:{members}" in args.skip:
                continue
            try:
                timed = run_engine(grid, splits, args.epochs, cores, args.device, **ENGINE[variant])
            except Exception as exc:  # (out of memory at the largest pack, say: the other rows still count)
                print(f"{len(grid):5d} members {variant:<13} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                rows.append({"members": len(grid), "variant": variant, "failed": f"{type(exc).__name__}: {str(exc)[:200]}"})
                if args.device == "cuda":
                    torch.cuda.empty_cache()
                continue
            gflops = timed["steady_rate"] * per_trial_epoch / 1e9
            row = {"members": len(grid), "variant": variant, "steady_trial_epochs_per_s": round(timed["steady_rate"], 2),
                   "seconds": round(timed["seconds"], 1), "steady_gflops": round(gflops, 1),
                   **{f"share_of_{k}": round(gflops / v, 4) for k, v in peak.items()}}
            rows.append(row)
            print(f"{len(grid):5d} members {variant:<13} {row['steady_trial_epochs_per_s']:8.2f} trial-epochs/s steady "
                  f"({gflops:8.1f} GFLOP/s: " + ", ".join(f"{100 * gflops / v:.2f}% of {k}" for k, v in peak.items())
                  + f"), {row['seconds']:.1f} s in all", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"device": name, "peaks_gflops": peak, "data": splits.source,
                                              "epochs": args.epochs, "rows": rows}, indent=2))
    return rows


if __name__ == "__main__":
    main()
