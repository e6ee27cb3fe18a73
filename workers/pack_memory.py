"""How much device memory a fused pack holds, and the largest pack a memory budget takes.

``execution.pack_size: auto`` sizes packs to the device they train on (a GPU's memory times the
pack's share of it, ``gpus_per_trial``). The footprint is measured, not modelled: one real training
step of a small pack, on the CPU, counting the tensors that a step keeps alive on any device:

- per member, persistent: the stacked weights, their gradients and the optimiser state (Adam's two
  moments, SGD's momentum buffer), read off the pack after the step;
- per member, during the step: every tensor autograd saves for the backward pass (the batch,
  pre-activations, activation outputs, dropout and SOI masks), counted once per storage through
  ``torch.autograd.graph.saved_tensors_hooks``;
- per member, written from the code's shapes: each member's permutation of the training set
  (int64), the widest layer's output twice at the evaluation batch (input and output of one
  layer under ``no_grad``), and, with ``eval_noise``, the noisy copy of the test set (GELU Fig. 3);
- per member, on a GPU where the step is a CUDA graph (workers.graphs): the graph's own copy of
  the batch, of the step's saved tensors and of the gradients (:func:`graph_bytes`);
- fixed, once per pack: the dataset resident on the device.

The step runs the same code on a CPU as on a GPU, so these counts are the device's. On a GPU the
allocator also holds cuBLAS's workspaces (tens of MiB on Hopper, whatever the pack's size), its
rounding and the step's transients: measured there by a real pack on a few batches (:func:`device_overhead_bytes`)
and added to the fixed part. The CUDA context lies outside the allocator: the driver counts it per
process (service.driver.gpu_placement), and the budget keeps a headroom (service.driver.execution_plan).
"""
from __future__ import annotations

import contextlib
from dataclasses import replace

import numpy as np
import torch

from workers import graphs
from workers.data.splits import Splits
from workers.fused import StackedPack, train_pack  # the pack exactly as it trains
from workers.pack_footprint import PackFootprint  # (re-exported: the value lives apart from torch)
from workers.train import EVAL_BATCH, train_step
from workers.trial import TrialConfig


def dataset_bytes(splits: Splits) -> int:
    """The pack's copy of the data on its device (workers.fused.train_pack puts all of it there)."""
    return sum(np.asarray(a).nbytes for a in splits.arrays())


def step_bytes(cfgs: list[TrialConfig], splits: Splits) -> int:
    """Bytes one training step of a pack of ``cfgs`` keeps alive, without the dataset: measured on
    the CPU (persistent state and saved tensors) plus the per-member buffers of the module docstring."""
    return sum(_step_parts(cfgs, splits).values())


def _step_parts(cfgs: list[TrialConfig], splits: Splits) -> dict[str, int]:
    """What one training step holds, by part: weights, gradients, optimiser state, saved tensors,
    and the per-member buffers written from the code's shapes."""
    first = cfgs[0]
    pack = StackedPack(cfgs, splits, torch.device("cpu"))
    batch = min(first.batch_size, len(splits.train_y))
    x = torch.as_tensor(splits.train_x[:batch]).flatten(1)
    y = torch.as_tensor(splits.train_y[:batch])
    params = {p.untyped_storage().data_ptr() for p in pack.net.parameters()}
    saved: dict[int, int] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:  # weights are counted below, with their state
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    idx = torch.stack([torch.randperm(batch, generator=torch.Generator().manual_seed(c.seed)) for c in cfgs])
    xb, yb = pack.batch(x, y, idx, [])  # (P, B): each member its own order of the batch, as it trains
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        train_step(pack, xb, yb, contextlib.nullcontext(), 1.0, step=0)
    weights = pack.net.flat.nbytes
    optimiser = pack.optimizer.buffer_bytes()
    members = len(cfgs)
    widest = max(w.shape[-1] for w in pack.net.weights)
    eval_bytes = members * 2 * EVAL_BATCH * widest * 4
    order_bytes = members * len(splits.train_y) * 8
    noise_bytes = members * 2 * int(np.asarray(splits.test_x).size) * 4 if first.eval_noise else 0
    return {"weights": weights, "gradients": weights, "optimiser": optimiser, "saved": sum(saved.values()),
            "buffers": eval_bytes + order_bytes + noise_bytes}


