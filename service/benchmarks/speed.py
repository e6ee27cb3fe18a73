"""How fast a sweep trains: a plain PyTorch loop vs actsweep per trial vs actsweep fused, in one run.

    actsweep bench [--workload quick|paper] [--variants plain,per_trial,fused,...] [--device cpu|cuda]
                   [--trials-per-activation 8] [--epochs 3] [--train-examples N] [--repeats 1]

The workload is the GELU paper's 8 × 128 MNIST classifier (§3.1: Adam, batch 128, unit-norm
rows), the same for every variant: 3 activations × ``trials-per-activation`` seeds, each trial
``epochs`` passes over ``train_examples`` real MNIST images, each epoch followed by the
evaluation of the training, validation and test sets, as actsweep's trials do. The work is the
same for every variant: actsweep's trials skip Figure 3's noisy test copies (``eval_noise: []``),
which the plain script does not make and the FLOP count does not hold (with them, the last of
3 epochs costs about twice the others, and the steady rate would count it).

- ``quick``: 12,800 images per epoch (100 steps), for CI's smoke test; Ray's fixed start weighs.
- ``paper``: all 55,000 training images (a slice of Fig. 2's grid, the work users run).

Variants (``--variants``; ``paper`` runs them all):
- plain: a PyTorch script per trial, as a researcher writes it (nn.Sequential, a shuffling
  DataLoader, torch.optim.Adam), trials one after another on all cores;
- engine: the fused engine without the orchestration: ``workers.fused.train_pack`` called
  directly on one pack of every trial, on the device (all cores' threads on a CPU), no Ray Tune,
  no MLflow (service.benchmarks.engine); on a GPU its step is a CUDA graph (workers.graphs);
- engine_eager: the same with ``execution.cuda_graphs: false`` (GPU only: a CPU has no graphs);
- engine_tf32, engine_bf16: the engine with TF32 matmuls (GPU only) or bf16 autocast;
- per_trial: ``run_sweep``, one Ray Tune trial per grid point, metrics to MLflow;
- fused: ``execution.mode: fused``, one pack per core, one thread each (the default placement);
- fused_threads: one pack of every trial, with all cores as its threads (packs vs threads);
- fused_compile: fused with ``execution.compile: true`` (compile time included);
- fused_bf16: fused with ``execution.dtype: bf16``; fused_tf32: TF32 matmuls (CUDA only).

Each is timed end to end, and from the epochs its trials report, in steady state (epochs after
the first); the difference is its fixed start (Ray, Tune, MLflow, the first epoch's warm-up,
compilation, figures). After them the bench prints the aten ops one training step of a
planner-formed Fig. 2 pack dispatches, at 18 and at 360 members, beside a lone ``nn.Sequential``'s. Where MNIST
is not installed it runs on synthetic data of MNIST's shape (workers.data.synthetic) and says so:
the speed is the same, the numbers learnt are not. Achieved GFLOP/s are set against the peaks the bench measures first: a
large fp32 matmul, TF32 on a GPU, and bf16 where the hardware computes it (a GPU; a CPU with
AVX512-BF16 or AMX). On a CPU without native bf16 the bench still times an emulated bf16 matmul,
prints it as such, and takes no share of it, saying why. With ``--device cuda`` the trials run
on the GPU (packs take 1/packs of it each) and every timing is synchronised. With ``--repeats N`` the variants run in turn N times and each
one's fastest round counts.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from service.benchmarks.peaks import keeps_torch_threads, matmul_peak, sync

ACTIVATIONS = ("gelu", "relu", "elu")
DEPTH, WIDTH, CLASSES, PIXELS = 8, 128, 10, 784  # the paper's classifier
BATCH, LR = 128, 1e-3  # examples per step; Adam's lr
EVAL_BATCH = 2000
WORKLOADS = {  # train_examples per epoch (None: all 55,000), epochs, seeds per activation
    "quick": {"train_examples": 12_800, "epochs": 3, "trials_per_activation": 8},
    "paper": {"train_examples": None, "epochs": 3, "trials_per_activation": 8},
}
VARIANTS = ("plain", "per_trial", "engine", "engine_eager", "engine_tf32", "engine_bf16", "fused", "fused_threads",
            "fused_compile", "fused_bf16", "fused_tf32")
GPU_ONLY, CPU_ONLY = {"engine_eager", "engine_tf32", "fused_tf32"}, {"fused_threads"}  # (the defaults leave them out)
ENGINE = {"engine": {}, "engine_eager": {"cuda_graphs": False}, "engine_tf32": {"dtype": "tf32"},
          "engine_bf16": {"dtype": "bf16"}}  # the engine variants' trial settings


def peaks(cores: int, device: str, native_bf16: bool) -> dict[str, float]:
    """The device's matmul peaks: fp32 and bf16, and on a GPU TF32 (allowed only while measured).
    Emulated bf16 runs about 1 GFLOP/s on an AVX2 CPU: there a 512² matmul, three times, says enough."""
    bf16 = {} if native_bf16 else {"size": 512, "repeats": 3}
    found = {"fp32": matmul_peak(cores, device=device), "bf16": matmul_peak(cores, torch.bfloat16, device, **bf16)}
    if device == "cuda":
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        found["tf32"] = matmul_peak(cores, device=device)
        torch.backends.cuda.matmul.allow_tf32 = saved
    return {k: round(v, 1) for k, v in found.items()}


def native_peaks(peak: dict[str, float], native_bf16: bool) -> dict[str, float]:
    """The peaks a share may be taken of: those the hardware has. An emulated bf16 matmul (a CPU
    without AVX512-BF16 or AMX) is no peak: the fp32 variants ran at some 3,000% of it."""
    return {k: v for k, v in peak.items() if k != "bf16" or native_bf16}


def left_out_peaks(peak: dict[str, float], native_bf16: bool) -> str:
    """Why a measured peak is not a share's base, as a line to print ("" where none is left out)."""
    if native_bf16 or "bf16" not in peak:
        return ""
    return (f"no share of a bf16 peak: this CPU has no native bf16 (no avx512_bf16 or amx_bf16 flag), so its "
            f"bf16 matmuls are emulated ({peak['bf16']:.1f} GFLOP/s), which is no peak of the hardware")


