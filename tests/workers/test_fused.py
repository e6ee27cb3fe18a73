"""Fused packs against the same configs trained alone (workers.train), on the real digits data."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from benchmarks.pack_step import forward_with_dropout_after
from workers import fused
from workers.data import load_dataset
from workers.fused import StackedNet, fusable, train_pack
from workers.models import build_model
from workers.train import train_epochs
from workers.trial import TrialConfig

MLP = {"kind": "mlp", "depth": 3, "width": 48, "init": "unit_norm_rows"}
AUTOENCODER = {"kind": "autoencoder", "hidden": [32, 8], "init": "torch_default"}
COMPARED = ("train_loss", "train_loss_eval", "val_loss", "val_error", "test_loss", "test_error")
# Same data order and masks by construction; what differs is the summation order inside the
# batched matmuls (and Adam's update written out), so losses agree to about 1e-7 relative after
# 3 epochs (measured: 2e-7 at most). A mismatched mask or data order moves them by 1e-2 or more.
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", Path("unused"), download=False, val_size=200)


def _alone(cfg: TrialConfig, splits) -> list[dict]:
    return list(train_epochs(cfg, splits))


def _members(cfgs: list[TrialConfig], splits) -> list[list[dict]]:
    histories: list[list[dict]] = [[] for _ in cfgs]
    for report in train_pack(cfgs, splits):
        for history, metrics in zip(histories, report):
            if metrics is not None:
                history.append(metrics)
    return histories


def _assert_same(pack: list[dict], alone: list[dict], label: str) -> None:
    assert len(pack) == len(alone), label
    for mine, theirs in zip(pack, alone):
        for key in COMPARED:
            assert mine[key] == pytest.approx(theirs[key], rel=RTOL, abs=ATOL), f"{label} epoch {mine['epoch']} {key}"


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_each_member_follows_its_trajectory_alone(digits, optimizer):
    """gelu, relu, elu and soi, with and without dropout, different lrs and seeds, in one pack."""
    base = TrialConfig(activation="gelu", lr=1e-3, dropout=0.0, seed=0, epochs=3, batch_size=64, model=MLP,
                       optimizer=optimizer, momentum=0.9 if optimizer == "sgd" else 0.0,
                       nesterov=optimizer == "sgd")
    lr = 1e-3 if optimizer == "adam" else 0.05
    cfgs = [replace(base, activation=a, dropout=d, seed=s, lr=lr * f)
            for a, d, s, f in [("elu", 0.0, 1, 1.0), ("elu", 0.5, 2, 0.5), ("gelu", 0.0, 3, 1.0), ("gelu", 0.5, 4, 2.0),
                               ("relu", 0.0, 5, 1.0), ("relu", 0.5, 6, 0.5), ("soi", 0.0, 7, 1.0), ("soi", 0.0, 8, 0.5)]]
    for cfg, history in zip(cfgs, _members(cfgs, digits)):
        _assert_same(history, _alone(cfg, digits), f"{cfg.activation} dropout {cfg.dropout} seed {cfg.seed}")


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_weight_decay_and_a_schedule_under_several_lrs_follow_alone(digits, optimizer):
    """Members with different lrs (Adam at lr 1 into the update buffer, then each member's lr; SGD
    with the lrs spread over the elements) under L2 weight decay and a moving lr."""
    base = TrialConfig(activation="gelu", lr=1e-3, dropout=0.0, seed=0, epochs=2, batch_size=64, model=MLP,
                       optimizer=optimizer, weight_decay=1e-3, schedule={"kind": "cosine"},
                       momentum=0.9 if optimizer == "sgd" else 0.0)
    lr = 1e-3 if optimizer == "adam" else 0.05
    cfgs = [replace(base, activation=a, dropout=d, seed=s, lr=lr * f)
            for a, d, s, f in [("gelu", 0.0, 1, 1.0), ("gelu", 0.5, 2, 3.0), ("relu", 0.0, 3, 0.3)]]
    for cfg, history in zip(cfgs, _members(cfgs, digits)):
        _assert_same(history, _alone(cfg, digits), f"{cfg.activation} lr {cfg.lr:g}")


def test_a_pack_without_soi_shares_kernels_and_still_matches(digits, monkeypatch):
    """Without soi, each run of members with one activation is one kernel call writing into the
    pack's output (workers.fused._GroupedActivation), and members with one lr share one Adam
    update, and dropout noise is drawn per run of equal rates (here 0 | 0.5 | 0.2, 0.2 | 0 | 0.5):
    each member still follows its trajectory alone."""
    grouped_calls = []
    apply = fused._GroupedActivation.apply
    monkeypatch.setattr(fused._GroupedActivation, "apply", lambda *args: grouped_calls.append(args[1]) or apply(*args))
    base = TrialConfig(activation="gelu", lr=1e-3, dropout=0.0, seed=0, epochs=2, batch_size=64, model=MLP)
    cfgs = [replace(base, activation=a, dropout=d, seed=s, lr=lr)
            for a, d, s, lr in [("gelu", 0.0, 1, 1e-3), ("gelu", 0.5, 2, 1e-3), ("relu", 0.2, 3, 1e-3),
                                ("relu", 0.2, 4, 2e-3), ("elu", 0.0, 5, 1e-3), ("silu", 0.5, 6, 1e-3)]]
    for cfg, history in zip(cfgs, _members(cfgs, digits)):
        _assert_same(history, _alone(cfg, digits), f"{cfg.activation} dropout {cfg.dropout} seed {cfg.seed}")
    assert grouped_calls[0] == [("gelu", 0, 2), ("relu", 2, 4), ("elu", 4, 5), ("silu", 5, 6)]


def _step_with_dropout_after(net: StackedNet, x, y, members, step: int):
    """The output and every parameter's gradient of StackedNet.forward as it was (the benchmark's
    reference: each activation, then a multiply by the full noise)."""
    out = forward_with_dropout_after(net, x, members, step=step)
    return out, _gradients(net, out, y)


def _gradients(net: StackedNet, out, y) -> list:
    net.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(out.float().flatten(0, 1), y.flatten()).backward()
    return [p.grad.clone() for p in net.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activations, dropouts", [
    (["elu", "elu", "gelu_tanh", "gelu_tanh", "relu", "relu", "soi", "silu"], [0.0, 0.5, 0.5, 0.5, 0.0, 0.2, 0.5, 0.0]),
    (["gelu", "relu", "elu"], [0.5, 0.1, 0.25]),  # every row drops out
    (["relu", "relu", "relu"], [0.5, 0.0, 0.5]),  # one activation: _GroupedActivation where F.relu ran alone
])
def test_dropout_inside_the_grouped_activation_gives_the_bits_of_a_multiply_after_it(activations, dropouts, dtype):
    """A pack's dropout is applied inside _GroupedActivation, in place, from a noise buffer the net
    refills each step: the output and every gradient equal, bit for bit, those of a multiply by a
    new full noise after the activation, step after step (the buffer reused), in fp32 and under
    bf16 autocast, with runs of dropout rows of one and several."""
    references = []
    for seed in range(len(activations)):
        torch.manual_seed(seed)
        references.append(build_model({**MLP, "width": 32}, (20,), 10, activations[seed], dropouts[seed]))
    net = StackedNet(references, activations, dropouts, list(range(len(activations))), "cpu")
    members = list(range(len(activations)))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(len(members), 16, 20, generator=generator)
    y = torch.randint(0, 10, (len(members), 16), generator=generator)
    grads_by_step = []
    for step in (7, 8):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            inside = net(x, members, step=step)
            inside_grads = _gradients(net, inside, y)
            after, after_grads = _step_with_dropout_after(net, x, y, members, step=step)
        assert torch.equal(inside.float(), after.float()), step
        assert all(torch.equal(a, b) for a, b in zip(inside_grads, after_grads)), step
        grads_by_step.append(inside_grads)
    assert any(not torch.equal(a, b) for a, b in zip(*grads_by_step))  # (the steps' masks differ)


def test_a_reconstructing_pack_matches_too(digits):
    base = TrialConfig(activation="elu", lr=1e-3, dropout=0.0, seed=0, epochs=2, batch_size=64, model=AUTOENCODER,
                       task="reconstruct", eval_noise=(0.0, 0.5), activation_stats=True)
    cfgs = [replace(base, activation="elu", seed=1), replace(base, activation="gelu", seed=2, dropout=0.25)]
    for cfg, history in zip(cfgs, _members(cfgs, digits)):
        alone = _alone(cfg, digits)
        _assert_same(history, alone, cfg.activation)
        last, reference = history[-1], alone[-1]
        for key in [k for k in reference if k.startswith(("test_loss_noise", "median_unit_activation"))]:
            assert last[key] == pytest.approx(reference[key], rel=RTOL, abs=1e-5), key


def test_a_diverging_member_leaves_its_pack_mates_unchanged(digits):
    base = TrialConfig(activation="elu", lr=0.05, dropout=0.0, seed=0, epochs=3, batch_size=64, model=MLP,
                       optimizer="sgd")
    healthy = [replace(base, seed=1), replace(base, activation="gelu", seed=2)]
    diverging = replace(base, seed=3, lr=1e4)  # SGD at lr 1e4: the loss is inf or NaN within an epoch
    alone = _alone(diverging, digits)
    assert alone[-1]["diverged"] == 1 and len(alone) == 1
    with_it = _members([healthy[0], diverging, healthy[1]], digits)
    without_it = _members(healthy, digits)
    assert len(with_it[1]) == 1 and with_it[1][0]["diverged"] == 1 and not math.isfinite(with_it[1][0]["train_loss"])
    for mine, reference in zip([with_it[0], with_it[2]], without_it):
        assert [m["diverged"] for m in mine] == [0, 0, 0]
        _assert_same(mine, reference, "pack-mate")


def test_what_cannot_be_fused_is_named():
    cfg = TrialConfig(activation="gelu", lr=1e-3, dropout=0.0, seed=0, epochs=1, batch_size=64,
                      model={"kind": "wide_resnet", "depth": 10, "widen_factor": 1})
    assert "model.kind 'wide_resnet'" in fusable(cfg)
    assert fusable(replace(cfg, model=MLP)) is None


def test_members_must_share_the_architecture(digits):
    base = TrialConfig(activation="gelu", lr=1e-3, dropout=0.0, seed=0, epochs=1, batch_size=64, model=MLP)
    with pytest.raises(ValueError, match="batch_size"):
        next(train_pack([base, replace(base, batch_size=32)], digits))


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_parametrised_expression_and_learnable_members_match_alone(digits, optimizer):
    """A parametrised family, an expression, a per-layer learnable and a per-unit learnable
    activation (and a plain one) in one pack: each member as alone, its learned values too."""
    expressions = {"mish": "x * tanh(softplus(x))"}
    base = TrialConfig(activation="relu", lr=1e-3 if optimizer == "adam" else 0.05, dropout=0.0, seed=0, epochs=3,
                       batch_size=64, model=MLP, optimizer=optimizer, momentum=0.9 if optimizer == "sgd" else 0.0,
                       weight_decay=1e-4, expressions=expressions)
    cfgs = [replace(base, activation=a, seed=s, dropout=d) for a, s, d in [
        ("gelu(sigma=0.5)", 1, 0.0), ("mish", 2, 0.2), ("swish", 3, 0.0), ("prelu", 4, 0.5), ("relu", 5, 0.0),
        ("silu(beta=1.5, learnable=beta, per_unit=true)", 6, 0.0)]]
    for cfg, history in zip(cfgs, _members(cfgs, digits)):
        alone = _alone(cfg, digits)
        _assert_same(history, alone, cfg.activation)
        learned = sorted(k for k in alone[-1] if k.startswith("learned_"))
        assert learned == sorted(k for k in history[-1] if k.startswith("learned_"))
        assert bool(learned) == (cfg.activation in ("swish", "prelu") or "learnable" in cfg.activation)
        for key in learned:
            assert history[-1][key] == pytest.approx(alone[-1][key], rel=1e-4, abs=1e-6), f"{cfg.activation} {key}"
            initial = {"swish": 1.0, "prelu": 0.25}.get(cfg.activation, 1.5)
            assert history[-1][key] != pytest.approx(initial, abs=1e-6), f"{cfg.activation} {key} never trained"
