"""How a convnet trial uses a GPU, as the cifar bench measured it (``actsweep bench --workload cifar
--device cuda``; service.benchmarks.cifar). Torch-free: the execution plan (service.driver) asks it.

- :func:`convnet_strategy`: how several trials of one convnet share a GPU: ``per_trial`` (one trial
  per process, the GPU to itself), ``processes`` (several trial processes on one GPU: fractional
  GPUs), ``streams`` (several trials in one process, each on its own CUDA stream) or
  ``grouped_conv`` (a pack: the members' convolutions as one grouped convolution).
- :func:`channels_last`: whether a net's trial runs in the channels-last memory format on a GPU, at
  its precision (fp32 or TF32: measured apart).

Both read the bench's JSON (``docs/benchmarks/cifar_cuda.json``) where it has been committed, so a
measurement on a GPU becomes the choice; before one, the defaults below (one trial per process,
channels-first: what ran before) hold. ``ACTSWEEP_CHANNELS_LAST=1`` or ``0`` forces the layout.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

STRATEGIES = ("per_trial", "processes", "streams", "grouped_conv")
MEASURED = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "cifar_cuda.json"
DEFAULT_STRATEGY = "per_trial"  # a net the bench has not measured on a GPU: one trial per process


@lru_cache(maxsize=None)
def measured(path: str = str(MEASURED)) -> dict:
    """The bench's choices by model kind: ``{"strategy": {kind: name}, "channels_last": {kind: bool},
    "channels_last_tf32": {kind: bool}}`` (empty where the bench has not run on a GPU here)."""
    try:
        return json.loads(Path(path).read_text()).get("choices", {})
    except (OSError, ValueError):
        return {}


def convnet_strategy(model_kind: str, device_type: str = "cuda", choices: dict | None = None) -> str:
    """How several trials of a ``model_kind`` convnet share one GPU (one of :data:`STRATEGIES`): the
    fastest the cifar bench measured for that net, else ``per_trial``. On a CPU: ``per_trial``."""
    if device_type != "cuda":
        return "per_trial"
    found = (measured() if choices is None else choices).get("strategy", {}).get(model_kind)
    return found if found in STRATEGIES else DEFAULT_STRATEGY


def channels_last(model_kind: str, dtype: str = "fp32", choices: dict | None = None) -> bool:
    """Whether a ``model_kind`` convnet trains in channels-last layout on a GPU at ``dtype``
    (execution.dtype): where the cifar bench measured it faster at that precision, fp32's
    measurement serving bf16 (``ACTSWEEP_CHANNELS_LAST`` overrides); False for anything else."""
    forced = os.environ.get("ACTSWEEP_CHANNELS_LAST")
    if forced in ("0", "1"):
        return forced == "1" and model_kind in CONVNETS
    key = "channels_last_tf32" if dtype == "tf32" else "channels_last"
    return bool((measured() if choices is None else choices).get(key, {}).get(model_kind, False))


CONVNETS = ("cifar_shallow", "cifar_small", "stacked_conv", "wide_resnet")
