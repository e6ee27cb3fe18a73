"""How many trial processes a GPU holds: each process's CUDA context counted against its memory.

Ray places trials on a GPU by the fraction each asks for (``execution.gpus_per_trial``): 0.25 puts
up to four trial processes on one card, 0.01 up to a hundred. Each process then holds its own CUDA
context, cuBLAS workspaces and allocator pools before its trial allocates anything: 610–810 MiB
per process on an H100 80GB (nvidia-smi while four trials shared it). A fraction whose processes'
contexts and trials do not fit the card's memory is refused before Tune starts, with the numbers,
and with the way out that shares one context among many trials: ``execution.mode: fused``.
"""
from __future__ import annotations

import math

from search_spaces.catalog import SpecError

GIB = 2 ** 30


class GpuPlacementError(SpecError):
    """More trial processes on a GPU than its memory holds."""


def processes_per_gpu(gpus_per_trial: float) -> int:
    """The most trials Ray starts on one GPU at this fraction (whole GPUs: one)."""
    if gpus_per_trial >= 1:
        return 1
    return max(1, math.floor(1 / gpus_per_trial + 1e-9))


def placement_refusal(gpus_per_trial: float, trial_bytes: float, gpu_bytes: float, context_bytes: float,
                      fused: bool) -> str | None:
    """Why this fraction does not fit a GPU of ``gpu_bytes``, or None where it does: every process
    holds ``context_bytes`` (CUDA context, cuBLAS workspaces) beside its trial's ``trial_bytes``."""
    processes = processes_per_gpu(gpus_per_trial)
    need = processes * (context_bytes + trial_bytes)
    if need <= gpu_bytes:
        return None
    fits = max(0, math.floor(gpu_bytes / (context_bytes + trial_bytes)))
    unit = "pack" if fused else "trial"
    if fits:  # the smallest fraction (to 4 digits) at which Ray starts no more processes than fit
        fraction = _round(1 / fits, math.floor)
        if processes_per_gpu(fraction) > fits:
            fraction = _round(1 / fits, math.ceil)
        fits = processes_per_gpu(fraction)
    way_out = (f"raise execution.gpus_per_trial to at least {fraction:g} ({fits} processes per GPU)" if fits
               else "the trial alone does not fit this GPU: make it smaller")
    return (f"execution.gpus_per_trial: {gpus_per_trial:g} puts up to {processes} {unit} processes on one GPU, each "
            f"holding about {context_bytes / GIB:.2f} GiB of CUDA context and workspaces beside its {unit}'s "
            f"{trial_bytes / GIB:.2f} GiB: {need / GIB:.1f} GiB, more than the GPU's {gpu_bytes / GIB:.1f} GiB; "
            f"{way_out}" + ("" if fused else ", or train the trials as fused packs (execution.mode: fused), "
                                             "which share one context per pack"))


def _round(value: float, direction, digits: int = 4) -> float:
    scale = 10 ** (digits - 1 - math.floor(math.log10(value)))
    return direction(value * scale) / scale


def check_gpu_placement(gpus_per_trial: float, trial_bytes: float, gpu_bytes: float, context_bytes: float,
                        fused: bool) -> None:
    """Raise GpuPlacementError (a SpecError naming execution.gpus_per_trial) where it does not fit."""
    refusal = placement_refusal(gpus_per_trial, trial_bytes, gpu_bytes, context_bytes, fused)
    if refusal:
        raise GpuPlacementError(refusal, [{"loc": ("execution", "gpus_per_trial"), "msg": refusal}])
