"""How fast the papers' convnets train: ``actsweep bench --workload cifar [--device cuda]``, or
``python -m service.benchmarks.cifar``.

Nets, at their protocol's width and batch (search_spaces): cifar10_shallow (GELU §3.5, batch 128),
cifar100_wrn (WRN-40-4, GELU §3.5, batch 128) and elu_cifar100_11layer (ELU §4.2, batch 100), on
CIFAR's files where ACTSWEEP_DATA_DIR holds them, else on synthetic images written in CIFAR's
layout (the bench says so: speed only, nothing learnt). Preprocessing (ZCA, GCN) is off: it is done
once before training and changes no step's time.

Rows, each a fixed number of training steps (``--steps``, after ``--warmup`` steps not timed),
extrapolated to an epoch of 45,000 images (:data:`EPOCH_IMAGES`), evaluation not included:

- plain: the same net (workers.models) as a user's script: a Dataset of the uint8 images with
  torchvision transforms on the CPU (RandomCrop(32, padding=4), RandomHorizontalFlip where the
  protocol augments, ToTensor), a shuffling DataLoader, torch.optim, eager steps, PyTorch's own
  precision defaults (cuDNN's TF32 on);
- per_trial: actsweep's lone trial (workers.train: data on the device, augmentation there, the
  one training step, a CUDA graph on a GPU) in fp32 (TF32 off);
- per_trial_tf32: the same with ``execution.dtype: tf32`` (a CPU has no TF32: fp32 again);
- per_trial_channels_last: per_trial in channels-last layout; per_trial_tf32_channels_last: both;
- packed rows (``--pack`` trials of the net at once; the nets of ``--packed-nets``):
  processes (that many trial processes side by side: fractional GPUs; each times its own window,
  the rates add), streams (that many trials in one process, each stepping on its own CUDA stream;
  on a CPU one after another; in a child process of its own, given ``--row-timeout`` seconds: on an
  H100 it once ran past 100 s where per_trial takes 1 s, and a row that hangs must not take the rest
  of the bench with it), grouped_conv (cifar_shallow only: the members' convolutions as one
  grouped convolution, batch norms as one over their channels, the read-out a grouped 1×1
  convolution; a bench prototype of a conv pack, not yet a trial kind).

torch.func's vmap over the members was not made a row: its batch norm updates running statistics
in place inside the vmap, which the prototype (benchmarks/cnn_packs.py) ran member by member.

Per row: images/s, trial-epochs/s (all of a row's trials together), the achieved GFLOP/s (the
convolutions' and linear layers' multiply-adds, × 2 × 3 for forward and backward), and their share
of the fp32 and TF32 matmul peaks measured in the same run. On a GPU the JSON's ``choices`` name,
per net, the fastest way for several trials to share the GPU and whether channels-last was faster:
workers.convnet_plan reads them (the execution plan's choice).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from service.benchmarks.peaks import keeps_torch_threads, sync

EPOCH_IMAGES = 45_000  # an epoch's images: CIFAR's 50,000 less a 5,000 validation split
NETS = {  # experiment → (the net's activation, lr, dropout): one grid point of its sweep
    "cifar10_shallow": ("gelu_tanh", 1e-3, 0.5),
    "cifar100_wrn": ("gelu_tanh", 0.1, 0.3),
    "elu_cifar100_11layer": ("elu", 0.015, 0.0),
}
ROWS = ("plain", "per_trial", "per_trial_tf32", "per_trial_channels_last", "per_trial_tf32_channels_last",
        "processes", "streams", "grouped_conv")
PACKED = ("processes", "streams", "grouped_conv")
ISOLATED = ("streams",)  # rows run in a child process with a time limit (the module docstring says why)


# -- the nets, the data -----------------------------------------------------------------------------

def trial_config(experiment: str, tiny: bool = False, batch: int | None = None):
    """The TrialConfig of one trial of ``experiment`` (its protocol's net, batch, optimiser,
    schedule and augmentation); ``tiny``: its spec's quick net."""
    from search_spaces import load_spec
    from workers.trial import GridPoint

    spec = load_spec(experiment)
    activation, lr, dropout = NETS[experiment]
    cfg = spec.trial_config(GridPoint(activation, lr, dropout, 0))
    cfg = replace(cfg, dtype="fp32", cuda_graphs=True, compile=False)
    if tiny:
        cfg = replace(cfg, model=load_spec(experiment, quick=True).model.model_dump())
    return replace(cfg, batch_size=batch) if batch else cfg


