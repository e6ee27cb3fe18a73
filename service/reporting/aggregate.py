"""The aggregator: a sweep's trial runs, medians over seeds, lr chosen on validation (GELU paper §3:
"we report the median over runs"; lr tuned on held-out data).

The runs come from the MLflow store or from exported files (service.reporting.results); everything
after that is the same code on a table of runs:

- a diverged seed (its loss became NaN or inf) is left out of the medians and out of the lr
  choice, and ``n_diverged`` counts it; a configuration where most seeds diverged is never chosen;
- with ``protocol.report_epoch: best_val_epoch`` (GELU paper §3.4, TIMIT) the lr is chosen on each
  trial's lowest validation error over its epochs, and the reported number is the test error at
  that epoch (``test_error_at_best_val``, with ``best_val_epoch``);
- derived per-trial values that the paper's figures compare: the mean over noise levels of the
  robustness curves and their rise over the clean value (Fig. 3: accuracy decline, log loss
  increase), and a metric's mean over epochs where a claim compares whole curves.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from service.runs.store import Provenance

FINAL_METRICS = ("train_loss", "train_loss_eval", "train_error_eval", "val_loss", "val_error",
                 "test_loss", "test_error")
AT_BEST_METRICS = ("best_val_epoch", "val_loss_at_best_val", "val_error_at_best_val", "test_loss_at_best_val",
                   "test_error_at_best_val")
NOISE_MEANS = ("test_error_noise_mean", "test_loss_noise_mean")
NOISE_RISES = ("test_error_noise_rise", "test_loss_noise_rise")  # mean over a > 0 less the clean a = 0 value
NOISE = re.compile(r"test_(error|loss)_noise_([0-9.e+-]+)")
CONFIG = ["activation", "dropout", "lr"]

# (runs, metric names) → long table (run_id, activation, dropout, lr, seed, phase, metric, epoch, value)
Histories = Callable[[pd.DataFrame, list[str]], pd.DataFrame]


@dataclass
class SweepResults:
    sweep_id: str  # one sweep's id, or the ids of the exports a report was built from, joined by "+"
    experiment: str
    parent_run_id: str
    experiment_id: str
    select_lr_by: str  # the column the lr is chosen by (val_loss, val_error, or val_error_at_best_val)
    headline_metric: str
    spec: dict  # the resolved spec the sweep ran (the parent run's spec.json)
    runs: pd.DataFrame  # one row per trial run: its grid point, status, final and derived metrics
    table: pd.DataFrame  # one row per (activation, dropout, lr) of the grid: medians over seeds
    retrained: pd.DataFrame  # protocol retrain_on_full: medians of the chosen configs trained on all data
    provenance: Provenance  # what the parent run records: code version, hardware, data source, quick, slice
    histories: Histories = field(repr=False, default=None)  # per-epoch values, for figures and curve claims
    sources: list[dict] = field(default_factory=list)  # exports a report was built from: sweep, slice, code, machine
    # the claims decided as one family (service.reporting.paper_table.Family), once: see report.family
    family: Any = field(repr=False, default=None)

    def rows(self, table: pd.DataFrame | None = None) -> list[dict]:
        """The grid table (or another of these tables) as JSON-ready rows (NaN → None)."""
        table = self.table if table is None else table
        return table.astype(object).where(table.notna(), None).to_dict(orient="records")


# -- the protocol, on a table of runs -----------------------------------------------------------------

def selection_metric(protocol: dict) -> str:
    """What the lr is chosen by: the validation metric at the last epoch, or at each trial's best
    epoch when the reported number is taken there (``report_epoch: best_val_epoch``)."""
    select_by = protocol.get("select_lr_by", "val_loss")
    return f"{select_by}_at_best_val" if protocol.get("report_epoch") == "best_val_epoch" else select_by


def median_over_seeds(runs: pd.DataFrame, phase: str = "grid", metrics: list[str] | None = None) -> pd.DataFrame:
    """Per (activation, dropout, lr): the median of each metric over the finished seeds that did not
    diverge; ``n_seeds`` counts those seeds, ``n_diverged`` the seeds that diverged."""
    finished = runs[(runs["status"] == "FINISHED") & (runs["phase"] == phase)]
    metrics = [m for m in (metrics or FINAL_METRICS) if m in finished]
    healthy = finished[~finished["diverged"].astype(bool)]
    table = healthy.groupby(CONFIG, sort=True)[metrics].median()
    table["n_seeds"] = healthy.groupby(CONFIG)["seed"].nunique()
    # every configuration stays in the table, even one whose seeds all diverged (it reads "diverged")
    configs = finished.groupby(CONFIG, sort=True)
    table = table.reindex(configs.size().index)
    table["n_seeds"] = table["n_seeds"].fillna(0).astype(int)
    table["n_diverged"] = configs["diverged"].sum().astype(int)
    return table.reset_index()


def mostly_diverged(table: pd.DataFrame) -> pd.Series:
    """Configurations where more than half of the finished seeds diverged."""
    return table["n_diverged"] > table["n_seeds"]


def choose_lr_on_validation(table: pd.DataFrame, by: str = "val_loss") -> pd.DataFrame:
    """Mark, per (activation, dropout), the lr with the best median validation metric.

    Test metrics are never looked at here: the choice is the paper's, made on held-out data. A
    configuration where most seeds diverged is never chosen, however good its surviving seeds.
    """
    table = table.copy()
    table["lr_chosen"] = False
    eligible = table[~mostly_diverged(table)]
    measured = eligible.dropna(subset=[by]) if by in eligible else eligible.iloc[0:0]
    table.loc[measured.groupby(["activation", "dropout"])[by].idxmin().values, "lr_chosen"] = True
    # one lr alone is chosen without validation data (val_size 0: all the training data trained)
    alone = eligible.groupby(["activation", "dropout"])["lr"].transform("size") == 1
    table.loc[eligible.index[alone], "lr_chosen"] = True
    return table


def with_derived_metrics(runs: pd.DataFrame, spec: dict, histories: Histories | None) -> pd.DataFrame:
    """``runs`` with the per-trial values the paper's figures compare: the robustness curves'
    mean over noise levels (GELU Fig. 3), and for each ranking claim on whole curves the metric's
    mean over epochs (and its absolute value where the claim is "closer to zero")."""
    runs = runs.copy()
    for kind, column, rise in zip(("error", "loss"), NOISE_MEANS, NOISE_RISES):
        levels = {c: float(m.group(2)) for c in runs.columns if (m := NOISE.fullmatch(c)) and m.group(1) == kind}
        if levels:
            runs[column] = runs[list(levels)].mean(axis=1)
            clean, noised = [c for c, a in levels.items() if a == 0], [c for c, a in levels.items() if a > 0]
            if clean and noised:  # GELU Fig. 3 plots the accuracy decline and the log loss increase
                runs[rise] = runs[noised].mean(axis=1) - runs[clean[0]]
    headline = spec.get("protocol", {}).get("headline_metric", "test_error")
    for claim in spec.get("ranking_claims", []):
        metric, column = claim.get("metric") or headline, claim_column(claim, headline)
        source = column.removeprefix("abs_")
        if source != metric and source not in runs and histories is not None and len(runs):  # from the curves
            curves = histories(runs, [metric])
            if claim.get("over") == "first_epoch_below":
                reached = curves[curves["value"] <= claim["threshold"]].groupby("run_id")["epoch"].min()
                runs[source] = runs["run_id"].map(reached).fillna(runs["run_id"].map(curves.groupby("run_id")["epoch"]
                                                                                      .max() + 1))
            else:
                runs[source] = runs["run_id"].map(curves.groupby("run_id")["value"].mean())
        if column != source and source in runs:
            runs[column] = runs[source].abs()
    return runs


def table_metrics(runs: pd.DataFrame, spec: dict) -> list[str]:
    """The metrics the grid table gives medians of: the final ones, those at the best validation
    epoch, the noise means, and whatever the headline and the claims compare."""
    protocol = spec.get("protocol", {})
    headline = protocol.get("headline_metric", "test_error")
    claimed = [claim_column(c, headline) for c in spec.get("ranking_claims", [])]
    wanted = [*FINAL_METRICS, *AT_BEST_METRICS, *NOISE_MEANS, *NOISE_RISES, headline, *claimed]
    return [m for m in dict.fromkeys(wanted) if m in runs]


def claim_column(claim: dict, headline: str) -> str:
    """The per-trial value a ranking claim compares (a column of the runs): the metric, its mean
    over epochs, or the absolute value of either."""
    name = claim.get("metric") or headline
    if claim.get("over") == "mean_over_epochs":
        name = f"{name}_mean_over_epochs"
    elif claim.get("over") == "first_epoch_below":
        name = f"first_epoch_{name}_below_{claim['threshold']:g}"
    return f"abs_{name}" if claim.get("closer_to_zero") else name


def results_from_runs(runs: pd.DataFrame, spec: dict, provenance: Provenance, histories: Histories | None, *,
                      sweep_id: str, parent_run_id: str = "", experiment_id: str = "",
                      sources: list[dict] | None = None) -> SweepResults:
    """The aggregated results of a table of runs (one row per trial run, see service.runs.store.RUN_COLUMNS)."""
    protocol = spec.get("protocol", {})
    select_by = selection_metric(protocol) if spec else (provenance.select_lr_by or "val_loss")
    runs = with_derived_metrics(runs, spec, histories)
    runs = runs.assign(**{m: float("nan") for m in FINAL_METRICS if m not in runs})  # every table has these columns
    metrics = table_metrics(runs, spec)
    table = choose_lr_on_validation(median_over_seeds(runs, metrics=metrics), by=select_by)
    return SweepResults(sweep_id, provenance.experiment or spec.get("name", ""), parent_run_id, experiment_id,
                        select_by, protocol.get("headline_metric", provenance.headline_metric or "test_error"), spec,
                        runs, table, median_over_seeds(runs, phase="retrain", metrics=metrics), provenance,
                        histories, sources or [])
