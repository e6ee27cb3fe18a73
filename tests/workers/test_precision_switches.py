"""``execution.dtype: fp32`` means fp32: TF32 off for cuBLAS matmuls and cuDNN convolutions during a
trial, and ``tf32`` turns both on (workers.precision). The switch on any machine; during a real
trial on a GPU (skipped without one; ACTSWEEP_REQUIRE_CUDA=1 makes it fail instead)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import make_cifar
from workers.data import load_dataset
from workers.precision import restore_tf32, set_tf32, tf32_switches, trial_precision
from workers.train import train_epochs
from workers.trial import TrialConfig

OFF = {"matmul": False, "cudnn": False, "precision": "highest"}
ON = {"matmul": True, "cudnn": True, "precision": "high"}
CONV = {"kind": "cifar_shallow", "width": 4, "input_noise": 0.15, "init": "torch_default"}


@pytest.fixture
def torch_defaults():
    """PyTorch's own defaults (cuDNN's TF32 on, cuBLAS's off), put back after the test."""
    saved = set_tf32(False)
    torch.backends.cudnn.allow_tf32 = True
    yield
    restore_tf32(saved)


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    folder = make_cifar(tmp_path_factory.mktemp("data"), "cifar10", per_batch=40, test=64)
    return load_dataset("cifar10", folder, download=False, val_size=40)


def test_the_switch_sets_both_and_puts_them_back(torch_defaults):
    before = tf32_switches()
    assert before["cudnn"] is True  # (the default that made "fp32" convolutions TF32)
    with trial_precision("fp32", torch.device("cuda")):  # (a device object: the flags need no GPU)
        assert tf32_switches() == OFF
        with trial_precision("tf32", torch.device("cuda")):
            assert tf32_switches() == ON
        assert tf32_switches() == OFF
    assert tf32_switches() == before
    with trial_precision("bf16", torch.device("cuda")):  # (what autocast leaves in float32 is fp32)
        assert tf32_switches() == OFF
    with trial_precision("tf32", torch.device("cpu")):  # no TF32 on a CPU: the trial runs in fp32
        assert tf32_switches() == OFF
    with pytest.raises(ValueError, match="execution.dtype"):
        with trial_precision("fp16", torch.device("cpu")):
            pass


def _switches_during(cfg: TrialConfig, splits, device: str) -> tuple[dict, dict]:
    """The switches while the trial is in its run (its first epoch's report in hand), and after it."""
    trial = train_epochs(cfg, splits, device)
    first = next(trial)
    during = tf32_switches()
    assert first["epoch"] == 1
    trial.close()
    return during, tf32_switches()


def test_a_cpu_trial_runs_with_tf32_off(cifar, torch_defaults):
    cfg = TrialConfig("relu", 1e-3, 0.0, 0, epochs=2, batch_size=32, model=CONV, dtype="fp32")
    during, after = _switches_during(cfg, cifar, "cpu")
    assert during == OFF and after["cudnn"] is True


@pytest.mark.parametrize("dtype, expected", [("fp32", OFF), ("tf32", ON)])
def test_a_gpu_convnet_trial_runs_with_both_tf32_switches_as_its_dtype_says(cifar, cuda, torch_defaults, dtype, expected):
    cfg = TrialConfig("relu", 1e-3, 0.0, 0, epochs=2, batch_size=32, model=CONV, dtype=dtype)
    during, after = _switches_during(cfg, cifar, cuda)
    assert during == expected
    assert after == {"matmul": False, "cudnn": True, "precision": "highest"}  # (the process's own, back)
