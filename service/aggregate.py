"""The aggregator: a sweep's trial runs read back from MLflow, medians over seeds, lr chosen
on validation (GELU paper §3: "we report the median over runs"; lr tuned on held-out data)."""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from dataclasses import dataclass

import pandas as pd
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per spec.json read clutters logs

FINAL_METRICS = ("train_loss", "train_loss_eval", "train_error_eval", "val_loss", "val_error",
                 "test_loss", "test_error")
CONFIG = ["activation", "dropout", "lr"]


class SweepNotFound(LookupError):
    pass


@dataclass
class SweepResults:
    sweep_id: str
    experiment: str
    parent_run_id: str
    experiment_id: str
    select_lr_by: str
    headline_metric: str
    spec: dict  # the resolved spec the sweep ran (the parent run's spec.json)
    runs: pd.DataFrame  # one row per trial run
    table: pd.DataFrame  # one row per (activation, dropout, lr) of the grid: medians over seeds
    retrained: pd.DataFrame  # protocol retrain_on_full: medians of the chosen configs trained on all data
    tags: dict  # the parent run's tags: provenance (code_version, hardware, data_source, quick)

    def rows(self, table: pd.DataFrame | None = None) -> list[dict]:
        """The grid table (or another of these tables) as JSON-ready rows (NaN → None)."""
        table = self.table if table is None else table
        return table.astype(object).where(table.notna(), None).to_dict(orient="records")


def search_runs(client: MlflowClient, filter_string: str) -> list:
    """Every run in any experiment of the store that matches ``filter_string`` (all pages)."""
    experiment_ids = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    runs, token = [], None
    while True:
        page = client.search_runs(experiment_ids, filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def find_parent_run(client: MlflowClient, sweep_id: str):
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", sweep_id):  # it goes into a filter string
        raise SweepNotFound(f"sweep_id: {sweep_id!r} is not a sweep id (letters, digits, _ and -)")
    found = search_runs(client, f"tags.sweep_id = '{sweep_id}' and tags.role = 'sweep'")
    if not found:
        raise SweepNotFound(f"sweep_id: no sweep {sweep_id!r} in the MLflow store")
    return found[0]


def trial_runs(client: MlflowClient, sweep_id: str) -> pd.DataFrame:
    """One row per trial run of the sweep: its grid point, seed, status and final metrics."""
    rows = []
    for run in search_runs(client, f"tags.sweep_id = '{sweep_id}' and tags.role = 'trial'"):
        tags, metrics = run.data.tags, run.data.metrics
        rows.append({
            "run_id": run.info.run_id, "status": run.info.status, "phase": tags.get("phase", "grid"),
            "activation": tags["activation"], "dropout": float(tags["dropout"]),
            "lr": float(tags["lr"]), "seed": int(tags["seed"]),
            "diverged": tags.get("diverged") == "true",
            **{m: float("nan") for m in FINAL_METRICS}, **metrics,
        })
    columns = ["run_id", "status", "phase", *CONFIG, "seed", "diverged", *FINAL_METRICS]
    extra = sorted({k for row in rows for k in row} - set(columns))  # headline metrics such as test_error_at_best_val
    return pd.DataFrame(rows, columns=columns + extra)


def median_over_seeds(runs: pd.DataFrame, phase: str = "grid") -> pd.DataFrame:
    """Per (activation, dropout, lr): the median of each final metric over the finished seeds."""
    finished = runs[(runs["status"] == "FINISHED") & (runs["phase"] == phase)]
    grouped = finished.groupby(CONFIG, sort=True)
    table = grouped[[m for m in FINAL_METRICS if m in finished]].median()
    table["n_seeds"] = grouped["seed"].nunique()
    table["n_diverged"] = grouped["diverged"].sum().astype(int)
    return table.reset_index()


def choose_lr_on_validation(table: pd.DataFrame, by: str = "val_loss") -> pd.DataFrame:
    """Mark, per (activation, dropout), the lr with the best median validation metric.

    Test metrics are never looked at here: the choice is the paper's, made on held-out data.
    """
    table = table.copy()
    table["lr_chosen"] = False
    best = table.dropna(subset=[by]).groupby(["activation", "dropout"])[by].idxmin()
    table.loc[best.values, "lr_chosen"] = True
    return table


def _spec(client: MlflowClient, run_id: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        try:
            return json.loads(Path(client.download_artifacts(run_id, "spec.json", folder)).read_text())
        except Exception:  # a parent run written without its spec
            return {}


def sweep_results(tracking_uri: str, sweep_id: str) -> SweepResults:
    """Everything the report needs about a sweep, read from the MLflow store."""
    client = MlflowClient(tracking_uri)
    parent = find_parent_run(client, sweep_id)
    tags = parent.data.tags
    runs = trial_runs(client, sweep_id)
    select_by = tags.get("select_lr_by", "val_loss")
    table = choose_lr_on_validation(median_over_seeds(runs), by=select_by)
    return SweepResults(sweep_id, tags.get("experiment", ""), parent.info.run_id, parent.info.experiment_id,
                        select_by, tags.get("headline_metric", "test_error"), _spec(client, parent.info.run_id),
                        runs, table,
                        median_over_seeds(runs, phase="retrain"), dict(tags))
