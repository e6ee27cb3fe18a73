"""The fused engine apart from the orchestration: what one training step dispatches, and how fast
``workers.fused.train_pack`` trains without Ray Tune or MLflow around it.

On a GPU every aten op is a kernel launch (or at least a trip through the dispatcher) of about
5-10 µs, so a pack whose step dispatches more ops for every member cannot fill the card. The
packs here are the ones the planner forms (search_spaces.plan.packs) from the GELU paper's Fig. 2
grid (3 activations × 3 lrs × 2 dropouts per seed), so the counts are those of real sweeps.
``actsweep bench`` prints both (service.benchmarks.speed); tests/workers/test_step_ops.py holds
the counts to their bound.
"""
from __future__ import annotations

import contextlib
import time
from collections import Counter

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from workers.data.splits import Splits
from workers.trial import TrialConfig


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched while it is active (views included: each is a trip through
    the dispatcher), by name."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def fig2_pack(seeds: int, **overrides) -> list[TrialConfig]:
    """The members of one planner-formed pack of GELU Fig. 2's grid over ``seeds`` seeds
    (18 members per seed), as a sweep of mnist_classification would train them."""
    from search_spaces import load_spec
    from search_spaces.plan import packs

    spec = load_spec("mnist_classification", overrides={"seeds": list(range(seeds)), **overrides})
    points = spec.grid_points()
    (pack,) = packs(points, len(points))
    return [spec.trial_config(point) for point in pack.points]


def step_ops(cfgs: list[TrialConfig], splits: Splits, device: str = "cpu", warmup: int | None = None) -> Counter:
    """The aten ops of one training step (forward, backward, optimiser) of a pack of ``cfgs``,
    after ``warmup`` steps (first-step allocations and caches are not the steady state). By default,
    on a GPU, enough for the pack to have captured its CUDA graph, whose replay is then the step
    counted; on a CPU one step (Adam's state made: 18 members count 422 ops after none, 301 after
    one, two or four)."""
    from workers.fused import StackedPack
    from workers.graphs import WARMUP
    from workers.train import train_step

    if warmup is None:
        warmup = WARMUP + 1 if torch.device(device).type == "cuda" else 1
    pack = StackedPack(cfgs, splits, torch.device(device))
    x, y = (torch.as_tensor(a, device=device) for a in (splits.train_x, splits.train_y))
    batch = cfgs[0].batch_size
    orders = torch.Generator().manual_seed(0)
    idx = torch.stack([torch.randperm(len(y), generator=orders)[:batch] for _ in cfgs]).to(device)
    xb, yb = pack.batch(x.flatten(1), y, idx, [])
    for step in range(warmup):
        train_step(pack, xb, yb, contextlib.nullcontext(), 1.0, step)
    with OpCounter() as counter:
        train_step(pack, xb, yb, contextlib.nullcontext(), 1.0, warmup)
    return counter.ops


def lone_sequential_ops(dropout: float = 0.5, depth: int = 8, width: int = 128, batch: int = 128) -> int:
    """The aten ops of one training step of the same MLP as a plain ``nn.Sequential`` with
    ``nn.Dropout`` and ``torch.optim.Adam`` at its defaults (on a CPU a loop over the
    parameters): the reference a pack's step is held to (335 ops with dropout 0.5, 295 without;
    178 and 218 with ``foreach=True``)."""
    layers: list[nn.Module] = []
    for fan_in in [784] + [width] * (depth - 1):
        layers += [nn.Linear(fan_in, width), nn.GELU()] + ([nn.Dropout(dropout)] if dropout else [])
    model = nn.Sequential(*layers, nn.Linear(width, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, 784), torch.randint(0, 10, (batch,))

    def step():
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    step()
    with OpCounter() as counter:
        step()
    return counter.total


def engine_rate(cfgs: list[TrialConfig], splits: Splits, device: str = "cpu", epochs: int = 2) -> dict:
    """``train_pack`` alone (no Ray, no MLflow): seconds per epoch after the first (training and the
    evaluation each epoch ends with), as trial-epochs per second."""
    from workers.fused import train_pack

    seconds, started = [], time.perf_counter()
    for _ in train_pack(cfgs, splits, device):
        if device == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        seconds.append(now - started)
        started = now
    steady = sorted(seconds[1:])[len(seconds[1:]) // 2] if len(seconds) > 1 else seconds[0]
    return {"members": len(cfgs), "epoch_seconds": [round(s, 3) for s in seconds],
            "steady_trial_epochs_per_s": len(cfgs) / steady}
