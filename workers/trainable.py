"""The Ray Tune trainable: one grid point, trained by :func:`workers.train.train_epochs`."""
from __future__ import annotations

import ray
import torch
from ray import tune

from workers.checkpoints import load_state, save_state, state_path
from workers.data import Splits
from workers.fused import train_pack
from workers.train import train_epochs
from workers.trial import TrialConfig, is_pack, members


def trial_device(gpus_per_trial: float) -> torch.device:
    """The trial's device: a GPU when the trial reserved one (Ray sets CUDA_VISIBLE_DEVICES)."""
    if gpus_per_trial > 0 and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def run_trial(config: dict, splits: Splits) -> None:
    """Train one trial (a grid point or a fused pack) and report every epoch's metrics to Tune,
    each after the state to resume from is written (workers.checkpoints).

    ``splits`` arrives through ``tune.with_parameters``: the arrays go into Ray's object store
    once per sweep, not once per trial. A retried or restored trial resumes after its last
    checkpointed epoch; its first report then says so (``resumed_from_epoch``). Every report
    names the Ray node that trained it (``node_id``: nodes on one host share an IP) and the
    fraction of a GPU it holds (``gpus``).
    """
    # One intra-op thread per reserved CPU, so concurrent trials do not oversubscribe the cores.
    torch.set_num_threads(max(1, int(config.get("cpus_per_trial", 1))))
    device = trial_device(config.get("gpus_per_trial", 0.0))
    path = state_path(config)
    resume = load_state(path) if path else None
    context = ray.get_runtime_context()  # where it runs, and what it holds of a GPU (a pack may hold half)
    node = {"node_id": context.get_node_id(), "gpus": context.get_assigned_resources().get("GPU", 0.0)}
    state: dict = {}
    if is_pack(config):  # a fused pack: one report per epoch holds every member's metrics
        cfgs = [TrialConfig.from_config(m) for m in members(config)]
        epochs = (
            {"epoch": report_epoch(report), "members": {str(i): m for i, m in enumerate(report) if m is not None}}
            for report in train_pack(cfgs, splits, device, resume=resume, on_state=state.update))
    else:
        epochs = train_epochs(TrialConfig.from_config(members(config)[0]), splits, device,
                              resume=resume, on_state=state.update)
    # The last two epochs saved before an interruption may not have reached the driver's MLflow
    # logger (the last may not have been reported at all): they are reported again (the logger
    # skips the epochs a run already has).
    reported = list(resume.get("reported", [])) if resume else []
    for result in reported:
        tune.report(result)
    resumed_from = {"resumed_from_epoch": resume["epoch"]} if resume is not None else {}
    for result in epochs:
        result.update(node, **resumed_from)  # the first epoch after a resume says so
        resumed_from = {}
        # Saved before it is reported, so every epoch the driver (and MLflow) has seen is in the
        # state a retry resumes from: a retry never trains again an epoch that was logged.
        if path and state.get("epoch") == result["epoch"]:  # (not after a diverged trial's last epoch)
            reported = [*reported[-1:], result]
            save_state(path, {**state, "reported": reported})
        tune.report(result)
    if resumed_from and reported:  # resumed with nothing left to train: it had finished before the
        tune.report({**reported[-1], **resumed_from})  # driver heard; its last epoch again, saying so


def report_epoch(report: list[dict | None]) -> int:
    return next(m["epoch"] for m in report if m is not None)
