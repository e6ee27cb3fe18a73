"""Figures like the papers' (matplotlib, PNG), drawn from the per-epoch metrics in MLflow.

- ``curves_<metric>.png``: per activation, the median over seeds of a metric per epoch with the
  min–max band over seeds (GELU paper Fig. 2, 4, 5, 6, 7, 9; ELU paper Fig. 3–5), one panel per
  dropout rate where the paper reports them apart;
- ``robustness.png``: test error and loss against the noise level a of Unif[−a, a] (GELU Fig. 3);
- ``unit_activation.png``: the median over units of each unit's mean activation, per layer and
  epoch (ELU paper Fig. 2).

Each curve belongs to the configuration the protocol chose on validation (the rows of
:func:`service.paper_table.reported_rows`), so a figure shows what the tables report.
"""
from __future__ import annotations

import io
import re
import tempfile
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure  # no pyplot: figures are drawn in API threads too
from matplotlib.ticker import MaxNLocator
from mlflow.tracking import MlflowClient

from service.aggregate import SweepResults
from service.paper_table import reported_rows

ARTIFACT_DIR = "figures"
NOISE = re.compile(r"test_(error|loss)_noise_([0-9.e+-]+)")
UNIT_ACTIVATION = re.compile(r"median_unit_activation_(\d+)")
MAX_LAYER_PANELS = 8


def chosen_runs(results: SweepResults) -> pd.DataFrame:
    """The finished runs of each reported configuration, with its row's (activation, dropout, lr)."""
    runs = results.runs
    if not results.spec or not len(results.table):
        return runs.iloc[0:0]
    phase = "retrain" if (runs["phase"] == "retrain").any() else "grid"
    rows = reported_rows(runs, results.table, results.spec)
    keep = pd.Series(False, index=runs.index)
    for row in rows:
        keep |= ((runs["activation"] == row.activation) & (runs["dropout"] == row.dropout) & (runs["lr"] == row.lr))
    return runs[keep & (runs["phase"] == phase) & (runs["status"] == "FINISHED")]