def cifar_splits(dataset: str, data_dir: Path | None, scratch: Path):
    """CIFAR's splits from ``data_dir``, or from synthetic files in CIFAR's layout (and a line saying so)."""
    from workers.data import DatasetNotFound, load_dataset
    from workers.data.cifar import write_synthetic

    if data_dir is not None:
        try:
            return load_dataset(dataset, data_dir, False, 5_000), False
        except DatasetNotFound:
            pass
    write_synthetic(scratch, dataset, train=10_000, test=1_000)
    print(f"{dataset} is not installed here: the bench runs on synthetic images in CIFAR's layout "
          f"(10,000 random training images); speed only, nothing learnt", flush=True)
    return load_dataset(dataset, scratch, False, 1_000), True


def flops_per_training_image(model: nn.Module, in_shape: tuple) -> float:
    """Multiply-adds of the convolutions and linear layers for one image, × 2 (a multiply-add is two
    FLOPs) × 3 (forward, and backward's input and weight gradients)."""
    macs = []

    def count(module, inputs, out):
        if isinstance(module, nn.Conv2d):
            macs.append(out[0].numel() * module.in_channels // module.groups * module.kernel_size[0] * module.kernel_size[1])
        elif isinstance(module, nn.Linear):
            macs.append(module.in_features * module.out_features)

    hooks = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    was = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, *in_shape, device=next(model.parameters()).device))
    model.train(was)
    for hook in hooks:
        hook.remove()
    return 6.0 * sum(macs)


# -- (a) the plain script -------------------------------------------------------------------------------

class _Images(torch.utils.data.Dataset):
    """CIFAR's training images as torchvision's CIFAR10 dataset serves them: each a PIL image of
    its uint8 HWC array, through the transforms."""

    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        from PIL import Image

        return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])


def plain_rate(cfg, splits, device: str, steps: int, warmup: int, workers: int) -> float:
    """Images per second of a user's plain script of ``cfg``'s net (eager, torch.optim, a DataLoader
    with torchvision transforms on the CPU), timed over ``steps`` steps after ``warmup``."""
    import numpy as np
    from torchvision import transforms

    from workers.models import build_model

    torch.manual_seed(0)
    model = build_model(cfg.model, splits.in_shape, splits.n_classes, cfg.activation, cfg.dropout).to(device)
    if cfg.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                                    weight_decay=cfg.weight_decay)
    augment = [transforms.RandomCrop(32, padding=cfg.augment["crop_padding"])] if cfg.augment.get("crop_padding") else []
    augment += [transforms.RandomHorizontalFlip()] if cfg.augment.get("flip") else []
    images = (np.asarray(splits.train_x) * 255).round().astype(np.uint8).transpose(0, 2, 3, 1)  # as CIFAR's files hold them
    loader = torch.utils.data.DataLoader(_Images(images, splits.train_y, transforms.Compose([*augment, transforms.ToTensor()])),
                                         batch_size=cfg.batch_size, shuffle=True, drop_last=True, num_workers=workers,
                                         pin_memory=device == "cuda", persistent_workers=workers > 0)
    model.train()
    done, started = 0, None
    while True:
        for x, y in loader:
            if done == warmup:
                sync(device)
                started = time.perf_counter()
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            done += 1
            if done == warmup + steps:
                sync(device)
                return steps * cfg.batch_size / (time.perf_counter() - started)


# -- (b) actsweep's lone trial, and several at once -----------------------------------------------------

