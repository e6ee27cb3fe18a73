"""A fused pack's training step as a CUDA graph: captured once, replayed every step.

A pack's eager step dispatches about 300 aten ops whatever its size (tests/workers/test_step_ops.py),
each a kernel launch of 5-10 µs on a GPU; for the GELU paper's 8 × 128 MLP the launches, not the
arithmetic, set the step's time. A CUDA graph records the launches of one step (forward, backward
and the optimiser's update) once, and a replay submits them all in one call (torch.cuda.graphs).

What a replay needs from the host each step, everything else being fixed at capture:
- the batch, copied into the graph's static input tensors;
- the step's mask salt (workers.masks.step_salt) in a 0-d int32 tensor: the dropout and SOI masks
  are a function of (seed key, step, site, element), so the captured hash draws the masks of the
  replayed step, exactly as the eager step draws them;
- nothing else: the optimiser's step counters live on the device (fused Adam increments them), and
  the parameters, their gradients and the optimiser state stay at the addresses captured.

A replay runs the eager step's kernels on the same inputs, so it gives the eager step's numbers
(tests/workers/test_graphs.py compares them on a GPU). What is not captured steps eagerly, and
the trial's record says why (:func:`refusal`, ``GraphedStep.mode``):
- a batch of another shape (an epoch's last, smaller batch);
- the first ``WARMUP`` full batches, which run eagerly on a side stream as torch asks before a
  capture (lazy initialisation: cuBLAS workspaces, the optimiser's first-step branches);
- an lr schedule (the lr would be fixed at capture), torch.compile's step (its own graphs), and
  any capture that fails (the pack then steps eagerly to its end).
"""
from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

from workers import masks

WARMUP = 3  # eager full-batch steps on a side stream before the capture


def refusal(cfg, device: torch.device) -> str | None:
    """Why a pack of ``cfg``'s settings steps eagerly on ``device`` from the start, or None."""
    if device.type != "cuda":
        return "not on a GPU"
    if not cfg.cuda_graphs:
        return "execution.cuda_graphs: false"
    if cfg.compile:
        return "execution.compile: true (torch.compile runs the step)"
    if cfg.schedule.get("kind", "constant") != "constant":
        return f"schedule {cfg.schedule['kind']!r}: the lr moves every step, and a graph fixes it"
    return None


@lru_cache(maxsize=None)
def side_stream(device: torch.device) -> torch.cuda.Stream:
    """The one side stream of a process (per GPU) that warm-ups and captures run on: cuBLAS keeps a
    workspace per stream it has run on (32 MiB on Hopper), so a stream per pack would add up."""
    return torch.cuda.Stream(device)


class GraphedStep:
    """The training step of one pack (workers.fused.StackedPack) as a CUDA graph.

    ``__call__`` returns the step's (P,) losses, or None where the caller must step eagerly (see
    the module's docstring). ``reset`` drops the graph when the pack changes shape (a member
    leaves) or its state is replaced (a resume); the next full batches warm up and capture again.
    """

    def __init__(self, pack, precision_factory, reason: str | None):
        self.pack, self.precision_factory = pack, precision_factory
        self.reason = reason  # why the pack steps eagerly (None: it is, or will be, captured)
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

    def __call__(self, x: Tensor, y: Tensor, lr_factor: float, step: int) -> Tensor | None:
        if self.reason is not None or x.shape[1] != self.pack.first.batch_size or lr_factor != 1.0:
            return None
        if self.graph is not None:
            self.x.copy_(x)
            self.y.copy_(y)
            self.salt.fill_(masks.step_salt(step))
            self.graph.replay()
            self.pack.optimizer.step_count += 1
            return self.losses
        if self.warmed < WARMUP:  # a real step, eagerly, on a side stream (torch.cuda.graphs' warm-up)
            self.warmed += 1
            side = side_stream(x.device)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                losses = self._eager(x, y, step)
            torch.cuda.current_stream().wait_stream(side)
            losses.record_stream(torch.cuda.current_stream())  # (read there by the epoch's loss sum)
            if self.warmed == WARMUP:
                self._capture(x, y)
            return losses
        return None

    def _eager(self, x: Tensor, y: Tensor, step: int) -> Tensor:
        pack = self.pack
        with self.precision_factory():
            losses = pack.losses(x, y, step)
        pack.zero_grad()
        losses.sum().backward()
        pack.optimizer.step()
        return losses.detach()

    def _capture(self, x: Tensor, y: Tensor) -> None:
        pack = self.pack
        self.x, self.y = x.clone(), y.clone()
        self.salt = torch.zeros((), dtype=torch.int32, device=x.device)
        graph = torch.cuda.CUDAGraph()
        pack.zero_grad()  # the gradients are allocated inside the capture, in the graph's memory pool
        try:
            with torch.cuda.graph(graph, stream=side_stream(x.device)):
                with self.precision_factory():
                    losses = pack.losses(self.x, self.y, self.salt)
                losses.sum().backward()
                pack.optimizer.apply()  # (its host-side step count moves at each replay)
                self.losses = losses.detach()
        except Exception as exc:  # a kernel or op that cannot be captured: eager to the end
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            self.reason = f"capture failed ({type(exc).__name__}: {first})"
            self.graph = None
            pack.zero_grad()
            torch.cuda.synchronize()
            return
        self.graph = graph
        self.captures += 1
