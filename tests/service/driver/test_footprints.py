"""The sweep's driver measures nothing with torch itself: a pack member's footprint and a lone
trial's estimate come from a Ray task on a worker (service.driver.observations.Footprints), the
same numbers as measured in-process; and this machine's GPUs are read without torch."""
from __future__ import annotations

import os
import stat

import pytest

from search_spaces import load_spec
from service.driver import observations
from service.driver.observations import (Footprints, KeptFootprints, local_gpus, pack_footprint, trial_bytes,
                                        visible_gpus)
from service.driver.provenance import hardware
from service.driver.sweeps import trial_memory_limit
from service.driver.trial_env import tune_runtime_env
from service.settings import Settings
from tests.conftest import TINY, ensure_local_ray


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    from workers.data import load_dataset

    settings = Settings(home=tmp_path_factory.mktemp("footprints"), download=False)
    return load_dataset("digits", settings.resolved_data_dir, False, 200, None, {}, None)


@pytest.mark.slow  # (the session's local Ray, started here where it is the first to ask)
def test_the_footprints_are_measured_by_a_ray_task_as_in_this_process(digits, monkeypatch):
    import ray

    ensure_local_ray()
    spec = load_spec("mnist_classification", quick=True, overrides=TINY)
    expected_pack, expected_trial = pack_footprint(spec, spec.grid_points(), digits), trial_bytes(spec)

    def not_here(*args):  # the measurements must come from the task's worker process, not this one
        raise AssertionError("measured in the driver's process")

    import workers.footprint
    import workers.pack_memory

    # (the measuring code, as this process's modules hold it: the task's worker imports its own)
    monkeypatch.setattr(workers.pack_memory, "measure_footprint", not_here)
    monkeypatch.setattr(workers.footprint, "estimate", not_here)
    footprints = Footprints(spec, ray.put(digits))
    # (a CPU plan: a node that trains on CPUs; in Tune's runtime environment, as a warm trial worker has it)
    assert footprints.options() == {"num_cpus": 1, "runtime_env": tune_runtime_env()}
    assert footprints.pack() == expected_pack and expected_pack.per_member > 0
    assert footprints.trial_bytes() == expected_trial > 0
    assert footprints.pack() is footprints.pack()  # measured once a sweep


def test_without_ray_the_footprints_are_measured_here(digits, monkeypatch):
    monkeypatch.setattr(observations.ray, "is_initialized", lambda: False)  # (``actsweep plan`` on this machine)
    spec = load_spec("mnist_classification", quick=True, overrides=TINY)
    footprints = Footprints(spec, digits)
    assert footprints.pack() == pack_footprint(spec, spec.grid_points(), digits)
    assert footprints.trial_bytes() == trial_bytes(spec) > 0


def test_a_footprint_kept_in_the_home_is_measured_once_for_the_same_members_data_and_code(digits, monkeypatch,
                                                                                           tmp_path):
    monkeypatch.setattr(observations.ray, "is_initialized", lambda: False)
    spec = load_spec("mnist_classification", quick=True, overrides=TINY)
    identity = {"data": digits.fingerprint(), "sizes": digits.sizes(), "code": "git abc"}
    first = Footprints(spec, digits, kept=KeptFootprints(tmp_path, identity))
    measured = first.pack(), first.trial_bytes()

    def not_again(*args):  # (a fault injected: a kept footprint is not measured again)
        raise AssertionError("measured again")

    monkeypatch.setattr(observations, "pack_footprint", not_again)
    monkeypatch.setattr(observations, "trial_bytes", not_again)
    again = Footprints(spec, digits, kept=KeptFootprints(tmp_path, identity))
    assert (again.pack(), again.trial_bytes()) == measured
    for changed in ({**identity, "code": "git def"}, {**identity, "data": "another"}):  # another code or data: measured
        with pytest.raises(AssertionError, match="measured again"):
            Footprints(spec, digits, kept=KeptFootprints(tmp_path, changed)).pack()
    other = load_spec("mnist_classification", quick=True, overrides={**TINY, "model.width": 48})
    with pytest.raises(AssertionError, match="measured again"):  # other members: measured
        Footprints(other, digits, kept=KeptFootprints(tmp_path, identity)).pack()


def test_a_trials_memory_limit_asks_for_the_estimate_only_where_it_sets_one():
    asked = []

    def estimate():
        asked.append(1)
        return 1e9

    fused = load_spec("mnist_classification", quick=True, overrides={**TINY, "execution.mode": "fused",
                                                                      "execution.gpus_per_trial": 0})
    assert trial_memory_limit(fused, estimate) is None and not asked
    alone = load_spec("mnist_classification", quick=True, overrides={**TINY, "execution.mode": "per_trial",
                                                                      "execution.gpus_per_trial": 0})
    assert trial_memory_limit(alone, estimate) == 3 * 10 ** 9 + 2 * 2 ** 30 and asked == [1]
    assert trial_memory_limit(alone, lambda: 0.0) is None  # no estimate: no limit


def test_gpus_are_read_from_nvidia_smi_as_cuda_visible_devices_leaves_them(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"  # a stand-in that answers as nvidia-smi does for two cards
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559'\necho 'NVIDIA H200, 143771'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpus() == [("NVIDIA H100 80GB HBM3", 81559 * 2 ** 20), ("NVIDIA H200", 143771 * 2 ** 20)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert local_gpus() == (1, 143771 * 2 ** 20)
    assert "GPU: NVIDIA H200; torch " in hardware()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert local_gpus() == (0, None) and "GPU: none; torch " in hardware()


def test_the_measuring_task_asks_for_a_sliver_of_a_gpu_where_the_trials_train_on_gpus():
    from service.driver.execution_plan import Cluster, Node
    from service.driver.observations import trains_on_gpu

    gpus, cpus = Cluster((Node(16, 1, 128e9),), 80e9), Cluster((Node(2, 0, 8e9),))
    spec = load_spec("mnist_classification", quick=True, overrides=TINY)  # (gpus_per_trial: auto)
    on_cpus = load_spec("mnist_classification", quick=True, overrides={**TINY, "execution.gpus_per_trial": 0})
    on_one = load_spec("mnist_classification", quick=True, overrides={**TINY, "execution.gpus_per_trial": 1})
    assert trains_on_gpu(spec, gpus) and trains_on_gpu(on_one, gpus)
    assert not trains_on_gpu(on_cpus, gpus) and not trains_on_gpu(spec, cpus)
    assert not trains_on_gpu(on_one, cpus)  # (no GPU to wait for: the plan refuses it by name)
    assert Footprints(spec, None, on_gpu=True).options() == {"num_gpus": 0.001, "num_cpus": 0,
                                                             "runtime_env": tune_runtime_env()}