def flops_per_trial_epoch(train: int, evaluated: int) -> float:
    """Matmul FLOPs of one trial-epoch: per training example 2 per weight forward, 2 for the
    weight gradient and 2 for the input gradient (which the first layer does not need); per
    evaluated example 2 per weight."""
    first = PIXELS * WIDTH
    weights = first + (DEPTH - 1) * WIDTH * WIDTH + WIDTH * CLASSES
    return (6 * weights - 2 * first) * train + 2 * weights * evaluated


# -- (a) the plain PyTorch script ---------------------------------------------------------------
def plain_trial(activation: str, dropout: float, seed: int, data: dict, epochs: int, device: str = "cpu") -> list[float]:
    """One trial as a researcher writes it; returns the seconds of each epoch (training and evaluation)."""
    torch.manual_seed(seed)
    act = {"gelu": nn.GELU, "relu": nn.ReLU, "elu": nn.ELU}[activation]
    layers: list[nn.Module] = []
    for fan_in in [PIXELS] + [WIDTH] * (DEPTH - 1):
        layers += [nn.Linear(fan_in, WIDTH), act()] + ([nn.Dropout(dropout)] if dropout else [])
    model = nn.Sequential(nn.Flatten(), *layers, nn.Linear(WIDTH, CLASSES)).to(device)
    with torch.no_grad():  # unit-norm rows, zero biases (the paper's init)
        for layer in model:
            if isinstance(layer, nn.Linear):
                layer.weight.div_(layer.weight.norm(dim=1, keepdim=True))
                layer.bias.zero_()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    loader = DataLoader(TensorDataset(data["train_x"], data["train_y"]), batch_size=BATCH, shuffle=True)
    seconds = []
    for _ in range(epochs):
        started = time.perf_counter()
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            for split in ("train", "val", "test"):
                wrong = 0
                for x, y in DataLoader(TensorDataset(data[f"{split}_x"], data[f"{split}_y"]), batch_size=EVAL_BATCH):
                    x, y = x.to(device), y.to(device)
                    out = model(x)
                    F.cross_entropy(out, y)
                    wrong += (out.argmax(1) != y).sum().item()
        sync(device)
        seconds.append(time.perf_counter() - started)
    return seconds


