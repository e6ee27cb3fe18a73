"""A trial's training step as a CUDA graph: captured once, replayed every step, for a lone network
(workers.train.OneModel: any net of workers.models, convnets included) and a fused pack
(workers.fused.StackedPack) alike.

A pack's eager step dispatches about 300 aten ops whatever its size (tests/workers/test_step_ops.py),
a lone convnet's a few hundred too, each a kernel launch of 5-10 µs on a GPU; for the GELU paper's
8 × 128 MLP, and for cifar10_shallow at batch 128 on an H100, the launches, not the arithmetic, set
the step's time. A CUDA graph records the launches of one step (forward, backward and the
optimiser's update) once, and a replay submits them all in one call (torch.cuda.graphs).

The step captured is the step that runs eagerly: workers.train.step_on_device, the one training
step of every trial. What a replay needs from the host each step, everything else being fixed at
capture:
- the batch, copied into the graph's static input tensors;
- the step's mask salt (workers.masks.step_salt) in a 0-d int32 tensor: the dropout and SOI masks
  are a function of (seed key, step, site, element), so the captured hash draws the masks of the
  replayed step, exactly as the eager step draws them;
- the lr: the optimisers read it from a 0-d tensor on the device that the host sets before each
  step when it moves (workers.optim.TrialOptimizer.set_lr, workers.fused.StackedOptimizer), so a
  schedule (linear decay, SGDR, the ELU papers' steps) replays too;
- nothing else: the optimiser's step counters live on the device (fused Adam increments them),
  the parameters, their gradients and the optimiser state stay at the addresses captured, and
  torch's own random draws (input noise, nn.Dropout) come from the default CUDA generator, whose
  offset a replay advances as the eager step would.

A replay runs the eager step's kernels on the same inputs, so it gives the eager step's numbers
(tests/workers/test_graphs.py compares them on a GPU, for packs and for a lone convnet). What is not
captured steps eagerly, and the trial's record says why (:func:`refusal`, ``GraphedStep.mode``):
- a batch of another shape (an epoch's last, smaller batch);
- the first ``WARMUP`` full batches, which run eagerly on a side stream as torch asks before a
  capture (lazy initialisation: cuBLAS workspaces, cuDNN's algorithm choice, the optimiser's
  first-step states);
- torch.compile's step (its own graphs), and any capture that fails (the trial then steps
  eagerly to its end).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import torch
from torch import Tensor

from workers import masks

WARMUP = 3  # eager full-batch steps on a side stream before the capture


def refusal(cfg, device: torch.device, compiled: bool = False) -> str | None:
    """Why a trial of ``cfg``'s settings steps eagerly on ``device`` from the start, or None.
    ``compiled``: its step runs under torch.compile (a fused pack with ``execution.compile``)."""
    if device.type != "cuda":
        return "not on a GPU"
    if not cfg.cuda_graphs:
        return "execution.cuda_graphs: false"
    if compiled:
        return "execution.compile: true (torch.compile runs the step)"
    return None


@lru_cache(maxsize=None)
def side_stream(device: torch.device) -> torch.cuda.Stream:
    """The one side stream of a process (per GPU) that warm-ups and captures run on: cuBLAS keeps a
    workspace per stream it has run on (32 MiB on Hopper), so a stream per trial would add up."""
    return torch.cuda.Stream(device)


class GraphedStep:
    """The training step of one trial's members (workers.train.Members) as a CUDA graph.

    ``step_fn(x, y, step)`` is the step itself (workers.train.step_on_device bound to the members),
    run eagerly during the warm-up and once under capture. ``__call__`` returns the step's (P,)
    losses, or None where the caller must step eagerly (see the module's docstring). ``reset``
    drops the graph when the members change shape (one leaves), their state is replaced (a resume)
    or a host-side setting the step reads changes (a fine-tuning phase's dropout); the next full
    batches warm up and capture again. ``batch_dim``: where the batch runs in ``x`` (0 for one
    network's (B, ...), 1 for a pack's (P, B, ...)).
    """

    def __init__(self, step_fn: Callable[[Tensor, Tensor, int | Tensor], Tensor], batch_size: int,
                 reason: str | None, batch_dim: int = 0):
        self.step_fn, self.batch_size, self.batch_dim = step_fn, batch_size, batch_dim
        self.reason = reason  # why the trial steps eagerly (None: it is, or will be, captured)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.warmed = 0
        self.captures = 0

    @property
    def mode(self) -> str:
        """What the trial's record says of its step: "cuda graph", or "eager: <why>"."""
        if self.reason is None:
            return "cuda graph" if self.captures else "eager: not captured yet"
        return f"eager: {self.reason}"

    def reset(self) -> None:
        self.graph, self.warmed = None, 0

    def __call__(self, x: Tensor, y: Tensor, step: int) -> Tensor | None:
        if self.reason is not None or x.shape[self.batch_dim] != self.batch_size:
            return None
        if self.graph is not None:
            self.x.copy_(x)
            self.y.copy_(y)
            self.salt.fill_(masks.step_salt(step))
            self.graph.replay()
            return self.losses
        if self.warmed < WARMUP:  # a real step, eagerly, on a side stream (torch.cuda.graphs' warm-up)
            self.warmed += 1
            side = side_stream(x.device)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                losses = self.step_fn(x, y, step)
            torch.cuda.current_stream().wait_stream(side)
            losses.record_stream(torch.cuda.current_stream())  # (read there by the epoch's loss sum)
            if self.warmed == WARMUP:
                self._capture(x, y)
            return losses
        return None

    def _capture(self, x: Tensor, y: Tensor) -> None:
        self.x, self.y = x.clone(), y.clone()
        self.salt = torch.zeros((), dtype=torch.int32, device=x.device)
        graph = torch.cuda.CUDAGraph()
        try:
            # the step zeroes the gradients first: they are allocated inside the capture, in the graph's pool
            with torch.cuda.graph(graph, stream=side_stream(x.device)):
                self.losses = self.step_fn(self.x, self.y, self.salt)
        except Exception as exc:  # a kernel or op that cannot be captured: eager to the end
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            self.reason = f"capture failed ({type(exc).__name__}: {first})"
            self.graph = None
            torch.cuda.synchronize()
            return
        self.graph = graph
        self.captures += 1