def device_overhead_bytes(cfgs: list[TrialConfig], splits: Splits, device: torch.device | str) -> int:
    """On a GPU, what a pack's process holds in the caching allocator beyond the tensors the CPU
    count sees: cuBLAS's workspaces (one per stream a matmul ran on, kept; a CUDA graph's capture
    and its warm-up stream add theirs), the allocator's rounding and the step's transients.
    Measured: the allocator's peak while a pack of ``cfgs`` trains one epoch on a few batches of
    the data on ``device`` (the code path of a real pack: warm-ups, capture, replays, the last
    smaller batch, evaluation), less that data and what the pack's step holds on the CPU. 0 on a
    CPU (the CUDA context itself lies outside the allocator: service.driver.gpu_placement counts it)."""
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    # cuBLAS's workspaces outlive the matmuls that made them: dropped first, so that this pack makes
    # them again as a new trial process does (torch's own tests do the same; a private hook, if present)
    clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_workspaces is not None:
        clear_workspaces()
    batch = cfgs[0].batch_size
    few = _few_batches(splits, (graphs.WARMUP + 3) * batch + batch // 2, 2 * batch)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    for _ in train_pack([replace(cfg, epochs=1) for cfg in cfgs], few, device):
        pass
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    parts = _step_parts(cfgs, few)
    held = parts["weights"] + parts["gradients"] + parts["optimiser"] + parts["saved"]
    return max(0, peak - dataset_bytes(few) - held)


def _few_batches(splits: Splits, train: int, held_out: int) -> Splits:
    return replace(splits, train_x=splits.train_x[:train], train_y=splits.train_y[:train],
                   val_x=splits.val_x[:held_out], val_y=splits.val_y[:held_out],
                   test_x=splits.test_x[:held_out], test_y=splits.test_y[:held_out])


def measure_footprint(cfgs: list[TrialConfig], splits: Splits, device: torch.device | str = "cpu") -> PackFootprint:
    """The footprint of packs of the configs' kind: ``cfgs`` holds one config per activation of the
    grid (their costs differ: SOI saves its mask); a pack of each once and a pack of each twice
    give the per-member bytes, averaged over the activations. On a GPU ``device``, the fixed part
    also holds what its allocator keeps beyond the tensors (:func:`device_overhead_bytes`)."""
    once = step_bytes(cfgs, splits)
    twice = step_bytes([*cfgs, *cfgs], splits)
    per_member = -(-(twice - once) // len(cfgs))
    if graphs.refusal(cfgs[0], torch.device(device)) is None:  # a CUDA graph's pool holds a step of its own
        per_member += -(-(graph_bytes([*cfgs, *cfgs], splits) - graph_bytes(cfgs, splits)) // len(cfgs))
    return PackFootprint(fixed=dataset_bytes(splits) + device_overhead_bytes(cfgs, splits, device),
                         per_member=max(1, per_member))


def graph_bytes(cfgs: list[TrialConfig], splits: Splits) -> int:
    """What a pack's CUDA graph (workers.graphs) holds beside the eager allocations: its static copy
    of the batch, and a full step's saved tensors and gradients in its private memory pool, which
    the eager steps (an epoch's last, smaller batch) do not share."""
    parts = _step_parts(cfgs, splits)
    batch = min(cfgs[0].batch_size, len(splits.train_y))
    features = int(np.prod(np.asarray(splits.train_x).shape[1:]))
    return len(cfgs) * batch * (features * 4 + 8) + parts["saved"] + parts["gradients"]
