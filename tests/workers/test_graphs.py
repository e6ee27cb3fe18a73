"""A fused pack's step as a CUDA graph (workers.graphs): the same numbers as the eager step, the
masks of the replayed step, a record of how each pack stepped, and eager steps where it cannot."""
from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from search_spaces import load_spec
from workers import graphs, masks
from workers.data import load_dataset
from workers.fused import StackedPack, train_pack
from workers.trial import TrialConfig, trial_key

MLP = {"kind": "mlp", "depth": 3, "width": 48, "init": "unit_norm_rows"}
COMPARED = ("train_loss", "train_loss_eval", "val_loss", "val_error", "test_loss", "test_error")


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", Path("unused"), download=False, val_size=200)


def _pack(**overrides) -> list[TrialConfig]:
    """Four members: both activation kinds with their own kernels, SOI's sampled masks, dropout on
    some, and each its own lr."""
    base = TrialConfig(activation="gelu", lr=1e-3, dropout=0.0, seed=0, epochs=2, batch_size=64, model=MLP)
    base = replace(base, **overrides)
    return [replace(base, seed=1, dropout=0.5), replace(base, activation="relu", seed=2, lr=base.lr * 3),
            replace(base, activation="soi", seed=3), replace(base, activation="soi", seed=4, dropout=0.25)]


def _histories(cfgs: list[TrialConfig], splits, device: str) -> list[list[dict]]:
    histories: list[list[dict]] = [[] for _ in cfgs]
    for report in train_pack(cfgs, splits, device):
        for history, metrics in zip(histories, report):
            if metrics is not None:
                history.append(metrics)
    return histories


# -- on any machine ------------------------------------------------------------------------------------

def test_a_salt_tensor_draws_the_steps_masks():
    """The replayed step reads its step as a tensor holding the salt: the same keys, so the same masks."""
    keys = masks.seed_keys([0, 1, 7, 2 ** 40 + 3], "cpu")
    for step in (0, 1, 429, 10 ** 6):
        salt = torch.tensor(masks.step_salt(step), dtype=torch.int32)
        assert torch.equal(masks.step_keys(keys, salt), masks.step_keys(keys, step))
    salt = torch.tensor(masks.step_salt(5), dtype=torch.int32)
    assert not torch.equal(masks.step_keys(keys, salt), masks.step_keys(keys, 6))


def test_a_packs_noise_from_a_salt_equals_its_noise_from_the_step(digits):
    pack = StackedPack(_pack(), digits, torch.device("cpu"))
    for step in (0, 3, 77):
        salt = torch.tensor(masks.step_salt(step), dtype=torch.int32)
        by_int, by_salt = pack.net.dropout_noise(64, "cpu", step), pack.net.dropout_noise(64, "cpu", salt)
        assert all(torch.equal(a, b) for a, b in zip(by_int, by_salt))
        soi_int, soi_salt = pack.net.soi_uniforms(64, "cpu", step), pack.net.soi_uniforms(64, "cpu", salt)
        assert all(torch.equal(a, b) for a, b in zip(soi_int, soi_salt))


@pytest.mark.parametrize("change, reason", [
    ({}, "not on a GPU"),
    ({"cuda_graphs": False}, "execution.cuda_graphs: false"),
    ({"compile": True}, "execution.compile: true"),
])
def test_what_steps_eagerly_is_named(change, reason):
    cfg = replace(_pack()[0], **change)
    device = torch.device("cpu" if not change else "cuda")  # (a device object: no GPU needed to ask)
    found = graphs.refusal(cfg, device, compiled=cfg.compile)
    assert found is not None and found.startswith(reason)
    assert graphs.refusal(_pack()[0], torch.device("cuda")) is None


@pytest.mark.parametrize("schedule", [{"kind": "cosine", "t0": 2}, {"kind": "linear_decay", "start": 1},
                                      {"kind": "piecewise", "unit": "iteration", "milestones": [5], "factors": [1.0, 0.1]}])