def _trainer(cfg, splits, device: str, seed: int):
    """One lone trial's model (workers.train.OneModel), its data on the device, and a step function
    that takes the next batch and trains on it: workers.train's step, as its epoch loop calls it."""
    from functools import partial

    from workers.precision import forward_precision
    from workers.train import OneModel, train_step

    cfg = replace(cfg, seed=seed)
    one = OneModel([cfg], splits, torch.device(device))
    x, y = one.place([splits.train_x, splits.train_y])
    order = torch.Generator().manual_seed(seed)
    n, batch = len(splits.train_y), cfg.batch_size
    precision = partial(forward_precision, cfg.dtype, torch.device(device), cache=False)
    state = {"step": 0, "perm": torch.randperm(n, generator=order).to(device)}
    one.train()

    def step():
        i = (state["step"] * batch) % (n - n % batch)
        idx = state["perm"][i:i + batch].unsqueeze(0)
        xb, yb = one.batch(x, y, idx, [order])
        train_step(one, xb, yb, precision, 1.0, state["step"])
        state["step"] += 1

    return one, step


def _timed(steps_fn, device: str, steps: int, warmup: int) -> float:
    for _ in range(warmup):
        steps_fn()
    sync(device)
    started = time.perf_counter()
    for _ in range(steps):
        steps_fn()
    sync(device)
    return time.perf_counter() - started


def per_trial_rate(cfg, splits, device: str, steps: int, warmup: int) -> float:
    """Images per second of one actsweep trial (its dtype, its layout as the environment says)."""
    from workers.precision import cudnn_benchmark, trial_precision

    with trial_precision(cfg.dtype, torch.device(device)), cudnn_benchmark(torch.device(device)):
        one, step = _trainer(cfg, splits, device, 0)
        seconds = _timed(step, device, steps, warmup)
    return steps * cfg.batch_size / seconds


def streams_rate(cfg, splits, device: str, steps: int, warmup: int, trials: int) -> float:
    """Images per second of ``trials`` lone trials in one process, each stepping on its own CUDA stream."""
    from workers.precision import cudnn_benchmark, trial_precision

    with trial_precision(cfg.dtype, torch.device(device)), cudnn_benchmark(torch.device(device)):
        steppers = [_trainer(cfg, splits, device, seed)[1] for seed in range(trials)]
        streams = [torch.cuda.Stream() for _ in steppers] if device == "cuda" else [None] * trials

        def all_step():
            for stream, step in zip(streams, steppers):
                if stream is None:
                    step()
                    continue
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    step()
            if device == "cuda":
                for stream in streams:
                    torch.cuda.current_stream().wait_stream(stream)

        seconds = _timed(all_step, device, steps, warmup)
    return trials * steps * cfg.batch_size / seconds


def _row_command(experiment: str, row: str, args) -> list[str]:
    """The command that runs ``row`` of ``experiment`` alone in a child process (``one_trial``)."""
    return ([sys.executable, "-m", "service.benchmarks.cifar", "--one-trial", experiment, "--row", row,
             "--device", args.device, "--steps", str(args.steps), "--warmup", str(args.warmup), "--pack", str(args.pack)]
            + (["--tiny"] if args.tiny else []) + (["--batch", str(args.batch)] if args.batch else []))


def isolated_rate(experiment: str, row: str, args, timeout_s: float) -> float | None:
    """Images per second of ``row`` run in a child process of its own (``--one-trial NET --row ROW``);
    None where it did not finish within ``timeout_s`` (the child is killed)."""
    try:
        done = subprocess.run(_row_command(experiment, row, args), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode:
        raise RuntimeError(f"the {row} row's process failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["images_per_s"]


def processes_rate(experiment: str, args, trials: int) -> float:
    """Images per second of ``trials`` trial processes side by side (each runs the per_trial row
    alone; their rates add: their timed windows overlap, after each one's warm-up)."""
    command = _row_command(experiment, "per_trial", args)
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // trials))}
    running = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) for _ in range(trials)]
    rates = []
    for process in running:
        out, _ = process.communicate()
        if process.returncode:
            raise RuntimeError(f"a trial process of the processes row failed ({process.returncode})")
        rates.append(json.loads(out.strip().splitlines()[-1])["images_per_s"])
    return sum(rates)


