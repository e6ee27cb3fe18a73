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
- fixed, once per pack: the dataset resident on the device.

The step runs the same code on a CPU as on a GPU, so these counts are the device's; what the count
leaves out (the CUDA context, the allocator's rounding, backward's transient gradients of one
layer at a time) is the headroom that the budget keeps back (service.driver.pack_sizing).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from workers.data.splits import Splits
from workers.fused import StackedPack  # the pack exactly as it trains
from workers.train import EVAL_BATCH, train_step
from workers.trial import TrialConfig

MIB = 2 ** 20


@dataclass(frozen=True)
class PackFootprint:
    """A pack of P members holds ``fixed + P * per_member`` bytes on its device."""

    fixed: int       # bytes: the dataset on the device, once per pack
    per_member: int  # bytes: weights, gradients, optimiser state, saved activations, eval buffers

    def bytes(self, members: int) -> int:
        return self.fixed + members * self.per_member

    def largest_pack(self, budget: int) -> int:
        """The most members whose pack fits in ``budget`` bytes (0 if not even one does)."""
        return max(0, (budget - self.fixed) // self.per_member)

    def describe(self) -> str:
        return f"{self.fixed / MIB:.0f} MiB of data + {self.per_member / MIB:.1f} MiB per member"


def dataset_bytes(splits: Splits) -> int:
    """The pack's copy of the data on its device (workers.fused.train_pack puts all of it there)."""
    return sum(np.asarray(a).nbytes for a in splits.arrays())


def step_bytes(cfgs: list[TrialConfig], splits: Splits) -> int:
    """Bytes one training step of a pack of ``cfgs`` keeps alive, without the dataset: measured on
    the CPU (persistent state and saved tensors) plus the per-member buffers of the module docstring."""
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
        train_step(pack, xb, yb, contextlib.nullcontext(), 1.0)
    weights = sum(p.nbytes for p in pack.net.parameters())
    optimiser = sum(t.nbytes for state in pack.optimizer.state for t in state.values() if torch.is_tensor(t))
    members = len(cfgs)
    widest = max(w.shape[-1] for w in pack.net.weights)
    eval_bytes = members * 2 * EVAL_BATCH * widest * 4
    order_bytes = members * len(splits.train_y) * 8
    noise_bytes = members * 2 * int(np.asarray(splits.test_x).size) * 4 if first.eval_noise else 0
    return 2 * weights + optimiser + sum(saved.values()) + eval_bytes + order_bytes + noise_bytes


def measure_footprint(cfgs: list[TrialConfig], splits: Splits) -> PackFootprint:
    """The footprint of packs of the configs' kind: ``cfgs`` holds one config per activation of the
    grid (their costs differ: SOI saves its uniforms); a pack of each once and a pack of each twice
    give the per-member bytes, averaged over the activations."""
    once = step_bytes(cfgs, splits)
    twice = step_bytes([*cfgs, *cfgs], splits)
    return PackFootprint(fixed=dataset_bytes(splits), per_member=max(1, -(-(twice - once) // len(cfgs))))
