"""The --quick variants end to end on a real local Ray and a real MLflow store, one experiment for
each loader, model and protocol path: real data where it is here (MNIST, Twitter POS), generated
data of the right shape for CIFAR, TIMIT and ImageNet. Overrides shrink each further. Every other
catalog experiment shares all its paths with one of these (its spec and plan are checked in
tests/search_spaces, its model in tests/workers/test_models.py)."""
from __future__ import annotations

import os

import pytest
from mlflow.tracking import MlflowClient

from search_spaces import load_spec
from search_spaces.catalog import experiment_names
from service.driver.sweeps import run_sweep
from service.reporting.results import sweep_results
from service.settings import Settings
from tests.conftest import ONE_WORKER, SHARED_TWPOS, ensure_local_ray, make_cifar, make_imagenet, make_timit, require_twpos

pytestmark = pytest.mark.slow  # sweeps trained end to end on a real Ray (make test-fast leaves them out)

SMALLER = {
    "mnist": {"train_subset": 1000, "epochs": 1, "seeds": 1},
    "twitter_pos": {"train_subset": 100, "epochs": 1, "seeds": 1},
    "timit": {"epochs": 1, "seeds": 1},
    "cifar10": {"train_subset": 200, "val_size": 100, "seeds": 1},  # (cifar10_small: 3.3 s a trial-epoch at 500)
    "cifar100": {"train_subset": 200, "seeds": 1},
    "imagenet": {"seeds": 1},
}


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    home = tmp_path_factory.mktemp("quick")
    data = home / "data"
    data.mkdir()
    if (SHARED_TWPOS / "twpos").is_dir():
        os.symlink(SHARED_TWPOS / "twpos", data / "twpos")
    make_cifar(data, "cifar10")
    make_cifar(data, "cifar100")
    make_timit(data)
    make_imagenet(data, per_class=24)
    ensure_local_ray()
    return Settings(home=home, data_dir=data, download=False)


# experiment: the path it is the one end-to-end test of
PATHS = {
    "mnist_classification": "MNIST, the 8-layer MLP, noise-robustness copies",
    "mnist_soi": "the stochastic SOI map, and trials reused from the sweep before (the trial cache)",
    "elu_mnist_learning": "unit-activation medians (the ELU paper's statistic)",
    "mnist_autoencoder": "reconstruction: the autoencoder and its loss",
    "timit": "the TIMIT frame loader",
    "twitter_pos": "the Twitter POS loader and the window tagger's embeddings",
    "cifar10_shallow": "CIFAR-10, the shallow CNN, retraining on all data at the chosen lr, linear decay",
    "cifar10_small": "the small CIFAR CNN",
    "cifar100_wrn": "CIFAR-100, the wide ResNet, a cosine schedule, no validation split",
    "elu_cifar100_11layer": "the stacked-conv ELU net, a piecewise schedule by iteration",
    "elu_imagenet": "ImageNet's image-folder loader",
}


def test_every_path_is_an_experiment_of_the_catalog():
    assert set(PATHS) <= set(experiment_names())


@pytest.mark.parametrize("name", list(PATHS))
def test_quick_variant_runs_end_to_end(settings, name):
    spec = load_spec(name, quick=True)
    if spec.dataset == "twitter_pos":
        require_twpos()
    spec = load_spec(name, quick=True, overrides={**SMALLER[spec.dataset], **ONE_WORKER})
    outcome = run_sweep(spec, settings, quick=True)
    retrained = {(p.activation, p.dropout) for p in spec.grid_points()} if spec.protocol.retrain_on_full else set()
    # trained or reused: mnist_soi's ReLU and GELU points are the same trials as mnist_classification's
    assert outcome.errors == 0
    assert outcome.trials + outcome.reused == spec.trial_count + len(retrained) * len(spec.seed_list)
    results = sweep_results(settings.resolved_tracking_uri, outcome.sweep_id)
    chosen = {(r["activation"], r["dropout"], r["lr"]) for r in results.rows() if r["lr_chosen"]}
    assert {(r["activation"], r["dropout"], r["lr"]) for r in results.rows(results.retrained)} == (
        chosen if retrained else set())  # CIFAR-10 protocol: the chosen lr, trained again on all the data
    configs = {(p.activation, p.dropout, p.lr) for p in spec.grid_points()}
    assert {(r["activation"], r["dropout"], r["lr"]) for r in results.rows()} == configs
    assert all(r["n_seeds"] == len(spec.seed_list) for r in results.rows())
    assert results.runs["val_loss"].notna().all() or spec.val_size == 0  # (0: trained on all, nothing held out)
    logged = MlflowClient(settings.resolved_tracking_uri).get_run(results.runs["run_id"].iloc[0]).data.metrics
    assert {f"test_error_noise_{a:g}" for a in spec.eval_noise} <= set(logged)  # robustness curves
    assert ("median_unit_activation_1" in logged) == spec.activation_stats  # the ELU paper's statistic


def test_optuna_lr_search_repeats_every_suggestion_over_the_seeds(settings):
    spec = load_spec("mnist_classification", quick=True, overrides={
        "dataset": "digits", "val_size": 200, "epochs": 2, "model.depth": 2, "model.width": 32,
        "activation": ["gelu"], "dropout": 0, "seeds": [3, 5],
        "search": {"lr_low": 1e-4, "lr_high": 3e-2, "num_samples": 3, "seed": 1}, **ONE_WORKER})
    assert spec.trial_count == 3 * 2
    outcome = run_sweep(spec, settings)
    assert outcome.errors == 0 and outcome.trials == 6
    results = sweep_results(settings.resolved_tracking_uri, outcome.sweep_id)
    runs = results.runs
    assert len(runs) == 6 and runs["lr"].between(1e-4, 3e-2).all()
    assert runs.groupby("lr")["seed"].apply(sorted).tolist() == [[3, 5]] * 3  # each suggestion × every seed
    rows = results.rows()
    assert len(rows) == 3 and all(r["n_seeds"] == 2 for r in rows)
    assert [r["lr"] for r in rows if r["lr_chosen"]] == [min(rows, key=lambda r: r["val_loss"])["lr"]]