# -- (c) a conv pack: grouped convolutions ---------------------------------------------------------------

class GroupedShallowNet(nn.Module):
    """P ShallowCIFARNets (workers.models) as one network: member p's channels are the p-th block of
    every layer's, each convolution a grouped one (groups = P), batch norm over all the channels (each
    its member's statistics), the read-out a grouped 1×1 convolution. Same activation for all members."""

    def __init__(self, members: list[nn.Module]):
        super().__init__()
        p = len(members)
        layers = []
        for parts in zip(*(m.net for m in members)):
            first = parts[0]
            if isinstance(first, nn.Conv2d):
                conv = nn.Conv2d(first.in_channels * p, first.out_channels * p, first.kernel_size, padding=first.padding,
                                 groups=p, bias=first.bias is not None)
                with torch.no_grad():
                    conv.weight.copy_(torch.cat([m.weight for m in parts]))
                    if first.bias is not None:
                        conv.bias.copy_(torch.cat([m.bias for m in parts]))
                layers.append(conv)
            elif isinstance(first, nn.BatchNorm2d):
                layers.append(nn.BatchNorm2d(first.num_features * p))
            elif isinstance(first, nn.Flatten):
                continue  # (the read-out below keeps the (B, P·C, 1, 1) shape)
            elif isinstance(first, nn.Linear):
                readout = nn.Conv2d(first.in_features * p, first.out_features * p, 1, groups=p)
                with torch.no_grad():
                    readout.weight.copy_(torch.cat([m.weight for m in parts])[:, :, None, None])
                    readout.bias.copy_(torch.cat([m.bias for m in parts]))
                layers.append(readout)
            else:
                layers.append(first)  # activation, pooling, dropout, input noise: elementwise or per channel
        self.net, self.members = nn.Sequential(*layers), p

    def forward(self, x):  # x: (P, B, C, H, W) → (P, B, classes)
        p, b = x.shape[:2]
        out = self.net(x.transpose(0, 1).reshape(b, -1, *x.shape[3:]))
        return out.view(b, p, -1).transpose(0, 1)


def grouped_conv_rate(cfg, splits, device: str, steps: int, warmup: int, trials: int) -> float:
    """Images per second of ``trials`` cifar_shallow trials as one grouped-convolution pack (each its
    own batches), its step captured as a CUDA graph on a GPU (workers.graphs)."""
    from workers.graphs import GraphedStep, refusal
    from workers.models import build_model
    from workers.precision import cudnn_benchmark, trial_precision

    members = []
    for seed in range(trials):
        torch.manual_seed(seed)
        members.append(build_model(cfg.model, splits.in_shape, splits.n_classes, cfg.activation, cfg.dropout))
    net = GroupedShallowNet(members).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=torch.tensor(cfg.lr, device=device), fused=True)
    x_all = torch.as_tensor(splits.train_x, device=device)
    y_all = torch.as_tensor(splits.train_y, device=device)
    n, batch = len(y_all), cfg.batch_size

    def step_fn(x, y, _step):
        out = net(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction="none").view(trials, -1).mean(1)
        optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        optimizer.step()
        return loss.detach()

    graphed = GraphedStep(step_fn, batch, refusal(cfg, torch.device(device)), batch_dim=1)
    state = {"step": 0}

    def step():
        idx = torch.randint(0, n, (trials, batch), device=device)
        x, y = x_all.index_select(0, idx.flatten()).view(trials, batch, *x_all.shape[1:]), y_all[idx]
        if graphed(x, y, state["step"]) is None:
            step_fn(x, y, state["step"])
        state["step"] += 1

    with trial_precision(cfg.dtype, torch.device(device)), cudnn_benchmark(torch.device(device)):
        net.train()
        seconds = _timed(step, device, steps, warmup)
    return trials * steps * batch / seconds


# -- the run ------------------------------------------------------------------------------------------------

