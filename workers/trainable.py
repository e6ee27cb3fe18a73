"""The Ray Tune trainable: one grid point, trained by :func:`workers.train.train_epochs`."""
from __future__ import annotations

import torch
from ray import tune

from workers.datasets import Splits
from workers.fused import train_pack
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


def members(config: dict) -> list[dict]:
    """The settings of each grid point a Tune trial trains: one, or a fused pack's members."""
    pack = config.get("point", {}).get("pack")
    if pack is None:
        return [trial_settings(config)]
    base = {k: v for k, v in config.items() if k != "point"}
    return [{**base, **member} for member in pack]


def member_results(result: dict) -> list[tuple[int, dict]]:
    """(member index, metrics) for each member a Tune result reports on."""
    if "members" not in result:
        return [(0, result)]
    return [(int(i), metrics) for i, metrics in sorted(result["members"].items(), key=lambda kv: int(kv[0]))]


def run_trial(config: dict, splits: Splits) -> None:
    """Train one trial and report every epoch's metrics to Tune.

    ``splits`` arrives through ``tune.with_parameters``: the arrays go into Ray's object store
    once per sweep, not once per trial.
    """
    # One intra-op thread per reserved CPU, so concurrent trials do not oversubscribe the cores.
    torch.set_num_threads(max(1, int(config.get("cpus_per_trial", 1))))
    device = trial_device(config.get("gpus_per_trial", 0.0))
    if "pack" in config.get("point", {}):  # a fused pack: one report per epoch holds every member's metrics
        cfgs = [TrialConfig.from_config(m) for m in members(config)]
        for epoch, report in enumerate(train_pack(cfgs, splits, device), start=1):
            tune.report({"epoch": epoch, "members": {str(i): m for i, m in enumerate(report) if m is not None}})
        return
    for metrics in train_epochs(TrialConfig.from_config(trial_settings(config)), splits, device):
        tune.report(metrics)
