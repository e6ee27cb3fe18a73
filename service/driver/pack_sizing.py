"""Fused packs sized to memory (``execution.pack_size: auto``): the budget a pack may hold on its
device, and the largest pack whose measured footprint (workers.pack_memory) fits it."""
from __future__ import annotations

import logging
from dataclasses import replace

import psutil
import ray

from search_spaces import SweepSpec
from workers.data import Splits
from workers.pack_memory import PackFootprint, measure_footprint
from workers.trial import GridPoint

logger = logging.getLogger("actsweep.sweeps")

GPU_HEADROOM = 0.85  # of a pack's share of its GPU (less its CUDA context): the rest for what the count misses
CPU_SHARE = 0.5  # of the memory free on the driver's node, shared by the packs that run at once


class PackMemoryError(ValueError):
    """A memory budget too small for one member of a pack."""


def pack_memory_budget(spec: SweepSpec, slots: int, context_bytes: float = 0) -> int:
    """Bytes one fused pack may hold: ``execution.pack_memory_gb`` where given; else its share of
    a GPU (``gpus_per_trial`` of the memory a GPU worker reports, less its process's CUDA context
    ``context_bytes``, less the headroom); else, on CPUs, its share of the memory free on this node."""
    execution = spec.execution
    if execution.pack_memory_gb is not None:
        return int(execution.pack_memory_gb * 2 ** 30)
    if execution.gpus_per_trial:
        share = min(1.0, execution.gpus_per_trial)  # a pack trains on one device
        return int((gpu_memory() * share - context_bytes) * GPU_HEADROOM)  # (the pack's process holds a CUDA context)
    return int(_available_memory() * CPU_SHARE / slots)


def _available_memory() -> int:
    return psutil.virtual_memory().available  # (Linux: MemAvailable, what the kernel can give without swapping)


def gpu_memory() -> int:
    """The memory of the GPU a GPU worker of the cluster sees (bytes): asked of a task given a
    sliver of one, so it runs where the trials will."""
    return ray.get(_gpu_memory.options(num_gpus=0.001).remote(), timeout=120)


@ray.remote(num_cpus=0)
def _gpu_memory() -> int:
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("execution.pack_size auto: the worker given a GPU sees no CUDA device")
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory


def pack_footprint(spec: SweepSpec, points: list[GridPoint], data: Splits) -> PackFootprint:
    """The measured footprint (workers.pack_memory) of packs of the spec's ``points``: from one
    config per activation, eager (compiled steps save fewer tensors: the eager count bounds them)."""
    one_per_activation = list({p.activation: p for p in points}.values())
    return measure_footprint([replace(spec.trial_config(p), compile=False) for p in one_per_activation], data)


def auto_pack_size(spec: SweepSpec, points: list[GridPoint], data: Splits, slots: int,
                   budget: int | None = None, context_bytes: float = 0) -> int:
    """The largest pack (at most 256) whose measured footprint (workers.pack_memory) fits the
    budget; packs() then deals the points over the slots. Raises PackMemoryError if none fits."""
    budget = pack_memory_budget(spec, slots, context_bytes) if budget is None else budget
    footprint = pack_footprint(spec, points, data)
    size = min(256, footprint.largest_pack(budget))
    if size < 1:
        raise PackMemoryError(f"execution.pack_size auto: a pack of one member needs "
                              f"{footprint.bytes(1) / 2 ** 30:.2f} GB ({footprint.describe()}), more than the "
                              f"{budget / 2 ** 30:.2f} GB budget; raise execution.pack_memory_gb or gpus_per_trial")
    logger.info("fused packs of up to %d members: %s, budget %.2f GB per pack", size, footprint.describe(), budget / 2 ** 30)
    return size
