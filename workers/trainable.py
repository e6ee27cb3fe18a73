"""The Ray Tune trainable: one grid point, trained by :func:`workers.train.train_epochs`."""
from __future__ import annotations

import resource
from contextlib import contextmanager

import psutil
import ray
import torch
from ray import tune

from workers.allocator import keep_freed_memory
from workers.checkpoints import CheckpointPacer, load_state, save_state, state_path
from workers.data import Splits
from workers.fused import train_pack
from workers.train import train_epochs
from workers.trial import REPORTED_AGAIN, TrialConfig, is_pack, members


def trial_device(gpus_per_trial: float) -> torch.device:
    """The trial's device: a GPU when the trial reserved one (Ray sets CUDA_VISIBLE_DEVICES)."""
    if gpus_per_trial > 0 and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


@contextmanager
def memory_limit(extra_bytes: int | None):
    """At most ``extra_bytes`` more private memory for this process while the trial runs (the soft
    RLIMIT_DATA, above what it holds now): past it an allocation fails (torch: "can't allocate
    memory"), so a trial that outgrows its estimate fails alone instead of leaving the node to Ray's
    memory monitor. The limit is lifted after the trial: the process (reused actors) serves others."""
    if not extra_bytes:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    held = psutil.Process().memory_info().data  # (VmData: what RLIMIT_DATA counts)
    limit = held + extra_bytes if hard == resource.RLIM_INFINITY else min(held + extra_bytes, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield
    except (MemoryError, RuntimeError, SystemError) as exc:
        if not _failed_allocation(exc, limit):
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise MemoryError(f"the trial went past its memory limit, {extra_bytes / 1e9:.2f} GB more than its process "
                          f"held at its start (execution.memory_limit_gb): {type(exc).__name__} {first}") from exc
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _failed_allocation(exc: BaseException, limit: int) -> bool:
    """Whether ``exc`` is an allocation refused by the limit: a MemoryError, torch's "can't allocate
    memory", or a SystemError ("error return without exception set": a C extension whose malloc
    failed and that said nothing, seen under load) raised with the process within 64 MiB of the limit,
    as one more layer's weights would take it."""
    if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc):
        return True
    return isinstance(exc, SystemError) and psutil.Process().memory_info().data > limit - 64 * 2 ** 20


def run_trial(config: dict, splits: Splits) -> None:
    """Train one trial (a grid point or a fused pack) and report every epoch's metrics to Tune,
    each after the state to resume from is written (workers.checkpoints).

    ``splits`` arrives through ``tune.with_parameters``: the arrays go into Ray's object store
    once per sweep, not once per trial. A retried or restored trial resumes after its last
    checkpointed epoch; its first report then says so (``resumed_from_epoch``). Every report
    names the Ray node that trained it (``node_id``: nodes on one host share an IP) and the
    fraction of a GPU it holds (``gpus``).
    """
    device = trial_device(config.get("gpus_per_trial", 0.0))
    with memory_limit(config.get("memory_limit_bytes") if device.type == "cpu" else None):
        _run_trial(config, splits, device)


def _run_trial(config: dict, splits: Splits, device: torch.device) -> None:
    # One intra-op thread per reserved CPU, so concurrent trials do not oversubscribe the cores.
    torch.set_num_threads(max(1, int(config.get("cpus_per_trial", 1))))
    keep_freed_memory()  # each step reuses the last one's memory, not fresh pages (workers.allocator)
    path = state_path(config)
    resume = load_state(path) if path else None
    context = ray.get_runtime_context()  # where it runs, and what it holds of a GPU (a pack may hold half)
    node = {"node_id": context.get_node_id(), "gpus": context.get_assigned_resources().get("GPU", 0.0)}
    state: dict = {}
    cfgs = [TrialConfig.from_config(m) for m in members(config)]  # (one, or a fused pack's members)
    if is_pack(config):  # a fused pack: one report per epoch holds every member's metrics
        # as a list of [index, metrics] pairs, not a dict: Tune keeps running statistics of every
        # number in a dict it can flatten, 2.6 MB a 50-member pack (docs/load.md, driver memory)
        epochs = (
            {"epoch": report_epoch(report), "members": [[i, m] for i, m in enumerate(report) if m is not None]}
            for report in train_pack(cfgs, splits, device, resume=resume, on_state=state.update))
    else:
        epochs = train_epochs(cfgs[0], splits, device, resume=resume, on_state=state.update)
    # The last REPORTED_AGAIN epochs saved before an interruption may not have reached MLflow (the
    # driver's logger writes in batches of fewer; the last may not have been reported at all): they
    # are reported again (the logger skips the epochs a run already has).
    reported = list(resume.get("reported", [])) if resume else []
    for result in reported:
        tune.report(result)
    resumed_from = {"resumed_from_epoch": resume["epoch"]} if resume is not None else {}
    pacer, last_epoch = CheckpointPacer(), cfgs[0].epochs
    for result in epochs:
        result.update(node, **resumed_from)  # the first epoch after a resume says so
        resumed_from = {}
        reported = [*reported[-(REPORTED_AGAIN - 1):], result]
        # Saved before it is reported, so a retry resumes at or before every epoch the driver (and
        # MLflow) has seen; the epochs after its save train again the same, and the logger keeps
        # the first report of each. Paced: a big pack's state costs more than its epoch.
        if path and state.get("epoch") == result["epoch"] and pacer.due(final=result["epoch"] == last_epoch):
            with pacer.writing():  # (not after a diverged trial's last epoch: it has no state)
                save_state(path, {**state, "reported": reported})
        tune.report(result)
    if resumed_from and reported:  # resumed with nothing left to train: it had finished before the
        tune.report({**reported[-1], **resumed_from})  # driver heard; its last epoch again, saying so


def report_epoch(report: list[dict | None]) -> int:
    return next(m["epoch"] for m in report if m is not None)
