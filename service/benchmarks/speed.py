"""How fast a sweep trains: a plain PyTorch loop vs actsweep per trial vs actsweep fused, in one run.

    actsweep bench [--trials-per-activation 8] [--epochs 3] [--train-examples 12800] [--dropout 0] [--repeats 1]

The workload is the GELU paper's 8 × 128 MNIST classifier (§3.1: Adam, batch 128, unit-norm
rows), the same for all three: every trial trains ``epochs`` passes of ``train_examples`` real MNIST
images (a fixed number of steps) and evaluates the training, validation and test sets after each
epoch, as actsweep's trials do.

- (a) plain: a PyTorch script per trial, as a researcher would write it (nn.Sequential, a
  DataLoader with shuffle, torch.optim.Adam), trials one after another on all cores;
- (b) per_trial: ``run_sweep`` with one Ray Tune trial per grid point, metrics to MLflow;
- (c) fused: ``run_sweep`` with ``execution.mode: fused``: packs of grid points trained as one
  batched model per Tune trial.

Printed and written as JSON: trial-epochs per second of each, the ratios (c)/(a) and (b)/(a), and
the achieved GFLOP/s against the machine's own matmul peak, measured here first. With
``--repeats N`` the three run in turn N times and each one's fastest round counts.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACTIVATIONS = ("gelu", "relu", "elu")
DEPTH, WIDTH, CLASSES, PIXELS = 8, 128, 10, 784  # the paper's classifier
BATCH, LR = 128, 1e-3  # examples per step; Adam's lr
EVAL_BATCH = 2000


def matmul_peak(threads: int, size: int = 2048, repeats: int = 10) -> float:
    """GFLOP/s of a large float32 matmul on ``threads`` threads: the best of ``repeats``."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(repeats + 2):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * size ** 3 / best / 1e9


def flops_per_trial_epoch(train: int, evaluated: int) -> float:
    """Matmul FLOPs of one trial-epoch: per training example 2 per weight forward, 2 for the
    weight gradient and 2 for the input gradient (which the first layer does not need); per
    evaluated example 2 per weight."""
    first = PIXELS * WIDTH
    weights = first + (DEPTH - 1) * WIDTH * WIDTH + WIDTH * CLASSES
    return (6 * weights - 2 * first) * train + 2 * weights * evaluated


# -- (a) the plain PyTorch script ---------------------------------------------------------------
def plain_trial(activation: str, dropout: float, seed: int, data: dict, epochs: int) -> float:
    """One trial as a researcher writes it; returns the last test error."""
    torch.manual_seed(seed)
    act = {"gelu": nn.GELU, "relu": nn.ReLU, "elu": nn.ELU}[activation]
    layers: list[nn.Module] = []
    for fan_in in [PIXELS] + [WIDTH] * (DEPTH - 1):
        layers += [nn.Linear(fan_in, WIDTH), act()] + ([nn.Dropout(dropout)] if dropout else [])
    model = nn.Sequential(nn.Flatten(), *layers, nn.Linear(WIDTH, CLASSES))
    with torch.no_grad():  # unit-norm rows, zero biases (the paper's init)
        for layer in model:
            if isinstance(layer, nn.Linear):
                layer.weight.div_(layer.weight.norm(dim=1, keepdim=True))
                layer.bias.zero_()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    loader = DataLoader(TensorDataset(data["train_x"], data["train_y"]), batch_size=BATCH, shuffle=True)
    error = float("nan")
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            for split in ("train", "val", "test"):
                wrong = 0
                for x, y in DataLoader(TensorDataset(data[f"{split}_x"], data[f"{split}_y"]), batch_size=EVAL_BATCH):
                    out = model(x)
                    F.cross_entropy(out, y)
                    wrong += (out.argmax(1) != y).sum().item()
                error = wrong / len(data[f"{split}_y"])
    return error


def run_plain(grid: list[dict], splits, epochs: int, threads: int) -> float:
    torch.set_num_threads(threads)
    data = {k: torch.as_tensor(getattr(splits, k)) for k in ("train_x", "train_y", "val_x", "val_y", "test_x", "test_y")}
    started = time.perf_counter()
    for point in grid:
        plain_trial(point["activation"], point["dropout"], point["seed"], data, epochs)
    return time.perf_counter() - started