def one_trial(argv: list[str]) -> None:
    """``--one-trial NET [--row ROW]``: the per_trial row (the processes row's worker) or ``ROW`` alone,
    its rate as a JSON line."""
    args = parser().parse_args(argv)
    cfg = trial_config(args.one_trial, args.tiny, args.batch)
    with tempfile.TemporaryDirectory() as scratch:
        splits, _ = cifar_splits(_dataset(args.one_trial), _data_dir(), Path(scratch))
        if args.row == "streams":
            rate = streams_rate(cfg, splits, args.device, args.steps, args.warmup, args.pack)
        else:
            rate = per_trial_rate(cfg, splits, args.device, args.steps, args.warmup)
    print(json.dumps({"images_per_s": rate}))


def _dataset(experiment: str) -> str:
    return "cifar10" if experiment.startswith("cifar10_") else "cifar100"


def _data_dir() -> Path | None:
    found = os.environ.get("ACTSWEEP_DATA_DIR")
    return Path(found) if found else None


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(prog="actsweep bench --workload cifar", description=__doc__.split("\n\n")[0])
    found.add_argument("--workload", default="cifar", help=argparse.SUPPRESS)
    found.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    found.add_argument("--nets", default=",".join(NETS), help=f"comma list of {', '.join(NETS)}")
    found.add_argument("--rows", default=",".join(ROWS), help=f"comma list of {', '.join(ROWS)}")
    found.add_argument("--packed-nets", default="cifar10_shallow", help="the nets that get the packed rows")
    found.add_argument("--pack", type=int, default=None, help="trials at once in a packed row (cuda 4, cpu 2)")
    found.add_argument("--steps", type=int, default=None, help="timed steps per row (cuda 30, cpu 2)")
    found.add_argument("--warmup", type=int, default=None, help="untimed steps first (cuda 8, cpu 1)")
    found.add_argument("--batch", type=int, default=None, help="override the protocol's batch (cpu default 16)")
    found.add_argument("--tiny", action="store_true", help="the specs' quick nets (the test's run)")
    found.add_argument("--loader-workers", type=int, default=None, help="the plain script's DataLoader workers")
    found.add_argument("--out", default=os.environ.get("ACTSWEEP_BENCH_OUT", "docs/benchmarks/cifar.json"))
    found.add_argument("--row-timeout", type=float, default=90.0,
                       help=f"seconds for each of the rows run in a child process ({', '.join(ISOLATED)})")
    found.add_argument("--one-trial", default=None, help=argparse.SUPPRESS)
    found.add_argument("--row", default="per_trial", choices=["per_trial", *ISOLATED], help=argparse.SUPPRESS)
    return found


