"""execution.compile and execution.dtype: a compiled pack follows the eager pack, and a bf16 pack
(or trial) stays within bf16's rounding of its fp32 twin. Correctness only; docs/speed.md has the
speed."""
from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from workers import fused
from workers.data import load_dataset
from workers.train import train_epochs
from workers.trial import TrialConfig

from tests.workers.test_fused import _members

MLP = {"kind": "mlp", "depth": 3, "width": 48, "init": "unit_norm_rows"}
COMPARED = ("train_loss", "train_loss_eval", "val_loss", "test_loss")
# Compiled vs eager: Inductor reorders the sums inside fused kernels, so after 3 epochs the
# losses agree to rounding (measured: 1.4e-7 relative at most; a wrong mask or data order moves them by 1e-2).
COMPILED_RTOL = 1e-4
# bf16 vs fp32: 8-bit mantissas in every matmul (relative rounding 2^-9 = 0.2% per product), with
# fp32 accumulation, weights and optimiser: after 3 epochs the losses stay within 5% of fp32's and
# the errors within 2 points (measured on digits: 0.4% and 0.8 points at most).
BF16_RTOL, BF16_ERROR_POINTS = 0.05, 0.02


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", Path("unused"), download=False, val_size=200)


def _cfgs(**shared) -> list[TrialConfig]:
    base = TrialConfig(activation="gelu", lr=1e-3, dropout=0.0, seed=0, epochs=3, batch_size=64, model=MLP, **shared)
    return [replace(base, activation=a, dropout=d, seed=s, lr=lr)
            for a, d, s, lr in [("elu", 0.5, 1, 1e-3), ("gelu_tanh", 0.0, 2, 2e-3), ("gelu_tanh", 0.5, 3, 1e-3),
                                ("relu", 0.0, 4, 1e-3), ("relu", 0.5, 5, 5e-4)]]


@pytest.mark.slow  # torch.compile builds C++ kernels
def test_a_compiled_pack_follows_the_eager_pack(digits, monkeypatch):
    if shutil.which("g++") is None and shutil.which("c++") is None:  # CI requires it: fail there, skip elsewhere
        message = "torch.compile on a CPU needs a C++ compiler (g++); .ci/system-packages.sh installs it"
        pytest.fail(message) if os.environ.get("ACTSWEEP_REQUIRE_CXX") else pytest.skip(message)
    calls = []
    original = fused.CompiledStep.__call__
    monkeypatch.setattr(fused.CompiledStep, "__call__", lambda self, *a: calls.append(1) or original(self, *a))
    eager, compiled = _members(_cfgs(), digits), _members(_cfgs(compile=True), digits)
    assert calls, "the compiled step never ran"
    for cfg, mine, theirs in zip(_cfgs(), compiled, eager):
        for a, b in zip(mine, theirs):
            for key in COMPARED:
                assert a[key] == pytest.approx(b[key], rel=COMPILED_RTOL), f"{cfg.activation} s{cfg.seed} {key}"


def test_a_pack_with_soi_steps_eagerly_when_compiled(digits, monkeypatch):
    cfgs = [replace(c, compile=True) for c in _cfgs()[:2]] + [
        replace(_cfgs()[0], activation="soi", dropout=0.0, seed=9, compile=True)]
    monkeypatch.setattr(fused.CompiledStep, "__call__", lambda *a: pytest.fail("SOI's masks are sampled eagerly"))
    assert all(len(h) == 3 for h in _members(cfgs, digits))


@pytest.mark.parametrize("where", ["fused", "per_trial"])
def test_bf16_stays_within_its_rounding_of_fp32(digits, where):
    def run(cfgs):
        if where == "fused":
            return _members(cfgs, digits)
        return [list(train_epochs(cfg, digits)) for cfg in cfgs]

    full, half = run(_cfgs()), run(_cfgs(dtype="bf16"))
    for cfg, mine, theirs in zip(_cfgs(), half, full):
        label = f"{cfg.activation} dropout {cfg.dropout} seed {cfg.seed}"
        assert mine[-1]["train_loss"] != theirs[-1]["train_loss"], f"{label}: bf16 ran in fp32"
        for key in COMPARED:
            assert mine[-1][key] == pytest.approx(theirs[-1][key], rel=BF16_RTOL), f"{label} {key}"
        assert abs(mine[-1]["test_error"] - theirs[-1]["test_error"]) <= BF16_ERROR_POINTS, label


def test_bf16_draws_the_masks_of_fp32(digits):
    """The masks come from the same counters in float32: a bf16 pack's dropout noise at a step is
    the fp32 pack's, bit for bit, and another step's differs."""
    cfgs = _cfgs()
    draws = {}
    for dtype in ("fp32", "bf16"):
        state = fused.StackedPack([replace(c, dtype=dtype) for c in cfgs], digits, torch.device("cpu"))
        draws[dtype] = state.net.dropout_noise(8, torch.device("cpu"), step=5)
        other = state.net.dropout_noise(8, torch.device("cpu"), step=6)
    assert all(noise.dtype == torch.float32 for noise in draws["bf16"])
    assert all(torch.equal(a, b) for a, b in zip(draws["fp32"], draws["bf16"]))
    assert not torch.equal(draws["bf16"][0], other[0])