# -- (b) and (c): actsweep ------------------------------------------------------------------------
def run_actsweep(overrides: dict, splits, home: Path) -> tuple[float, int]:
    from search_spaces import load_spec
    from service.orchestration.sweeps import connect_ray, run_sweep
    from service.settings import Settings

    settings = Settings(home=home, num_cpus=os.cpu_count(), dashboard=False, download=False)
    connect_ray(settings)  # the Ray start is not part of a sweep's time
    spec = load_spec("mnist_classification", overrides=overrides)
    started = time.perf_counter()
    outcome = run_sweep(spec, settings, splits=splits)
    return time.perf_counter() - started, outcome.trials


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="actsweep bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials-per-activation", type=int, default=8, help="seeds per activation (3 activations)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-examples", type=int, default=12_800, help="per epoch: 100 steps of 128")
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout of every trial (the paper: 0 or 0.5)")
    parser.add_argument("--pack-size", type=int, default=0, help="fused pack size (default: trials / cores)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of (a), (b), (c) in turn; each variant's fastest round counts "
                             "(this machine's speed drifts by 10-40%% between minutes)")
    parser.add_argument("--skip", choices=["plain", "per_trial", "fused"], action="append", default=[])
    parser.add_argument("--out", default="docs/benchmarks/speed.json")
    args = parser.parse_args(argv)

    import ray

    from workers.data import load_dataset

    cores = os.cpu_count() or 1
    seeds = list(range(args.trials_per_activation))
    grid = [{"activation": a, "dropout": args.dropout, "seed": s} for a in ACTIVATIONS for s in seeds]
    splits = load_dataset("mnist", Path(tempfile.gettempdir()) / "actsweep-bench-no-data", False, 5000,
                          args.train_examples)
    evaluated = len(splits.train_y) + len(splits.val_y) + len(splits.test_y)
    trial_epochs = len(grid) * args.epochs
    flops = flops_per_trial_epoch(len(splits.train_y), evaluated) * trial_epochs
    peak = matmul_peak(cores)
    print(f"workload: {len(grid)} trials × {args.epochs} epochs × {len(splits.train_y)} MNIST images "
          f"(batch {BATCH}, dropout {args.dropout:g}), evaluated on {evaluated} images per epoch; "
          f"{flops / 1e9:.0f} GFLOP in all")
    print(f"machine: {cores} cores, matmul peak {peak:.1f} GFLOP/s (float32 2048², {cores} threads); "
          f"torch {torch.__version__}")

    base = {"train_subset": args.train_examples, "epochs": args.epochs, "activation": list(ACTIVATIONS),
            "execution.rerun": True,  # train every variant (the trial cache would reuse the first one's runs)
            "lr": [LR], "dropout": [args.dropout], "seeds": seeds}
    pack = args.pack_size or -(-len(grid) // cores)
    variants = {
        "plain": lambda: run_plain(grid, splits, args.epochs, cores),
        "per_trial": lambda: run_actsweep({**base, "execution.cpus_per_trial": 1}, splits, home)[0],
        "fused": lambda: run_actsweep({**base, "execution.mode": "fused", "execution.pack_size": pack,
                                       "execution.cpus_per_trial": 1}, splits, home)[0],
    }
    rounds: dict[str, list[float]] = {name: [] for name in variants if name not in args.skip}
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        for round_ in range(1, args.repeats + 1):
            for name in rounds:
                seconds = variants[name]()
                rounds[name].append(round(seconds, 2))
                print(f"({'abc'[list(variants).index(name)]}) {name:<10} {seconds:8.1f} s  "
                      f"{trial_epochs / seconds:7.3f} trial-epochs/s  {flops / seconds / 1e9:6.1f} GFLOP/s "
                      f"({100 * flops / seconds / 1e9 / peak:.0f}% of peak)"
                      + (f"  [round {round_}/{args.repeats}]" if args.repeats > 1 else ""), flush=True)
        ray.shutdown()
    found: dict[str, dict] = {}
    for name, times in rounds.items():
        seconds = min(times)
        found[name] = {"seconds": seconds, "rounds": times, "trial_epochs_per_s": round(trial_epochs / seconds, 3),
                       "gflops": round(flops / seconds / 1e9, 1), "fraction_of_peak": round(flops / seconds / 1e9 / peak, 3)}
    ratios = {}
    if "plain" in found:
        for name in ("fused", "per_trial"):
            if name in found:
                ratios[f"{name}/plain"] = round(found["plain"]["seconds"] / found[name]["seconds"], 2)
    print(("ratios (fastest rounds): " if args.repeats > 1 else "ratios: ")
          + ", ".join(f"{k} = {v:.2f}×" for k, v in ratios.items()))
    report = {"workload": {"trials": len(grid), "epochs": args.epochs, "train_examples": len(splits.train_y),
                           "evaluated_examples": evaluated, "batch_size": BATCH, "dropout": args.dropout,
                           "model": f"{DEPTH} × {WIDTH} MLP", "fused_pack_size": pack, "gflop": round(flops / 1e9, 1)},
              "machine": {"cores": cores, "matmul_peak_gflops": round(peak, 1), "torch": torch.__version__,
                          "processor": platform.processor() or platform.machine()},
              "repeats": args.repeats, "results": found, "ratios": ratios}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"written: {args.out}")
    return report


if __name__ == "__main__":
    main()
