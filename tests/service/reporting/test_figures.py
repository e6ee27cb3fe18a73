"""Figures and the HTML report, drawn from runs written to a real MLflow store by the real trial logger."""
from __future__ import annotations

import io

import matplotlib.image
import pytest
from mlflow.tracking import MlflowClient

from service.reporting.figures import render_figures, stored_figures
from service.reporting.html import to_html
from service.reporting.results import sweep_results
from service.runs.store import RunStore
from tests.service.constructed_runs import log_trial, sweep_logger

SPEC = {"name": "figs", "task": "classify", "dropout": [0.0], "paper": "elu", "section": "§4.1",
        "protocol": {"headline_metric": "test_error", "select_lr_by": "val_loss", "notes": ["a <b>note</b>"]}}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """gelu and relu at one lr, 3 seeds, 3 epochs, with noise levels and unit activations."""
    uri, logger = sweep_logger(tmp_path_factory.mktemp("figures"), "f1", "figs",
                               {"code_version": "git abc123", "hardware": "test cpu"}, SPEC)
    for n, (activation, seed) in enumerate([(a, s) for a in ("gelu", "relu") for s in range(3)]):
        base = 0.1 if activation == "gelu" else 0.2
        results = []
        for epoch in (1, 2, 3):
            metrics = {"epoch": epoch, "train_loss_eval": base / epoch + 0.01 * seed, "val_loss": base / epoch,
                       "test_error": base / epoch, "median_unit_activation_1": 0.1 * epoch,
                       "median_unit_activation_2": -0.1 * epoch, "median_unit_activation": 0.05 * epoch,
                       "train_loss": base / epoch + 0.02}
            if epoch == 3:
                metrics.update({f"test_error_noise_{a:g}": base + a / 4 for a in (0.0, 0.5, 1.0)})
                metrics.update({f"test_loss_noise_{a:g}": base + a for a in (0.0, 0.5, 1.0)})
            results.append(metrics)
        log_trial(logger, f"t{n}", {"activation": activation, "lr": 1e-3, "dropout": 0.0, "seed": seed}, results)
    return uri


def test_every_kind_of_figure_is_written_and_decodes(store):
    figures = render_figures(sweep_results(store, "f1"))
    assert sorted(figures) == ["activations.png", "curves_test_error.png", "curves_train_loss_eval.png", "curves_val_loss.png",
                               "robustness.png", "unit_activation.png", "unit_activation_layers.png"]
    for name, png in figures.items():
        pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
        assert pixels.shape[0] > 200 and pixels.shape[1] > 300, name
        assert pixels.std() > 0.01, f"{name} is blank"


def test_figures_are_logged_to_the_parent_run_and_read_back(store):
    results = sweep_results(store, "f1")
    runs = RunStore(store)
    figures = render_figures(results)
    runs.log_figures(results.parent_run_id, figures)
    logged = sorted(f.path for f in MlflowClient(store).list_artifacts(results.parent_run_id, "figures"))
    assert logged == [f"figures/{name}" for name in sorted(figures)]
    assert stored_figures(results, runs) == figures  # same data → same bytes


def test_html_report_holds_tables_figures_spec_and_provenance(store):
    results = sweep_results(store, "f1")
    page = to_html(results, render_figures(results), "http://mlflow.example:5000")
    assert page.count('<img src="data:image/png;base64,') == 7  # the activations' panel (f, f′) too
    assert "git abc123" in page and "test cpu" in page
    assert (f"http://mlflow.example:5000/#/experiments/{results.experiment_id}/runs/{results.parent_run_id}"
            "?workflowType=machine_learning") in page  # the training view, not the GenAI overview
    assert all(f"/runs/{run_id}" in page for run_id in results.runs["run_id"])  # every trial run is linked
    assert "a &lt;b&gt;note&lt;/b&gt;" in page and "<b>note" not in page  # spec text is escaped
    assert "Fast and Accurate Deep Network Learning by ELUs" in page and "headline_metric: test_error" in page
