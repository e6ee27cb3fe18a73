"""execution.gpus_per_trial, dtype and compile through a whole sweep: a real local Ray (told it
has one GPU, so fractional GPUs are scheduled as on a GPU machine while torch, seeing none,
trains on the CPU) and a real MLflow store."""
from __future__ import annotations

import pytest
import ray
import torch
from mlflow.tracking import MlflowClient

from search_spaces import load_spec
from service.driver.observations import plan_sweep
from service.driver.sweeps import run_sweep
from service.reporting.render import render
from service.reporting.results import sweep_results
from service.settings import Settings
from workers.trainable import trial_device

pytestmark = pytest.mark.slow  # sweeps trained end to end on a real Ray (make test-fast leaves them out)

# 2 activations × 2 seeds = 4 grid points, in 2 packs of 2
SMALL = {"dataset": "digits", "val_size": 200, "epochs": 2, "batch_size": 64, "model.depth": 2, "model.width": 32,
         "activation": ["gelu", "relu"], "lr": [0.01], "dropout": [0.0], "seeds": 2,
         "execution.mode": "fused", "execution.pack_size": 2}


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    ray.shutdown()  # (the session's local Ray has no GPU; this module's Ray has one made up)
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield Settings(home=tmp_path_factory.mktemp("execution"), download=False)
    ray.shutdown()


def test_a_trial_trains_on_the_gpu_only_when_it_reserved_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert trial_device(0.5) == torch.device("cuda") and trial_device(0.0) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert trial_device(0.5) == torch.device("cpu")  # reserved, but this process sees no GPU


def test_without_a_flag_the_fig2_grid_plans_its_packs_on_the_gpu_ray_reports(settings):
    """The defaults (execution: auto) read the one GPU this Ray declares: the packs ask for it."""
    from workers.data import load_dataset

    spec = load_spec("mnist_classification", quick=True, overrides={"dataset": "digits", "val_size": 200})
    data = load_dataset("digits", settings.resolved_data_dir, False, 200, None, {}, None)
    found = plan_sweep(spec, data, settings.cuda_context_mb * 2 ** 20)
    assert (found.mode, found.gpus_per_trial, found.units) == ("fused", 1.0, [24])
    assert found.devices.startswith("1 GPU (memory unknown") and "no CUDA device" in found.why["gpu_memory"]
    explicit = plan_sweep(load_spec("mnist_classification", quick=True, overrides={
        "dataset": "digits", "val_size": 200, "execution.gpus_per_trial": 0, "execution.mode": "per_trial"}),
        data, 0.0)
    assert (explicit.mode, explicit.gpus_per_trial, explicit.slots) == ("per_trial", 0.0, 2)


def test_packs_share_one_gpu_by_fractions(settings):
    spec = load_spec("mnist_classification", quick=True, overrides={**SMALL, "execution.gpus_per_trial": 0.5})
    outcome = run_sweep(spec, settings)
    assert (outcome.trials, outcome.errors) == (4, 0)
    client = MlflowClient(settings.resolved_tracking_uri)
    tags = [client.get_run(r).data.tags for r in sweep_results(settings.resolved_tracking_uri, outcome.sweep_id).runs["run_id"]]
    assert len({t["pack_id"] for t in tags}) == 2  # one pack per half GPU
    assert {t["gpus"] for t in tags} == {"0.5"}  # what Ray assigned each pack


@pytest.mark.long("three sweeps: fp32, bf16 (emulated where the CPU has no native bf16), bf16 again from the cache")
@pytest.mark.timeout(160)  # 61 s in a full suite at 35328a7
def test_dtype_and_compile_reach_the_trials_the_report_and_the_cache(settings):
    fp32 = run_sweep(load_spec("mnist_classification", quick=True, overrides=SMALL), settings)
    bf16 = run_sweep(load_spec("mnist_classification", quick=True,
                               overrides={**SMALL, "execution.dtype": "bf16"}), settings)
    assert bf16.reused == 0, "an fp32 trial was reused for a bf16 one"
    client = MlflowClient(settings.resolved_tracking_uri)
    results = sweep_results(settings.resolved_tracking_uri, bf16.sweep_id)
    assert {client.get_run(r).data.params["dtype"] for r in results.runs["run_id"]} == {"bf16"}
    assert "Precision: bf16 matmuls (autocast)" in render(results, "md")
    reference = sweep_results(settings.resolved_tracking_uri, fp32.sweep_id).runs.set_index(["activation", "seed"])
    mine = results.runs.set_index(["activation", "seed"]).loc[reference.index]
    assert (mine["train_loss"] != reference["train_loss"]).all()  # it did run in bf16 ...
    assert mine["train_loss"].to_numpy() == pytest.approx(reference["train_loss"].to_numpy(), rel=0.05)  # ... closely
    again = run_sweep(load_spec("mnist_classification", quick=True, overrides={**SMALL, "execution.dtype": "bf16"}),
                      settings)
    assert again.reused == 4  # the same dtype: every trial from the cache
