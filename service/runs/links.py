"""Links into MLflow's UI. MLflow 3's UI opens an experiment on its GenAI overview (traces, an
assistant) unless the browser was switched to "Model training" before, and folds each sweep's
trial runs under its parent run. ``workflowType`` in the link opens the training runs; a search
filter on the trial runs, sorted by name, lists them flat (MLflow nests child runs only in a list
sorted by date), so that GELU, ReLU, ELU and SOI's runs stand side by side."""
from __future__ import annotations

from urllib.parse import quote

TRAINING_VIEW = "workflowType=machine_learning"


def experiment_link(ui: str, experiment_id: str, sweep_id: str | None = None) -> str:
    """The trial runs of the experiment (of one sweep, with ``sweep_id``) in MLflow's UI at ``ui``."""
    where = "tags.role = 'trial'" + (f" and tags.sweep_id = '{sweep_id}'" if sweep_id else "")
    return (f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?{TRAINING_VIEW}&searchFilter={quote(where)}"
            "&orderByKey=attributes.run_name&orderByAsc=true")


def run_link(ui: str, experiment_id: str, run_id: str) -> str:
    """One run's page in MLflow's UI at ``ui``."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING_VIEW}"
