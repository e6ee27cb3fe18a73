"""What one trial of a spec will cost, known before anything real is allocated.

The model is built on PyTorch's ``meta`` device (shapes and dtypes, no storage), and one training
step runs there: a forward and backward pass over one batch. Three things are counted on the way:

- the parameters (weights, gradients, and the optimiser's state: Adam's two moments, SGD's
  momentum buffer), 4 bytes each;
- every tensor autograd saves for the backward pass (``torch.autograd.graph.saved_tensors_hooks``),
  which is what a batch's activations hold;
- the FLOPs of the step (``torch.utils.flop_counter.FlopCounterMode``).

Adding the dataset resident in memory (DATASET_SHAPES: its examples' shape and count, not read from
disk) gives the trial's memory; FLOPs per step times steps per epoch, plus the evaluation's
forward passes, give its work per epoch. A 65,536-wide, 200-deep MLP (3.4 TB of weights) is
estimated in well under a second, and nothing of it is ever allocated.

The first run on the meta device imports ``torch._dynamo`` (its Python meta kernels are wrapped by
it): 1.5 s on an idle core, 3 s on the start of a busy 2-core run. So :func:`unaffordable` first
tries :func:`dense_ceiling`, an upper bound for the dense models counted from the spec alone; a spec
that fits under it needs no meta run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from workers.activation_defs import parse_name
from workers.memory_floor import DATASET_SHAPES, DatasetShape, dense_dims, dense_parameters, state_bytes
from workers.models import build_model

GIB = 2 ** 30


@dataclass(frozen=True)
class TrialFootprint:
    """One trial's memory and work, estimated from its spec."""

    parameters: int
    state_bytes: int        # weights, gradients and optimiser state
    activation_bytes: int   # what one training batch keeps for the backward pass
    data_bytes: int         # the dataset resident in memory
    flops_per_epoch: float  # training steps (forward and backward) and evaluation (forward)

    @property
    def memory_bytes(self) -> int:
        return self.state_bytes + self.activation_bytes + self.data_bytes

    def describe(self) -> str:
        return (f"{self.memory_bytes / GIB:,.1f} GiB: {self.parameters:,} parameters "
                f"({self.state_bytes / GIB:,.1f} GiB with gradients and optimiser state), "
                f"{self.activation_bytes / GIB:,.1f} GiB of activations per batch, "
                f"{self.data_bytes / GIB:,.1f} GiB of data")


def trial_footprint(spec) -> TrialFootprint:
    """The footprint of the heaviest trial of a spec (search_spaces.SweepSpec): its model at its
    batch size, built and stepped on the meta device."""
    shape = DATASET_SHAPES[spec.dataset]
    n_out = shape.in_shape[-1] if spec.task == "reconstruct" else shape.n_out
    vocab = shape.vocab if shape.token_ids else 0
    dropout = max(spec.dropout)  # a dropout layer keeps its mask for the backward pass
    with torch.device("meta"):
        # ReLU stands in for the grid's activations: an activation's saved tensors are the same
        # size whatever its formula (one input, or one mask), and an expression cannot run on meta
        net = build_model(spec.model.model_dump(), shape.in_shape, n_out, parse_name("relu"), dropout, vocab)
        batch = (torch.zeros((spec.batch_size, *shape.in_shape), dtype=torch.long) if shape.token_ids
                 else torch.empty((spec.batch_size, *shape.in_shape)))
        weights = {id(p) for p in net.parameters()}
        saved: dict[int, int] = {}

        def keep(tensor):  # (a saved weight, or a view of one, is the parameter itself: counted once, above)
            if id(tensor) not in weights and id(tensor._base) not in weights:
                saved[id(tensor)] = tensor.numel() * tensor.element_size()
            return tensor

        with FlopCounterMode(display=False) as flops, torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            out = net(batch)
            out.float().pow(2).mean().backward()
    parameters = sum(p.numel() for p in net.parameters())
    optimiser_states = 2 if spec.optimizer == "adam" else (1 if spec.momentum else 0)
    example_bytes = math.prod(shape.in_shape) * (8 if shape.token_ids else 4)
    step_flops = flops.get_total_flops()
    # evaluation: a forward pass (a third of a training step's work) over validation and test
    epoch_flops = step_flops * (_train_examples(spec, shape) / spec.batch_size) + step_flops / 3 * (
        shape.evaluated / spec.batch_size)
    return TrialFootprint(parameters=parameters, state_bytes=parameters * 4 * (2 + optimiser_states),
                          activation_bytes=sum(saved.values()), data_bytes=shape.resident * (example_bytes + 8),
                          flops_per_epoch=epoch_flops)


