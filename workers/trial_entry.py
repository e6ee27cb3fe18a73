"""The Ray Tune trainable as the sweep's driver names it: torch-free, so the driver (a Ray job, or
the CLI) hands Tune a callable without importing the training code. The trial's own process
imports workers.trainable (torch) on its first call; reused actors keep it imported."""
from __future__ import annotations

import ray

from workers.data import Splits


def run_trial(config: dict, splits: Splits | ray.ObjectRef) -> None:
    """Train one trial: :func:`workers.trainable.run_trial`. ``splits`` arrives through
    ``tune.with_parameters``, as the arrays or as the ref of the arrays the driver put once per
    sweep into Ray's object store (a ref inside a parameter is not resolved by Tune)."""
    from workers.trainable import run_trial as train

    if isinstance(splits, ray.ObjectRef):
        splits = ray.get(splits)
    train(config, splits)
