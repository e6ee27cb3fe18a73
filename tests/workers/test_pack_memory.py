"""A fused pack's measured memory footprint (workers.pack_memory), on the real digits data.

The counts are exact byte counts of real tensors, so each test checks a difference the code must
produce to the byte (Adam's two moments, a batch's saved activations, the noisy test copy) or a
linearity that a miscount breaks. The CUDA test checks the footprint against the allocator's peak
where a GPU is present."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from workers.data import load_dataset
from workers.pack_memory import PackFootprint, dataset_bytes, measure_footprint, step_bytes
from workers.trial import TrialConfig

MLP = {"kind": "mlp", "depth": 3, "width": 48, "init": "unit_norm_rows"}


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", Path("unused"), download=False, val_size=200)


def _cfg(**changes) -> TrialConfig:
    base = TrialConfig("gelu", 1e-3, 0.0, 0, epochs=1, batch_size=32, model=MLP, eval_train=False)
    return replace(base, **changes)


def _weight_bytes(digits, members: int = 1) -> int:
    sizes = [digits.in_dim, *[MLP["width"]] * MLP["depth"], digits.n_classes]
    return members * sum((a + 1) * b for a, b in zip(sizes, sizes[1:])) * 4


def test_adam_holds_two_moments_and_momentum_one_buffer(digits):
    weights = _weight_bytes(digits)
    adam = step_bytes([_cfg(optimizer="adam")], digits)
    sgd = step_bytes([_cfg(optimizer="sgd", lr=0.01)], digits)
    momentum = step_bytes([_cfg(optimizer="sgd", lr=0.01, momentum=0.9)], digits)
    assert adam - sgd == 2 * weights
    assert momentum - sgd == weights


def test_a_pack_of_several_lrs_holds_them_per_element_and_adam_its_update(digits):
    """Where members' lrs differ, the optimiser spreads them over the parameters' elements (one
    buffer), and Adam steps at lr 1 into an update buffer that the lrs then scale."""
    weights = _weight_bytes(digits, members=2)
    one_lr = {o: step_bytes([_cfg(optimizer=o, seed=s) for s in (0, 1)], digits) for o in ("adam", "sgd")}
    two_lrs = {o: step_bytes([_cfg(optimizer=o, seed=s, lr=lr) for s, lr in ((0, 0.01), (1, 0.001))], digits)
               for o in ("adam", "sgd")}
    assert two_lrs["sgd"] - one_lr["sgd"] == weights  # the lrs per element
    assert two_lrs["adam"] - one_lr["adam"] == 2 * weights  # the lrs, and the update


def test_saved_activations_grow_with_the_batch_and_dropout(digits):
    small, large = step_bytes([_cfg(batch_size=32)], digits), step_bytes([_cfg(batch_size=64)], digits)
    saved_32 = large - small  # the rest of the step does not depend on the batch
    # at least the batch itself and one pre-activation and output per hidden layer, in float32
    assert saved_32 >= 32 * (digits.in_dim + 2 * MLP["depth"] * MLP["width"]) * 4
    assert step_bytes([_cfg(dropout=0.5)], digits) > small  # the masks are kept for backward


def test_noise_evaluation_adds_two_copies_of_the_test_set_per_member(digits):
    plain = step_bytes([_cfg()], digits)
    noisy = step_bytes([_cfg(eval_noise=(0.0, 1.0))], digits)
    assert noisy - plain == 2 * digits.test_x.size * 4


def test_footprint_is_linear_in_the_members(digits):
    cfgs = [_cfg(activation=a, seed=s) for s, a in enumerate(["gelu", "relu", "soi"])]
    footprint = measure_footprint(cfgs, digits)
    assert footprint.fixed == dataset_bytes(digits) == sum(np.asarray(a).nbytes for a in (
        digits.train_x, digits.train_y, digits.val_x, digits.val_y, digits.test_x, digits.test_y))
    one, six = step_bytes(cfgs[:1] * 1, digits), step_bytes(cfgs * 2, digits)
    assert footprint.per_member > _weight_bytes(digits) * 4  # weights, grads, two moments, and more
    assert six == pytest.approx(step_bytes(cfgs, digits) + 3 * footprint.per_member, rel=0.02)
    assert one < footprint.per_member * 1.5


def test_largest_pack():
    footprint = PackFootprint(fixed=1000, per_member=100)
    assert footprint.bytes(5) == 1500
    assert footprint.largest_pack(1550) == 5
    assert footprint.largest_pack(1099) == 0
    assert footprint.largest_pack(500) == 0


def test_footprint_bounds_the_cuda_peak(digits, cuda):
    from service.driver.execution_plan import GPU_HEADROOM
    from workers.fused import train_pack

    cfgs = [_cfg(activation=a, seed=s, eval_train=True, eval_noise=(0.5,)) for s, a in enumerate(["gelu", "relu", "elu"] * 4)]
    footprint = measure_footprint(cfgs[:3], digits, cuda)  # (its measuring step allocates cuBLAS's workspaces first)
    assert footprint.fixed > measure_footprint(cfgs[:3], digits).fixed  # the allocator's overhead is counted
    torch.cuda.reset_peak_memory_stats()
    list(train_pack(cfgs, digits, cuda))
    peak = torch.cuda.max_memory_allocated()
    print(f"cuda peak {peak / 2**20:.1f} MiB, footprint {footprint.bytes(len(cfgs)) / 2**20:.1f} MiB")
    assert footprint.bytes(len(cfgs)) * 0.5 <= peak <= footprint.bytes(len(cfgs)) / GPU_HEADROOM
