"""The papers' protocol in the aggregator, on runs written to a real MLflow store by the real trial
logger: diverged seeds, the test error at the best validation epoch (TIMIT), paper numbers per
dataset, and the orderings the papers show without numbers."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from service.reporting.aggregate import choose_lr_on_validation, median_over_seeds
from service.reporting.family import family_verdicts
from service.reporting.paper_table import reported_rows
from service.reporting.render import render
from service.reporting.report import to_json
from service.reporting.results import sweep_results
from tests.service.constructed_runs import log_trial, sweep_logger

NAN = float("nan")


def _epochs(*values: dict) -> list[dict]:
    return [{"epoch": i, **v} for i, v in enumerate(values, start=1)]


def _diverged(val_loss: float) -> list[dict]:
    """A trial that looked good for an epoch, then its loss became NaN (as workers.train reports it)."""
    return _epochs({"train_loss": 0.1, "val_loss": val_loss, "val_error": 0.01, "test_error": 0.01, "diverged": 0},
                   {"train_loss": NAN, "diverged": 1})


def _healthy(val_loss: float, test_error: float) -> list[dict]:
    return _epochs({"train_loss": 0.5, "val_loss": val_loss + 0.1, "val_error": 0.2, "test_error": 0.2, "diverged": 0},
                   {"train_loss": 0.4, "val_loss": val_loss, "val_error": 0.1, "test_error": test_error, "diverged": 0})


@pytest.fixture(scope="module")
def diverging(tmp_path_factory):
    spec = {"name": "ae", "dropout": [0.0], "task": "classify",
            "protocol": {"select_lr_by": "val_loss", "headline_metric": "test_error"}}
    uri, logger = sweep_logger(tmp_path_factory.mktemp("diverging"), "d1", "ae", {}, spec)
    trials = {  # gelu at 1e-2: two of three seeds diverged after a (stale) very low validation loss
        ("gelu", 1e-2): [_diverged(0.01), _diverged(0.01), _healthy(0.50, 0.30)],
        ("gelu", 1e-3): [_healthy(0.30, 0.10), _healthy(0.31, 0.11), _healthy(0.29, 0.12)],
        ("relu", 1e-2): [_diverged(0.01)] * 3,  # every seed of every relu lr diverged
        ("relu", 1e-3): [_diverged(0.02)] * 3,
    }
    n = 0
    for (activation, lr), seeds in trials.items():
        for seed, results in enumerate(seeds):
            n += 1
            log_trial(logger, f"t{n}", {"activation": activation, "lr": lr, "dropout": 0.0, "seed": seed}, results)
    return uri


def test_diverged_seeds_are_left_out_and_a_mostly_diverged_lr_is_never_chosen(diverging):
    results = sweep_results(diverging, "d1")
    table = results.table.set_index(["activation", "lr"])
    assert table.loc[("gelu", 1e-2), "n_seeds"] == 1 and table.loc[("gelu", 1e-2), "n_diverged"] == 2
    assert table.loc[("gelu", 1e-2), "val_loss"] == pytest.approx(0.50)  # the one healthy seed, not the stale 0.01s
    assert table.loc[("gelu", 1e-3), "lr_chosen"] and not table.loc[("gelu", 1e-2), "lr_chosen"]
    assert not table.loc["relu", "lr_chosen"].any()


def test_an_activation_whose_seeds_all_diverged_is_reported_as_diverged(diverging):
    results = sweep_results(diverging, "d1")
    rows = {r.activation: r for r in reported_rows(results.runs, results.table, results.spec)}
    assert rows["gelu"].lr == 1e-3 and rows["gelu"].median == pytest.approx(0.11)
    assert rows["relu"].diverged and rows["relu"].n_diverged == 6 and math.isnan(rows["relu"].median)
    report = render(results, "md")
    assert "| relu         |         0 | diverged" in report and "3 of 3" in report
    assert to_json(results)["reported"][1]["lr"] is None


def test_choice_ignores_configurations_where_most_seeds_diverged():
    table = pd.DataFrame({"activation": ["elu"] * 2, "dropout": [0.0] * 2, "lr": [1e-2, 1e-3], "val_loss": [0.1, 0.2],
                          "n_seeds": [2, 5], "n_diverged": [3, 0]})
    assert choose_lr_on_validation(table)["lr_chosen"].tolist() == [False, True]
    tie = table.assign(n_seeds=[3, 5], n_diverged=[3, 0])  # half diverged is not most
    assert choose_lr_on_validation(tie)["lr_chosen"].tolist() == [True, False]


@pytest.fixture(scope="module")
def timit_like(tmp_path_factory):
    """lr 1e-3 is worse at the last epoch but best at its best epoch (2); lr 1e-4 is the reverse."""
    spec = {"name": "timit", "dropout": [0.5], "task": "classify",
            "protocol": {"select_lr_by": "val_error", "headline_metric": "test_error_at_best_val",
                         "report_epoch": "best_val_epoch"}}
    uri, logger = sweep_logger(tmp_path_factory.mktemp("timit"), "b1", "timit", {}, spec)
    curves = {1e-3: [(0.40, 0.41), (0.10, 0.12), (0.30, 0.33)], 1e-4: [(0.40, 0.40), (0.25, 0.26), (0.20, 0.21)]}
    n = 0
    for lr, curve in curves.items():
        for seed in range(3):
            n += 1
            best, epochs = None, []
            for epoch, (val, test) in enumerate(curve, start=1):
                val, test = val + seed / 1000, test + seed / 1000
                if best is None or val < best[1]:
                    best = (epoch, val, test)
                epochs.append({"epoch": epoch, "val_error": val, "test_error": test, "val_loss": val,
                               "best_val_epoch": best[0], "val_error_at_best_val": best[1],
                               "test_error_at_best_val": best[2]})
            log_trial(logger, f"t{n}", {"activation": "soi", "lr": lr, "dropout": 0.5, "seed": seed}, epochs)
    return uri


def test_best_val_epoch_protocol_chooses_and_reports_at_each_trials_best_epoch(timit_like):
    results = sweep_results(timit_like, "b1")
    assert results.select_lr_by == "val_error_at_best_val"
    rows = {r["lr"]: r for r in results.rows()}
    assert rows[1e-3]["lr_chosen"] and not rows[1e-4]["lr_chosen"]  # the last epoch would pick 1e-4
    assert rows[1e-3]["test_error_at_best_val"] == pytest.approx(0.121) and rows[1e-3]["best_val_epoch"] == 2
    (reported,) = reported_rows(results.runs, results.table, results.spec)
    assert (reported.lr, reported.metric, reported.best_val_epoch) == (1e-3, "test_error_at_best_val", 2.0)
    assert "best epoch (median)" in render(results, "md")


def _one_activation_runs(activation: str, values: list[float], dataset_metric: str = "test_error") -> pd.DataFrame:
    return pd.DataFrame([{"run_id": f"{activation}{s}", "status": "FINISHED", "phase": "grid", "activation": activation,
                          "dropout": 0.0, "lr": 0.01, "seed": s, "diverged": False, "val_error": v,
                          dataset_metric: v} for s, v in enumerate(values)])


def test_paper_numbers_are_shown_beside_their_own_dataset():
    numbers = [{"activation": "elu", "metric": "test_error", "value": 0.2428, "dataset": "cifar100"},
               {"activation": "elu", "metric": "test_error", "value": 0.0655, "dataset": "cifar10"}]
    runs = _one_activation_runs("elu", [0.07, 0.06, 0.065])
    table = choose_lr_on_validation(median_over_seeds(runs), by="val_error")
    for dataset, paper in (("cifar10", 0.0655), ("cifar100", 0.2428)):
        spec = {"dataset": dataset, "dropout": [0.0], "paper_numbers": numbers,
                "protocol": {"headline_metric": "test_error", "select_lr_by": "val_error"}}
        assert [r.paper for r in reported_rows(runs, table, spec)] == [paper]


@pytest.fixture(scope="module")
def ranked(tmp_path_factory):
    """gelu_tanh beats relu with and without dropout on train_loss_eval; elu beats gelu_tanh without."""
    spec = {"name": "fig2", "dropout": [0.0, 0.5], "task": "classify",
            "protocol": {"select_lr_by": "val_loss", "headline_metric": "train_loss_eval"},
            "ranking_claims": [{"best": "gelu_tanh", "metric": "train_loss_eval"},
                               {"best": "gelu_tanh", "metric": "train_loss", "over": "mean_over_epochs"},
                               {"best": "gelu_tanh", "metric": "median_unit_activation", "over": "mean_over_epochs",
                                "closer_to_zero": True, "at_every_lr": True}]}
    uri, logger = sweep_logger(tmp_path_factory.mktemp("ranked"), "r1", "fig2", {}, spec)
    level = {"gelu_tanh": 0.10, "relu": 0.20, "elu": 0.05}
    n = 0
    for activation, base in level.items():
        for dropout in (0.0, 0.5):
            for seed in range(4):
                n += 1
                shift = base + (0.5 if dropout and activation == "elu" else 0.0) + seed / 1000
                # the train_loss curves cross: relu ends lower than gelu_tanh, but is higher all along before
                curve = [shift * 4, shift * 3, shift] if activation != "relu" else [0.9, 0.8, 0.001 * (seed + 1)]
                epochs = [{"epoch": e, "train_loss": c, "train_loss_eval": shift, "val_loss": shift,
                           "median_unit_activation": (-1 if activation == "gelu_tanh" else 1) * base * e}
                          for e, c in enumerate(curve, start=1)]
                log_trial(logger, f"t{n}", {"activation": activation, "lr": 1e-3, "dropout": dropout, "seed": seed},
                          epochs)
    return uri


def test_ranking_claims_give_a_verdict_per_pair_and_panel(ranked):
    results = sweep_results(ranked, "r1")
    found = {(v.claim, v.where): v.verdict for v in family_verdicts(results.runs, results.table, results.spec)[1]}
    assert found[("gelu_tanh < relu on train_loss_eval", "dropout 0")] == "reproduced"
    assert found[("gelu_tanh < elu on train_loss_eval", "dropout 0")] == "not reproduced"
    assert found[("gelu_tanh < elu on train_loss_eval", "dropout 0.5")] == "reproduced"
    # over whole curves, not the last epoch (where relu is lower)
    assert found[("gelu_tanh < relu on train_loss_mean_over_epochs", "dropout 0")] == "reproduced"
    # |mean activation| averaged over epochs: gelu_tanh 0.2, relu 0.4, elu 0.1; one verdict per lr panel
    assert found[("gelu_tanh < relu on abs_median_unit_activation_mean_over_epochs", "lr 0.001, dropout 0")] == "reproduced"
    assert found[("gelu_tanh < elu on abs_median_unit_activation_mean_over_epochs", "lr 0.001, dropout 0.5")] == (
        "not reproduced")
    report = render(results, "md")
    assert "Orderings the paper shows" in report and "gelu_tanh < relu on train_loss_eval (dropout 0.5)" in report
    assert len(to_json(results)["claim_verdicts"]) == len(found)


def test_the_scheduled_lr_of_an_epoch_does_not_replace_the_trials_grid_lr(tmp_path):
    spec = {"name": "wrn", "dropout": [0.3], "protocol": {"select_lr_by": "val_error", "headline_metric": "test_error"}}
    uri, logger = sweep_logger(tmp_path, "c1", "wrn", {}, spec)
    log_trial(logger, "t1", {"activation": "relu", "lr": 0.1, "dropout": 0.3, "seed": 0},
              _epochs({"lr": 0.1, "val_error": 0.5, "test_error": 0.5}, {"lr": 0.0999, "val_error": 0.4, "test_error": 0.4}))
    results = sweep_results(uri, "c1")
    assert results.rows()[0]["lr"] == 0.1 and results.runs["scheduled_lr"].tolist() == [0.0999]