def run_plain(grid: list[dict], splits, epochs: int, threads: int, device: str) -> dict:
    torch.set_num_threads(threads)
    data = {k: torch.as_tensor(getattr(splits, k)) for k in ("train_x", "train_y", "val_x", "val_y", "test_x", "test_y")}
    started = time.perf_counter()
    epoch_seconds = [s for point in grid
                     for s in plain_trial(point["activation"], point["dropout"], point["seed"], data, epochs, device)[1:]]
    # one trial at a time: the steady rate is one trial-epoch per (median) epoch
    return {"seconds": time.perf_counter() - started, "steady_rate": 1 / statistics.median(epoch_seconds)}


# -- (b) and (c): actsweep ------------------------------------------------------------------------
def _epoch_clock():
    """A Tune callback keeping, per reported epoch after a trial's first, trial-epochs per second."""
    from ray import tune

    from workers.trial import member_results

    class EpochClock(tune.Callback):
        def __init__(self):
            self.rates: list[float] = []

        def on_trial_result(self, iteration, trials, trial, result, **info):
            members = [values for _, values in member_results(result)]
            live = [m for m in members if m.get("epoch_seconds")]
            if live and result.get("epoch", live[0].get("epoch", 1)) > 1:
                self.rates.append(len(live) / live[0]["epoch_seconds"])

    return EpochClock()


def run_engine(grid: list[dict], splits, epochs: int, threads: int, device: str, **settings) -> dict:
    """One pack of every trial through ``train_pack``, timed as the other variants; ``settings``
    change the trials' (``cuda_graphs``, ``dtype``)."""
    from dataclasses import replace

    from service.benchmarks.engine import engine_rate
    from workers.trial import TrialConfig

    torch.set_num_threads(threads)
    base = TrialConfig("gelu", LR, 0.0, 0, epochs=epochs, batch_size=BATCH, eval_noise=(),
                       model={"kind": "mlp", "depth": DEPTH, "width": WIDTH, "init": "unit_norm_rows"}, **settings)
    cfgs = sorted((replace(base, activation=p["activation"], dropout=p["dropout"], seed=p["seed"]) for p in grid),
                  key=lambda c: (c.activation, c.seed))  # (as the planner sorts a pack: one kernel per activation)
    started = time.perf_counter()
    rate = engine_rate(cfgs, splits, device, epochs)
    return {"seconds": time.perf_counter() - started, "steady_rate": rate["steady_trial_epochs_per_s"]}


def load_mnist_or_synthetic(train_examples: int | None):
    """MNIST's splits as the sweeps load them, or, where MNIST is not installed, synthetic data
    of its shape (and a line saying so)."""
    from workers.data import DatasetNotFound, load_dataset
    from workers.data.synthetic import mnist_shaped

    try:
        return load_dataset("mnist", Path(tempfile.gettempdir()) / "actsweep-bench-no-data", False, 5000, train_examples)
    except DatasetNotFound:
        splits = mnist_shaped(train=train_examples or 55_000)
        print(f"MNIST is not installed here: the bench runs on {splits.source} "
              f"({len(splits.train_y)} training images); speed only, nothing learnt")
        return splits


