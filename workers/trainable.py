"""The Ray Tune trainable: one grid point, trained by :func:`workers.train.train_epochs`."""
from __future__ import annotations

import torch
from ray import tune

from workers.datasets import Splits
from workers.train import TrialConfig, train_epochs


def trial_device(gpus_per_trial: float) -> torch.device:
    """The trial's device: a GPU when the trial reserved one (Ray sets CUDA_VISIBLE_DEVICES)."""
    if gpus_per_trial > 0 and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def trial_settings(config: dict) -> dict:
    """A Tune trial's config with its grid point (activation, dropout, lr, seed) at the top level.

    Under a search, Tune's Repeater numbers the repeats of one suggestion (``__trial_index__``):
    repeat i runs the spec's i-th seed.
    """
    settings = {**config, **config.get("point", {})}
    if "__trial_index__" in config:
        settings["seed"] = config["seeds"][config["__trial_index__"]]
    return settings


def run_trial(config: dict, splits: Splits) -> None:
    """Train one trial and report every epoch's metrics to Tune.

    ``splits`` arrives through ``tune.with_parameters``: the arrays go into Ray's object store
    once per sweep, not once per trial.
    """
    # One intra-op thread per reserved CPU, so concurrent trials do not oversubscribe the cores.
    torch.set_num_threads(max(1, int(config.get("cpus_per_trial", 1))))
    device = trial_device(config.get("gpus_per_trial", 0.0))
    for metrics in train_epochs(TrialConfig.from_config(trial_settings(config)), splits, device):
        tune.report(metrics)