@keeps_torch_threads
def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    if args.one_trial:
        one_trial(argv)
        return {}
    if args.device == "cuda" and not torch.cuda.is_available():
        parser().error("--device cuda: torch sees no CUDA device here")
    gpu = args.device == "cuda"
    args.steps = args.steps or (30 if gpu else 2)
    args.warmup = args.warmup if args.warmup is not None else (8 if gpu else 1)
    args.batch = args.batch or (None if gpu else 16)
    args.pack = args.pack or (4 if gpu else 2)
    workers = args.loader_workers if args.loader_workers is not None else (min(6, (os.cpu_count() or 2) - 2) if gpu else 0)
    nets = [n for n in args.nets.split(",") if n]
    rows = [r for r in args.rows.split(",") if r]
    unknown = sorted((set(nets) - set(NETS)) | (set(rows) - set(ROWS)))
    if unknown:
        parser().error(f"unknown nets or rows: {', '.join(unknown)}")

    from service.benchmarks.peaks import matmul_peak

    cores = os.cpu_count() or 1
    peak = {"fp32": matmul_peak(cores, device=args.device)}
    if gpu:
        from workers.precision import restore_tf32, set_tf32

        saved = set_tf32(True)
        peak["tf32"] = matmul_peak(cores, device=args.device)
        restore_tf32(saved)
    else:
        peak["tf32"] = peak["fp32"]  # (no TF32 on a CPU)
    peak = {k: round(v, 1) for k, v in peak.items()}
    device_name = torch.cuda.get_device_name() if gpu else platform.processor() or platform.machine()
    print(f"machine: {cores} cores, {device_name}; matmul peaks (GFLOP/s): fp32 {peak['fp32']:.1f}, "
          f"tf32 {peak['tf32']:.1f}{'' if gpu else ' (a CPU has no TF32)'}; torch {torch.__version__}", flush=True)
    print(f"each row: {args.steps} timed steps after {args.warmup}, extrapolated to an epoch of {EPOCH_IMAGES:,} "
          f"images (training steps only, no evaluation); packed rows: {args.pack} trials at once", flush=True)

    results: dict[str, dict] = {}
    synthetic = False
    with tempfile.TemporaryDirectory() as scratch:
        for net in nets:
            cfg = trial_config(net, args.tiny, args.batch)
            splits, made = cifar_splits(_dataset(net), _data_dir(), Path(scratch) / _dataset(net))
            synthetic |= made
            from workers.models import build_model

            flops = flops_per_training_image(build_model(cfg.model, splits.in_shape, splits.n_classes, cfg.activation,
                                                         cfg.dropout), splits.in_shape)
            print(f"{net}: {cfg.model['kind']}, batch {cfg.batch_size}, {cfg.optimizer}, "
                  f"{flops / 1e9:.2f} GFLOP per training image", flush=True)
            found = results[net] = {"model": cfg.model["kind"], "batch": cfg.batch_size,
                                    "gflop_per_training_image": round(flops / 1e9, 3), "rows": {}}
            for row in rows:
                if row in PACKED and net not in args.packed_nets.split(","):
                    continue
                if row == "grouped_conv" and cfg.model["kind"] != "cifar_shallow":
                    continue
                started = time.perf_counter()
                trials, dtype = (args.pack if row in PACKED else 1), ("tf32" if row.startswith("per_trial_tf32") else "fp32")
                if row == "plain":
                    rate = plain_rate(cfg, splits, args.device, args.steps, args.warmup, workers)
                elif row == "processes":
                    rate = processes_rate(net, args, trials)
                elif row in ISOLATED:
                    rate = isolated_rate(net, row, args, args.row_timeout)
                    if rate is None:
                        found.setdefault("unfinished", {})[row] = f"did not finish in {args.row_timeout:.0f} s"
                        print(f"  {row:<24} did not finish in {args.row_timeout:.0f} s (its process stopped)", flush=True)
                        continue
                elif row == "grouped_conv":
                    rate = grouped_conv_rate(cfg, splits, args.device, args.steps, args.warmup, trials)
                else:
                    layout = "1" if row.endswith("channels_last") else "0"
                    saved_layout = os.environ.get("ACTSWEEP_CHANNELS_LAST")
                    os.environ["ACTSWEEP_CHANNELS_LAST"] = layout
                    try:
                        rate = per_trial_rate(replace(cfg, dtype=dtype), splits, args.device, args.steps, args.warmup)
                    finally:
                        os.environ.pop("ACTSWEEP_CHANNELS_LAST") if saved_layout is None else \
                            os.environ.__setitem__("ACTSWEEP_CHANNELS_LAST", saved_layout)
                gflops = rate * flops / 1e9
                measured = {"trials": trials, "images_per_s": round(rate, 1),
                            "trial_epochs_per_s": round(rate / EPOCH_IMAGES, 4),
                            "epoch_seconds_per_trial": round(EPOCH_IMAGES * trials / rate, 2),
                            "gflops": round(gflops, 1), "share_of_fp32_peak": round(gflops / peak["fp32"], 3),
                            "share_of_tf32_peak": round(gflops / peak["tf32"], 3),
                            "row_seconds": round(time.perf_counter() - started, 1)}
                found["rows"][row] = measured
                print(f"  {row:<24} {measured['trial_epochs_per_s']:9.4f} trial-epochs/s  {rate:9.1f} images/s  "
                      f"({trials} trial{'s' if trials > 1 else ''}; {gflops:8.1f} GFLOP/s, "
                      f"{100 * measured['share_of_fp32_peak']:5.1f}% of fp32 peak, "
                      f"{100 * measured['share_of_tf32_peak']:5.1f}% of tf32; an epoch per trial "
                      f"{measured['epoch_seconds_per_trial']:.2f} s; row {measured['row_seconds']:.0f} s)", flush=True)
            found["fastest_to_share"] = fastest(found["rows"])
            if found["fastest_to_share"]:
                print(f"  fastest way for several trials to share the device: {found['fastest_to_share']}", flush=True)

    report = {"device": args.device, "processor": device_name, "cores": cores, "torch": torch.__version__,
              "peaks_gflops": peak, "epoch_images": EPOCH_IMAGES, "steps": args.steps, "warmup": args.warmup,
              "pack": args.pack, "tiny": args.tiny, "synthetic_data": synthetic, "nets": results,
              "goals": goals(results) if gpu else {}, "choices": choices(results) if gpu else {}}
    for name, verdict in report["goals"].items():
        print(f"goal {name}: {verdict}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"written: {args.out}")
    return report


def fastest(rows: dict) -> str | None:
    """Among per_trial and the packed rows measured: the most trial-epochs per second (None without a packed row)."""
    ways = {"per_trial": rows.get("per_trial"), **{r: rows.get(r) for r in PACKED}}
    ways = {k: v for k, v in ways.items() if v}
    return max(ways, key=lambda k: ways[k]["trial_epochs_per_s"]) if len(ways) > 1 else None


def choices(results: dict) -> dict:
    """What workers.convnet_plan reads: per model kind, the fastest way to share a GPU, and whether
    channels-last was faster in fp32 (``channels_last``) and in TF32 (``channels_last_tf32``): cuDNN's
    fp32 and tensor-core kernels favour different layouts."""
    found = {"strategy": {}, "channels_last": {}, "channels_last_tf32": {}}
    for net in results.values():
        rows = net["rows"]
        if net.get("fastest_to_share"):
            found["strategy"][net["model"]] = net["fastest_to_share"]
        for key, first in (("channels_last", "per_trial"), ("channels_last_tf32", "per_trial_tf32")):
            if first in rows and f"{first}_channels_last" in rows:
                found[key][net["model"]] = rows[f"{first}_channels_last"]["images_per_s"] > rows[first]["images_per_s"]
    return {key: value for key, value in found.items() if value}


def goals(results: dict) -> dict[str, str]:
    """The issue's goals on an H100, judged on this run's rows."""
    found = {}
    shallow = results.get("cifar10_shallow", {}).get("rows", {})
    if "plain" in shallow:
        best = max(r["trial_epochs_per_s"] for k, r in shallow.items() if k != "plain")
        ratio = best / shallow["plain"]["trial_epochs_per_s"]
        found["cifar10_shallow >= 10x plain"] = f"{ratio:.1f}x ({'met' if ratio >= 10 else 'not met'})"
    wrn = results.get("cifar100_wrn", {}).get("rows", {})
    fp32 = {k: r for k, r in wrn.items() if k in ("per_trial", "per_trial_channels_last")}
    if fp32:  # (the faster layout, as a trial takes it: workers.convnet_plan.channels_last)
        row = max(fp32, key=lambda k: fp32[k]["share_of_fp32_peak"])
        share = fp32[row]["share_of_fp32_peak"]
        found["WRN-40-4 fp32 >= 60% of fp32 peak"] = f"{100 * share:.1f}%, {row} ({'met' if share >= 0.6 else 'not met'})"
    tf32 = {k: r for k, r in wrn.items() if k.startswith("per_trial_tf32")}
    if tf32:  # (the faster layout: channels-last or not)
        row = min(tf32, key=lambda k: tf32[k]["epoch_seconds_per_trial"])
        seconds = tf32[row]["epoch_seconds_per_trial"]
        found["WRN-40-4 tf32 epoch of 45,000 <= 4 s"] = f"{seconds:.2f} s, {row} ({'met' if seconds <= 4 else 'not met'})"
    return found


if __name__ == "__main__":
    main()