def print_step_ops(device: str) -> dict:
    """The aten ops of one training step of planner-formed Fig. 2 packs, and of a lone network."""
    from service.benchmarks.engine import fig2_pack, lone_sequential_ops, step_ops
    from workers.data.synthetic import mnist_shaped

    data = mnist_shaped(train=512, val=64, test=64)
    counts = {f"pack_{18 * seeds}": sum(step_ops(fig2_pack(seeds), data, device).values()) for seeds in (1, 20)}
    counts["lone_sequential"] = lone_sequential_ops()
    print(f"aten ops per training step{' (a CUDA graph replay)' if device == 'cuda' else ''}: "
          f"a Fig. 2 pack of 18 members {counts['pack_18']}, of 360 members "
          f"{counts['pack_360']}; a lone nn.Sequential with dropout and torch.optim.Adam {counts['lone_sequential']}",
          flush=True)
    return counts


def run_actsweep(overrides: dict, splits, home: Path, slots: int) -> dict:
    """One sweep of the workload; ``slots``: the Tune trials that run at once."""
    from search_spaces import load_spec
    from service.driver.sweeps import connect_ray, run_sweep
    from service.settings import Settings

    settings = Settings(home=home, num_cpus=os.cpu_count(), dashboard=False, download=False)
    connect_ray(settings)  # the Ray start is not part of a sweep's time
    spec = load_spec("mnist_classification", overrides=overrides)
    clock = _epoch_clock()
    started = time.perf_counter()
    run_sweep(spec, settings, splits=splits, callbacks=(clock,))
    return {"seconds": time.perf_counter() - started, "steady_rate": slots * statistics.median(clock.rates)}