def _train_examples(spec, shape: DatasetShape) -> int:
    subset = getattr(spec, "train_subset", None)
    return subset or max(shape.resident, shape.evaluated) or 1_300_000


def estimate(spec) -> TrialFootprint | None:
    """:func:`trial_footprint`, or None where the model does not run on the meta device with this
    dataset's input (a model that does not fit its data): no estimate, and the trial will say why."""
    try:
        return trial_footprint(spec)
    except (RuntimeError, NotImplementedError, ValueError, TypeError, KeyError):
        return None


def dense_ceiling(spec) -> TrialFootprint | None:
    """An upper bound on :func:`trial_footprint` for the dense models (``mlp``, ``autoencoder``) on
    feature vectors, counted from the spec without building anything; None for other models and for
    token inputs. Per example and Linear layer it keeps the layer's input and three tensors of its
    output's size (what autograd saves is at most the activation's input or output and dropout's
    noise), and a step's work is three forward passes' matmuls (the backward's two bound it: the
    first layer's input gets no gradient). tests/workers/test_footprint.py holds it above the
    estimate, and near it."""
    shape, dims = DATASET_SHAPES.get(spec.dataset), dense_dims(spec)
    if dims is None or shape.token_ids:
        return None
    layers = list(zip(dims[:-1], dims[1:]))
    parameters = dense_parameters(dims)
    step_flops = 3 * 2 * spec.batch_size * sum(fan_in * fan_out for fan_in, fan_out in layers)
    epoch_flops = step_flops * (_train_examples(spec, shape) / spec.batch_size) + step_flops / 3 * (
        shape.evaluated / spec.batch_size)
    return TrialFootprint(parameters=parameters, state_bytes=state_bytes(parameters, spec.optimizer, spec.momentum),
                          activation_bytes=4 * spec.batch_size * sum(fan_in + 3 * fan_out for fan_in, fan_out in layers),
                          data_bytes=shape.resident * (dims[0] * 4 + 8), flops_per_epoch=epoch_flops)


def unaffordable(spec, node_memory_bytes: float, max_sweep_flops: float) -> tuple[str, str] | None:
    """Why a spec cannot run, as (the fields to change, the reason), or None where it can: one trial
    needs more memory than the largest node has, or the sweep's total work (trial-epochs × FLOPs per
    epoch) is over ``max_sweep_flops``. A dense model that fits under :func:`dense_ceiling` is let
    through without the estimate on the meta device."""
    ceiling = dense_ceiling(spec)
    if ceiling is not None and _refusal(spec, ceiling, node_memory_bytes, max_sweep_flops) is None:
        return None
    footprint = estimate(spec)
    if footprint is None:
        return None
    return _refusal(spec, footprint, node_memory_bytes, max_sweep_flops)


def _refusal(spec, footprint: TrialFootprint, node_memory_bytes: float, max_sweep_flops: float) -> tuple[str, str] | None:
    if footprint.memory_bytes > node_memory_bytes:
        return ("model", f"model.width, model.depth (or model.hidden), batch_size: one trial needs "
                         f"about {footprint.describe()}; the largest node has "
                         f"{node_memory_bytes / GIB:,.1f} GiB")
    total = spec.trial_count * spec.epochs * footprint.flops_per_epoch
    if total > max_sweep_flops:
        return ("epochs", f"epochs, the grid's axes, model: the sweep is about {total / 1e15:,.0f} PFLOP "
                          f"({spec.trial_count} trials × {spec.epochs} epochs × {footprint.flops_per_epoch / 1e12:,.1f} "
                          f"TFLOP), over the limit of {max_sweep_flops / 1e15:,.0f} PFLOP (ACTSWEEP_MAX_SWEEP_PFLOP)")
    return None
