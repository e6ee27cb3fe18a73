"""The counter-based masks (workers.masks): the hash against a plain-Python reference, the rates,
independence across members, steps, layers and elements, and the same bits for a member alone, in
any pack and on any device.

The statistical checks use bounds of about 5 standard errors: a correct generator fails one of
them with probability well under 1e-5, while a generator that repeats a stream (members, steps or
layers sharing masks) or keeps at a wrong rate misses them by tens of standard errors."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from workers import masks
from workers.activations import Dropout
from workers.fused import StackedNet
from workers.models import attach_mask_clock, build_model
from workers.trial import TrialConfig

MLP = {"kind": "mlp", "depth": 3, "width": 48, "init": "unit_norm_rows"}


def _net(activations, dropouts, seeds, device="cpu") -> StackedNet:
    references = []
    for activation, dropout, seed in zip(activations, dropouts, seeds):
        torch.manual_seed(seed)
        references.append(build_model(MLP, (64,), 10, activation, dropout))
    return StackedNet(references, list(activations), list(dropouts), list(seeds), device)


def test_the_int32_hash_is_lowbias32_bit_for_bit():
    values = torch.randint(-2 ** 31, 2 ** 31 - 1, (4096,), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    hashed = masks.mix32_(values.clone())
    expected = [masks.mix32_int(v & 0xFFFFFFFF) for v in values.tolist()]
    assert [h & 0xFFFFFFFF for h in hashed.tolist()] == expected
    assert masks.mix32_int(0x12345678) != 0x12345678


def test_uniforms_are_in_the_unit_interval_with_the_mean_and_variance_of_u01():
    keys = masks.seed_keys(list(range(8)), "cpu")
    u = masks.uniforms(masks.step_keys(keys, 0), masks.site_counters(256, 128, 1, torch.device("cpu")))
    assert u.dtype == torch.float32 and u.shape == (8, 256, 128)
    assert 0.0 <= u.min().item() and u.max().item() < 1.0
    n = u.numel()
    assert abs(u.mean().item() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert abs(u.var().item() - 1 / 12) < 0.002


@pytest.mark.parametrize("p", [0.5, 0.25, 0.1])
def test_dropout_keeps_at_its_rate(p):
    net = _net(["relu"] * 6, [p] * 6, range(6))
    kept = torch.stack([(noise > 0).float() for noise in net.dropout_noise(128, "cpu", step=3)])
    n = kept.numel()
    assert abs(kept.mean().item() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)
    noise = net.dropout_noise(128, "cpu", step=3)[0]
    assert noise.unique().tolist() == [0.0, pytest.approx(1 / (1 - p))]


def _agreement_bound(n: int) -> float:
    return 5 * math.sqrt(0.25 / n)  # two independent p = 0.5 masks agree at 0.5, with this spread


def test_masks_are_independent_across_members_steps_layers_and_elements():
    net = _net(["relu"] * 4, [0.5] * 4, [0, 1, 2, 3])
    members = list(range(4))
    step0 = [(n > 0) for n in net.dropout_noise(256, "cpu", step=0)]
    step1 = [(n > 0) for n in net.dropout_noise(256, "cpu", step=1)]
    pairs = {"members 0 and 1": (step0[0][0], step0[0][1]), "seeds 2 and 3": (step0[1][2], step0[1][3]),
             "steps 0 and 1": (step0[0][0], step1[0][0]), "layers 0 and 1": (step0[0][0], step0[1][0]),
             "neighbouring elements": (step0[2][0][:, :-1], step0[2][0][:, 1:]),
             "neighbouring examples": (step0[2][0][:-1], step0[2][0][1:])}
    for label, (a, b) in pairs.items():
        agree = (a == b).float().mean().item()
        assert abs(agree - 0.5) < _agreement_bound(a.numel()), f"{label}: agree on {agree:.4f}"


def test_a_members_masks_do_not_depend_on_its_pack():
    alone = _net(["gelu"], [0.5], [7])
    crowd = _net(["relu", "gelu", "elu", "soi"], [0.25, 0.5, 0.0, 0.0], [3, 7, 1, 2])
    mine = alone.dropout_noise(32, "cpu", step=11)
    theirs = crowd.dropout_noise(32, "cpu", step=11)
    for layer_alone, layer_crowd in zip(mine, theirs):
        assert torch.equal(layer_alone[0], layer_crowd[1])
    assert torch.equal(theirs[0][2], torch.ones_like(theirs[0][2]))  # dropout 0: every unit passes, scaled by 1


def test_a_lone_networks_layers_draw_the_pack_members_masks():
    """A network alone (workers.models, its MaskClock) draws at each Dropout and SOI layer the
    masks a pack member of the same seed draws at that site."""
    net = build_model(MLP, (64,), 10, "soi", 0.5)
    net.mask_clock.start(5, "cpu")
    net.mask_clock.step = 9
    pack = _net(["relu", "soi"], [0.0, 0.5], [1, 5])
    soi = pack.soi_uniforms(16, "cpu", step=9)  # (rows of the stochastic span: the soi member is its first)
    noise = pack.dropout_noise(16, "cpu", step=9)
    dropouts = [m for m in net.modules() if isinstance(m, Dropout)]
    assert len(dropouts) == MLP["depth"] and pack.soi_span == (1, 2)
    for layer, dropout in enumerate(dropouts):
        assert dropout.mask_site == masks.site(layer, masks.DROPOUT)
        assert torch.equal(net.mask_clock.draw(masks.site(layer, masks.SOI), (16, 48), "cpu"), soi[layer][0])
        alone = torch.where(net.mask_clock.keep(dropout.mask_site, (16, 48), "cpu", 0.5), 2.0, 0.0)
        assert torch.equal(alone, noise[layer][1])
        assert torch.equal(noise[layer][0], torch.ones(16, 48))  # the relu member drops nothing


@pytest.mark.parametrize("p", [0.5, 0.25, 0.1, 0.0, 1 / 3])
def test_dropout_on_the_bits_is_dropout_on_the_uniforms(p):
    """keep_threshold decides u < 1 − p on the hash's bits, exactly (u: its top 24 bits)."""
    keys = masks.step_keys(masks.seed_keys([0, 1, 2], "cpu"), 4)
    counters = masks.site_counters(64, 256, 3, torch.device("cpu"))
    threshold = torch.full((3,), masks.keep_threshold(p), dtype=torch.int32)
    assert torch.equal(masks.kept(keys, counters, threshold), masks.uniforms(keys, counters) < 1.0 - p)