def variant_overrides(name: str, base: dict, trials: int, cores: int, pack_size: int, device: str) -> tuple[dict, int]:
    """A variant's spec overrides and how many of its Tune trials run at once."""
    if name == "per_trial":
        gpu = {"execution.gpus_per_trial": 1 / cores} if device == "cuda" else {}
        return {**base, "execution.cpus_per_trial": 1, **gpu}, cores
    packs = 1 if name == "fused_threads" else max(1, min(cores, -(-trials // pack_size) if pack_size else cores))
    size = pack_size or -(-trials // packs)
    overrides = {**base, "execution.mode": "fused", "execution.pack_size": size,
                 "execution.cpus_per_trial": cores if name == "fused_threads" else 1}
    if device == "cuda":  # the packs share the GPU: each reserves its fraction of it
        overrides["execution.gpus_per_trial"] = 1 / packs
    overrides.update({"fused_compile": {"execution.compile": True}, "fused_bf16": {"execution.dtype": "bf16"},
                      "fused_tf32": {"execution.dtype": "tf32"}}.get(name, {}))
    return overrides, packs


@keeps_torch_threads
def main(argv: list[str] | None = None) -> dict:
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--workload", choices=[*WORKLOADS, "scale", "bookkeeping", "load", "cifar", "start"], default="quick")
    chosen, rest = first.parse_known_args(argv)
    if chosen.workload == "scale":  # bookkeeping at 100-1,000 trials: its own options
        from service.benchmarks.scale import main as scale
        return {"rows": scale(rest)}
    if chosen.workload == "bookkeeping":  # the MLflow logger alone, with a stand-in trainable
        from service.benchmarks.bookkeeping import main as bookkeeping
        return {"rows": bookkeeping(rest)}
    if chosen.workload == "cifar":  # the papers' convnets: plain script vs actsweep's trials and packs
        from service.benchmarks.cifar import main as cifar
        return cifar(rest)
    if chosen.workload == "load":  # the REST API under many clients, with a real Ray head behind it
        from service.benchmarks.load import main as load
        return load(rest)
    if chosen.workload == "start":  # how fast a sweep starts: CLI and REST, cold and warm, before and after
        from service.benchmarks.start import main as start
        return start(rest)
    parser = argparse.ArgumentParser(prog="actsweep bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=[*WORKLOADS, "scale", "bookkeeping", "load", "cifar", "start"], default="quick",
                        help="quick, paper, scale, bookkeeping, load, cifar or start (`actsweep bench --workload scale --help`)")
    parser.add_argument("--variants", default=None,
                        help=f"comma list of {', '.join(VARIANTS)} (quick: plain,per_trial,fused; paper: all for the device)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--trials-per-activation", type=int, default=None, help="seeds per activation (3 activations)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--train-examples", type=int, default=None, help="per epoch (quick: 12,800; paper: all 55,000)")
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout of every trial (the paper: 0 or 0.5)")
    parser.add_argument("--pack-size", type=int, default=0, help="fused pack size (default: trials / cores)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds of the variants in turn; each variant's fastest round counts "
                             "(this machine's speed drifts by 10-40%% between minutes)")
    parser.add_argument("--skip", choices=VARIANTS, action="append", default=[])
    parser.add_argument("--out", default="docs/benchmarks/speed.json")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    workload = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in WORKLOADS[args.workload].items()}
    names = args.variants.split(",") if args.variants else (
        ["plain", "per_trial", "fused"] if args.workload == "quick" else
        [v for v in VARIANTS if v not in (CPU_ONLY if args.device == "cuda" else GPU_ONLY)])
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)}; accepted: {', '.join(VARIANTS)}")
    names = [n for n in names if n not in args.skip]
    if workload["epochs"] < 2:
        parser.error("--epochs: at least 2 (the steady state is measured on the epochs after the first)")

    import ray

    from workers.precision import has_native_bf16

    cores = os.cpu_count() or 1
    slots = 2 if args.device == "cuda" else cores  # packs (or trials) at once: on a GPU two share it
    seeds = list(range(workload["trials_per_activation"]))
    grid = [{"activation": a, "dropout": args.dropout, "seed": s} for a in ACTIVATIONS for s in seeds]
    splits = load_mnist_or_synthetic(workload["train_examples"])
    epochs = workload["epochs"]
    evaluated = len(splits.train_y) + len(splits.val_y) + len(splits.test_y)
    trial_epochs = len(grid) * epochs
    per_trial_epoch = flops_per_trial_epoch(len(splits.train_y), evaluated)
    flops = per_trial_epoch * trial_epochs
    native_bf16 = has_native_bf16() if args.device == "cpu" else True
    peak = peaks(cores, args.device, native_bf16)
    if not native_bf16 and "fused_bf16" in names and not args.variants:
        names = [n for n in names if n not in ("fused_bf16", "engine_bf16")]
        print(f"this CPU has no native bf16 (bf16 matmuls at {peak['bf16']:.1f} GFLOP/s, "
              f"{peak['fp32'] / peak['bf16']:.0f}× slower than fp32): fused_bf16 and engine_bf16 are left out; "
              f"--variants fused_bf16 runs it anyway")
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine()
    print(f"workload {args.workload}: {len(grid)} trials × {epochs} epochs × {len(splits.train_y)} MNIST images "
          f"(batch {BATCH}, dropout {args.dropout:g}), evaluated on {evaluated} images per epoch; "
          f"{flops / 1e9:.0f} GFLOP in all")
    print(f"machine: {cores} cores, {device_name}; matmul peaks (GFLOP/s): "
          + ", ".join(f"{k} {v:.1f}" for k, v in peak.items())
          + ("" if native_bf16 else " (this CPU has no native bf16: bf16 matmuls are emulated)")
          + f"; torch {torch.__version__}", flush=True)
    shared = native_peaks(peak, native_bf16)  # the peaks the shares below are of
    if left_out_peaks(peak, native_bf16):
        print(left_out_peaks(peak, native_bf16), flush=True)

    base = {"train_subset": workload["train_examples"], "epochs": epochs, "activation": list(ACTIVATIONS),
            "execution.rerun": True,  # train every variant (the trial cache would reuse the first one's runs)
            "eval_noise": [],  # the plain script's work, and the FLOP count's: no noisy test copies
            "lr": [LR], "dropout": [args.dropout], "seeds": seeds}
    rounds: dict[str, list[dict]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        for round_ in range(1, args.repeats + 1):
            for name in names:
                if name == "plain":
                    timed = run_plain(grid, splits, epochs, cores, args.device)
                elif name in ENGINE:
                    timed = run_engine(grid, splits, epochs, cores, args.device, **ENGINE[name])
                else:
                    overrides, at_once = variant_overrides(name, base, len(grid), slots, args.pack_size, args.device)
                    timed = run_actsweep(overrides, splits, home, at_once)
                rounds[name].append(timed)
                steady_gflops = timed["steady_rate"] * per_trial_epoch / 1e9
                shares = ", ".join(f"{100 * steady_gflops / shared[k]:.{1 if k == 'fp32' else 2}f}% of {k}"
                                   for k in ("fp32", "tf32", "bf16") if k in shared)
                print(f"{name:<14} {timed['seconds']:7.1f} s  {trial_epochs / timed['seconds']:6.3f} trial-epochs/s end to "
                      f"end, {timed['steady_rate']:6.3f} steady ({steady_gflops:5.1f} GFLOP/s, "
                      f"{shares} peak), fixed start "
                      f"{timed['seconds'] - trial_epochs / timed['steady_rate']:5.1f} s"
                      + (f"  [round {round_}/{args.repeats}]" if args.repeats > 1 else ""), flush=True)
        ray.shutdown()
    found: dict[str, dict] = {}
    for name, timings in rounds.items():
        best = min(timings, key=lambda t: t["seconds"])
        steady_gflops = best["steady_rate"] * per_trial_epoch / 1e9
        found[name] = {
            "seconds": round(best["seconds"], 2), "rounds": [round(t["seconds"], 2) for t in timings],
            "trial_epochs_per_s": round(trial_epochs / best["seconds"], 3),
            "steady_trial_epochs_per_s": round(best["steady_rate"], 3),
            "fixed_start_s": round(best["seconds"] - trial_epochs / best["steady_rate"], 1),
            "gflops": round(flops / best["seconds"] / 1e9, 1), "steady_gflops": round(steady_gflops, 1),
            "fraction_of_peak": round(flops / best["seconds"] / 1e9 / peak["fp32"], 3),
            "steady_fraction_of_fp32_peak": round(steady_gflops / peak["fp32"], 3),
            **{f"steady_fraction_of_{k}_peak": round(steady_gflops / shared[k], 4) for k in ("tf32", "bf16") if k in shared},
        }
    ops = print_step_ops(args.device)  # (after the timed variants: a 360-member pack's step leaves its memory behind)
    ratios = {}
    for over, under in [("fused", "plain"), ("per_trial", "plain"), ("engine", "plain"), ("engine", "fused"),
                        ("engine", "engine_eager"), ("engine_tf32", "engine"), ("engine_bf16", "engine"),
                        ("fused_threads", "fused"),
                        ("fused_compile", "fused"), ("fused_bf16", "fused"), ("fused_tf32", "fused")]:
        if over in found and under in found:
            ratios[f"{over}/{under}"] = round(found[under]["seconds"] / found[over]["seconds"], 2)
            if under != "plain":
                ratios[f"{over}/{under} steady"] = round(found[over]["steady_trial_epochs_per_s"]
                                                         / found[under]["steady_trial_epochs_per_s"], 2)
    print(("ratios, end to end unless marked (fastest rounds): " if args.repeats > 1 else "ratios, end to end unless marked: ")
          + ", ".join(f"{k} = {v:.2f}×" for k, v in ratios.items()))
    report = {"workload": {"name": args.workload, "trials": len(grid), "epochs": epochs,
                           "train_examples": len(splits.train_y), "evaluated_examples": evaluated, "batch_size": BATCH,
                           "dropout": args.dropout, "model": f"{DEPTH} × {WIDTH} MLP",
                           "fused_pack_size": args.pack_size or -(-len(grid) // slots), "gflop": round(flops / 1e9, 1)},
              "machine": {"cores": cores, "device": args.device, "processor": device_name,
                          "matmul_peak_gflops": peak["fp32"], "peaks_gflops": peak, "native_bf16": native_bf16,
                          "torch": torch.__version__},
              "data": splits.source, "step_ops": ops, "repeats": args.repeats, "results": found, "ratios": ratios}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"written: {args.out}")
    return report


if __name__ == "__main__":
    main()