def test_a_schedule_no_longer_keeps_a_step_out_of_the_graph(schedule):
    """The lr is read on the device (workers.optim, workers.fused): a scheduled trial is captured too."""
    assert graphs.refusal(replace(_pack()[0], schedule=schedule), torch.device("cuda")) is None


def test_cuda_graphs_is_a_spec_field_that_leaves_the_trial_cache_key_alone():
    on = load_spec("mnist_classification", overrides={"execution.mode": "fused"})
    off = load_spec("mnist_classification", overrides={"execution.mode": "fused", "execution.cuda_graphs": False})
    assert on.trial_base()["cuda_graphs"] is True and off.trial_base()["cuda_graphs"] is False
    point = on.grid_points()[0]
    data = {"dataset": "mnist"}
    assert trial_key(on.trial_base(), point, data) == trial_key(off.trial_base(), point, data)
    with pytest.raises(Exception, match="cuda_graphs"):
        load_spec("mnist_classification", overrides={"execution.cuda_graphs": "sometimes"})


def test_a_cpu_pack_records_no_step_mode(digits):
    (history, *_) = _histories(_pack(epochs=1), digits, "cpu")
    assert "step_mode" not in history[0]


# -- on a GPU (skipped without one; ACTSWEEP_REQUIRE_CUDA=1 makes them fail instead) -----------------

@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_cuda_graph_replays_give_the_eager_steps_numbers(digits, cuda, optimizer):
    """The same pack on the GPU, replayed and eager: the same kernels on the same inputs, so the
    same numbers (to rounding that a different cuBLAS algorithm choice could bring: 1e-6)."""
    momentum = {"momentum": 0.9, "nesterov": True} if optimizer == "sgd" else {}
    cfgs = _pack(optimizer=optimizer, lr=1e-3 if optimizer == "adam" else 0.02, **momentum)
    graphed = _histories(cfgs, digits, cuda)
    eager = _histories([replace(c, cuda_graphs=False) for c in cfgs], digits, cuda)
    for mine, theirs in zip(graphed, eager):
        assert [m["step_mode"] for m in mine] == ["cuda graph"] * 2
        assert theirs[0]["step_mode"] == "eager: execution.cuda_graphs: false"
        for a, b in zip(mine, theirs):
            for key in COMPARED:
                assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), (optimizer, key, a["epoch"])


def test_cuda_graph_pack_after_a_member_diverges_captures_again(digits, cuda):
    cfgs = _pack(optimizer="sgd", lr=0.02, epochs=3)
    cfgs[1] = replace(cfgs[1], lr=1e4)  # diverges in the first epoch and leaves: the pack's shape changes
    graphed = _histories(cfgs, digits, cuda)
    eager = _histories([replace(c, cuda_graphs=False) for c in cfgs], digits, cuda)
    assert graphed[1][0]["diverged"] == 1 and len(graphed[1]) == 1
    for j in (0, 2, 3):
        assert [m["step_mode"] for m in graphed[j]] == ["cuda graph"] * 3
        for a, b in zip(graphed[j], eager[j]):
            assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-6, abs=1e-7)


def test_cuda_graph_capture_that_fails_steps_eagerly_and_says_so(digits, cuda, monkeypatch):
    @contextlib.contextmanager
    def failing_capture(graph, **kwargs):  # an injected fault: the capture raises as an uncapturable op would
        raise RuntimeError("injected: operation not permitted when stream is capturing")
        yield

    cfgs = _pack()
    eager = _histories([replace(c, cuda_graphs=False) for c in cfgs], digits, cuda)
    monkeypatch.setattr(graphs.torch.cuda, "graph", failing_capture)
    fallen = _histories(cfgs, digits, cuda)
    for mine, theirs in zip(fallen, eager):
        assert mine[-1]["step_mode"].startswith("eager: capture failed (RuntimeError: injected")
        for a, b in zip(mine, theirs):
            assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-6, abs=1e-7)
