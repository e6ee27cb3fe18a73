"""The aggregator on runs written to a real MLflow store by the real trial logger."""

from dataclasses import replace

import pytest

from service.reporting.report import format_value, to_markdown
from service.reporting.results import sweep_results
from service.runs.store import SweepNotFound
from tests.service.constructed_runs import log_trial, sweep_logger

# (activation, lr) → per-seed (val_loss, test_error, train_loss_eval). Medians are the middle values;
# the means differ, so a mean would be caught. For gelu the validation prefers lr 1e-3 while the test
# error would prefer 1e-4: the choice must follow validation.
RUNS = {
    ("gelu", 1e-3): [(0.20, 0.050, 0.10), (0.10, 0.060, 0.30), (0.90, 0.040, 0.20)],
    ("gelu", 1e-4): [(0.30, 0.020, 0.40), (0.35, 0.030, 0.50), (0.25, 0.010, 0.45)],
    ("relu", 1e-3): [(0.50, 0.080, 0.60), (0.60, 0.090, 0.70), (0.55, 0.070, 0.65)],
    ("relu", 1e-4): [(0.40, 0.100, 0.80), (0.45, 0.110, 0.85), (0.42, 0.120, 0.90)],
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri, logger = sweep_logger(tmp_path_factory.mktemp("store"), "s1", "test", {"select_lr_by": "val_loss"},
                               {"name": "test"})
    n = 0
    for (activation, lr), seeds in RUNS.items():
        for seed, (val_loss, test_error, train_loss_eval) in enumerate(seeds):
            n += 1
            # epoch 1 values are worse and must be ignored: the table uses the final epoch
            log_trial(logger, f"t{n}", {"activation": activation, "lr": lr, "dropout": 0.0, "seed": seed, "epochs": 2},
                      [{"epoch": 1, "val_loss": 9.0, "test_error": 0.9},
                       {"epoch": 2, "val_loss": val_loss, "test_error": test_error, "train_loss_eval": train_loss_eval}])
    # a failed trial of gelu/1e-3 with a seed 3 must not count
    log_trial(logger, "tf", {"activation": "gelu", "lr": 1e-3, "dropout": 0.0, "seed": 3},
              [{"epoch": 1, "val_loss": 0.0, "test_error": 0.0}], failed=True)
    return uri


def test_medians_over_seeds_from_the_store(store):
    results = sweep_results(store, "s1")
    assert len(results.runs) == 13
    table = results.table.set_index(["activation", "lr"])
    assert table.loc[("gelu", 1e-3), "val_loss"] == pytest.approx(0.20)
    assert table.loc[("gelu", 1e-3), "test_error"] == pytest.approx(0.050)
    assert table.loc[("gelu", 1e-3), "train_loss_eval"] == pytest.approx(0.20)
    assert table.loc[("relu", 1e-4), "test_error"] == pytest.approx(0.110)
    assert set(table["n_seeds"]) == {3}


def test_lr_is_chosen_on_validation_not_test(store):
    table = sweep_results(store, "s1").table
    chosen = {(r.activation, r.dropout): r.lr for r in table.itertuples() if r.lr_chosen}
    assert chosen == {("gelu", 0.0): 1e-3, ("relu", 0.0): 1e-4}


def test_json_rows_carry_medians_and_seed_counts(store):
    rows = sweep_results(store, "s1").rows()
    assert len(rows) == 4
    assert {"activation", "dropout", "lr", "n_seeds", "test_error", "val_loss", "train_loss", "lr_chosen"} <= set(rows[0])


def test_the_markdown_report_shows_error_columns_only_where_the_network_classifies(store):
    results = sweep_results(store, "s1")
    classified = to_markdown(results)
    assert "test_error" in classified and "5.00%" in classified  # gelu at 1e-3: 0.050
    assert f"MLflow: experiment {results.experiment_id}, parent run {results.parent_run_id}." in classified
    reconstructed = to_markdown(replace(results, spec={**results.spec, "task": "reconstruct"}))
    assert "error" not in reconstructed.split("## Chosen learning rate")[1]  # no column, no 0.00% row
    assert "val_loss" in reconstructed and "train_loss_eval" in reconstructed


def test_small_losses_keep_three_significant_digits():
    # ELU Fig. 2's training losses end near 1e-4: four decimals would print 0.0002 vs 0.0001
    assert [format_value("train_loss", v) for v in (0.1207, 0.000212, 0.000114, 0.0)] == \
        ["0.1207", "0.000212", "0.000114", "0.0000"]
    assert format_value("test_error", 0.0213) == "2.13%"


def test_unknown_sweep(store):
    with pytest.raises(SweepNotFound, match="no sweep 'nope'"):
        sweep_results(store, "nope")