def test_a_network_outside_the_training_loop_draws_from_the_global_generator():
    net = attach_mask_clock(build_model(MLP, (64,), 10, "relu", 0.5))
    x = torch.randn(4, 64)
    torch.manual_seed(0)
    first = net(x)
    torch.manual_seed(0)
    assert torch.equal(net(x), first)
    assert not torch.equal(net(x), first)


def test_the_cpu_and_a_gpu_draw_the_same_masks(cuda):
    keys = masks.seed_keys([0, 1, 12345, 2 ** 40 + 3], "cpu")
    for step in (0, 1, 164_999):
        on_cpu = masks.uniforms(masks.step_keys(keys, step), masks.site_counters(128, 130, 3, torch.device("cpu")))
        on_gpu = masks.uniforms(masks.step_keys(keys.to(cuda), step), masks.site_counters(128, 130, 3, torch.device(cuda)))
        assert torch.equal(on_cpu, on_gpu.cpu())


def test_a_pack_of_one_with_dropout_and_soi_follows_the_lone_trial(digits_small):
    from workers.fused import train_pack
    from workers.train import train_epochs

    base = TrialConfig("gelu", 1e-3, 0.5, 4, epochs=2, batch_size=32, model=MLP, eval_train=False)
    for cfg in (base, replace(base, activation="soi", dropout=0.0)):
        alone = list(train_epochs(cfg, digits_small))
        packed = [epoch[0] for epoch in train_pack([cfg], digits_small)]
        for mine, theirs in zip(packed, alone):
            assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-5), cfg.activation
            assert mine["val_error"] == pytest.approx(theirs["val_error"], abs=1e-9), cfg.activation


@pytest.fixture(scope="module")
def digits_small():
    from pathlib import Path

    from workers.data import load_dataset
    return load_dataset("digits", Path("unused"), download=False, val_size=200, train_subset=640)


def test_kept_noise_is_the_keep_mask_times_each_members_scale_bit_for_bit():
    keys = masks.step_keys(masks.seed_keys([0, 5, 9], "cpu"), 7)
    counters = masks.site_counters(64, 96, masks.site(2, masks.DROPOUT), torch.device("cpu"))
    rates = [0.5, 0.2, 0.9]
    thresholds = torch.tensor([masks.keep_threshold(p) for p in rates], dtype=torch.int32)
    scales = torch.tensor([1 / (1 - p) for p in rates])
    expected = torch.where(masks.kept(keys, counters, thresholds), scales.view(-1, 1, 1), 0.0)
    assert torch.equal(masks.kept_noise(keys, counters, thresholds, scales), expected)
    out = torch.full_like(expected, 7.0)  # (written over whole)
    assert masks.kept_noise(keys, counters, thresholds, scales, out=out) is out
    assert torch.equal(out, expected)