def metric_histories(client: MlflowClient, runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Long table (run_id, activation, dropout, seed, metric, epoch, value) of every run's history."""
    rows = []
    for run in runs.itertuples():
        for key in keys:
            for m in client.get_metric_history(run.run_id, key):
                rows.append((run.run_id, run.activation, run.dropout, run.seed, key, m.step, m.value))
    return pd.DataFrame(rows, columns=["run_id", "activation", "dropout", "seed", "metric", "epoch", "value"])


def _band(ax, frame: pd.DataFrame, x: str, label: str) -> None:
    """Median over seeds as a line, min–max over seeds as a shaded band."""
    stats = frame.groupby(x)["value"].agg(["median", "min", "max"]).sort_index()
    line, = ax.plot(stats.index, stats["median"], marker="o" if len(stats) < 12 else None, ms=3, label=label)
    ax.fill_between(stats.index, stats["min"], stats["max"], color=line.get_color(), alpha=0.2, linewidth=0)


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def curves_figure(history: pd.DataFrame, metric: str, title: str) -> bytes:
    dropouts = sorted(history["dropout"].unique())
    figure = Figure(figsize=(5 * len(dropouts), 3.6))
    for i, dropout in enumerate(dropouts):
        ax = figure.add_subplot(1, len(dropouts), i + 1)
        for activation, frame in history[history["dropout"] == dropout].groupby("activation", sort=True):
            _band(ax, frame, "epoch", activation)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(metric)
        if "loss" in metric and (history["value"] > 0).all():
            ax.set_yscale("log")
        ax.set_title(f"dropout {dropout:g}" if len(dropouts) > 1 else title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if len(dropouts) > 1:
        figure.suptitle(title, fontsize=11)
    return _png(figure)


def robustness_figure(runs: pd.DataFrame, title: str) -> bytes:
    columns = [c for c in runs.columns if NOISE.fullmatch(c)]
    long = runs.melt(id_vars=["activation", "dropout", "seed"], value_vars=columns, var_name="column")
    parts = long["column"].str.extract(NOISE)
    long["metric"], long["a"] = "test_" + parts[0], parts[1].astype(float)
    figure = Figure(figsize=(10, 3.6))
    for i, metric in enumerate(["test_error", "test_loss"]):
        ax = figure.add_subplot(1, 2, i + 1)
        for (activation, dropout), frame in long[long["metric"] == metric].groupby(["activation", "dropout"]):
            _band(ax, frame.dropna(subset=["value"]), "a", f"{activation}, dropout {dropout:g}")
        ax.set_xlabel("noise level a of Unif[-a, a] added to test inputs")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle(title, fontsize=11)
    return _png(figure)


def unit_activation_figure(history: pd.DataFrame, title: str) -> bytes:
    layers = sorted({int(UNIT_ACTIVATION.fullmatch(m).group(1)) for m in history["metric"].unique()})[:MAX_LAYER_PANELS]
    columns = min(4, len(layers))
    rows = -(-len(layers) // columns)
    figure = Figure(figsize=(3.6 * columns, 3 * rows))
    for i, layer in enumerate(layers):
        ax = figure.add_subplot(rows, columns, i + 1)
        for activation, frame in history[history["metric"] == f"median_unit_activation_{layer}"].groupby("activation"):
            _band(ax, frame, "epoch", activation)
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_title(f"layer {layer}", fontsize=10)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if i == 0:
            ax.set_ylabel("median over units of mean activation")
            ax.legend(fontsize=8)
    figure.suptitle(title, fontsize=11)
    return _png(figure)


def curve_metrics(results: SweepResults) -> list[str]:
    """The per-epoch metrics worth a curve: the headline, training loss, validation loss."""
    classify = results.spec.get("task", "classify") == "classify"
    headline = results.headline_metric
    if NOISE.fullmatch(headline) or headline.endswith("_at_best_val"):
        headline = "test_error" if classify else "test_loss"
    wanted = [headline, "train_loss_eval" if classify else "train_loss", "val_loss"]
    return list(dict.fromkeys(m for m in wanted if m in results.runs))


def render_figures(results: SweepResults, tracking_uri: str) -> dict[str, bytes]:
    """Every figure that applies to the sweep, as PNG bytes by file name."""
    runs = chosen_runs(results)
    if not len(runs):
        return {}
    client = MlflowClient(tracking_uri)
    title = f"{results.experiment} (median over seeds, band: min–max)"
    figures: dict[str, bytes] = {}
    units = [c for c in runs.columns if UNIT_ACTIVATION.fullmatch(c)]
    history = metric_histories(client, runs, curve_metrics(results) + units)
    for metric in curve_metrics(results):
        figures[f"curves_{metric}.png"] = curves_figure(history[history["metric"] == metric], metric, title)
    if any(NOISE.fullmatch(c) for c in runs.columns):
        figures["robustness.png"] = robustness_figure(runs, title)
    if units:
        figures["unit_activation.png"] = unit_activation_figure(history[history["metric"].isin(units)], title)
    return figures


def log_figures(results: SweepResults, tracking_uri: str) -> list[str]:
    """Render the figures and log them under ``figures/`` in the sweep's parent run."""
    figures = render_figures(results, tracking_uri)
    if figures:
        with tempfile.TemporaryDirectory() as folder:
            for name, png in figures.items():
                (Path(folder) / name).write_bytes(png)
            MlflowClient(tracking_uri).log_artifacts(results.parent_run_id, folder, ARTIFACT_DIR)
    return sorted(figures)


def stored_figures(results: SweepResults, tracking_uri: str) -> dict[str, bytes]:
    """The figures logged with the sweep's parent run; drawn now if none were logged (a running sweep)."""
    client = MlflowClient(tracking_uri)
    names = [Path(f.path).name for f in client.list_artifacts(results.parent_run_id, ARTIFACT_DIR)]
    if not names:
        return render_figures(results, tracking_uri)
    with tempfile.TemporaryDirectory() as folder:
        local = Path(client.download_artifacts(results.parent_run_id, ARTIFACT_DIR, folder))
        return {name: (local / name).read_bytes() for name in sorted(names) if name.endswith(".png")}
