"""Figures like the papers' (matplotlib, PNG), drawn from the per-epoch metrics of a sweep's runs.

- ``curves_<metric>.png``: per activation, the median over seeds of a metric per epoch with the
  min–max band over seeds (GELU paper Fig. 2, 5, 6, 7), one panel per dropout rate where the paper
  reports them apart;
- ``curves_per_lr.png`` (networks that reconstruct their input): one panel per lr, training loss
  solid and test loss dashed, per activation (GELU Fig. 4 and 9, ELU Fig. 3);
- ``robustness.png``: test error and loss against the noise level a of Unif[−a, a] (GELU Fig. 3);
- ``activations.png``: each activation the sweep compares, f and f′ on [−4, 4] (GELU paper Fig. 1);
- ``unit_activation.png``: the median over all units of each unit's mean activation per epoch,
  beside the training cross-entropy (ELU Fig. 2); ``unit_activation_layers.png``: the same per layer.

The curves of the first, third and fourth kinds belong to the configuration the protocol chose on
validation (the rows of :func:`service.reporting.paper_table.reported_rows`), so a figure shows what the
tables report; the per-lr panels show every lr, as the papers' panels do. Legends name the
activation as it ran (``gelu_tanh`` is the paper's tanh approximation, ``gelu`` the exact one),
with one colour per activation in every panel.
"""
from __future__ import annotations

import io
import re

import pandas as pd
from matplotlib.figure import Figure  # no pyplot: figures are drawn in API threads too
from matplotlib.ticker import MaxNLocator

from service.reporting.aggregate import NOISE, SweepResults
from service.reporting.paper_table import reported_rows
from service.runs.store import RunStore

UNIT_ACTIVATION = re.compile(r"median_unit_activation_(\d+)")
MAX_LAYER_PANELS = 8


def chosen_runs(results: SweepResults) -> pd.DataFrame:
    """The finished, not diverged runs of each reported configuration."""
    runs = results.runs
    if not results.spec or not len(results.table):
        return runs.iloc[0:0]
    phase = "retrain" if (runs["phase"] == "retrain").any() else "grid"
    keep = pd.Series(False, index=runs.index)
    for row in reported_rows(runs, results.table, results.spec):
        if not row.diverged:
            keep |= (runs["activation"] == row.activation) & (runs["dropout"] == row.dropout) & (runs["lr"] == row.lr)
    return runs[keep & (runs["phase"] == phase) & (runs["status"] == "FINISHED") & ~runs["diverged"].astype(bool)]


class _Painter:
    """Draws bands with one colour per activation across every panel of a figure."""

    def __init__(self, activations):
        self.colours = {name: f"C{i % 10}" for i, name in enumerate(sorted(activations))}

    def band(self, ax, frame: pd.DataFrame, x: str, activation: str, label: str | None = None, style: str = "-"):
        """Median over seeds as a line, min–max over seeds as a shaded band."""
        stats = frame.groupby(x)["value"].agg(["median", "min", "max"]).sort_index()
        colour = self.colours.get(activation)
        ax.plot(stats.index, stats["median"], style, color=colour, marker="o" if len(stats) < 12 else None, ms=3,
                label=label or activation)
        ax.fill_between(stats.index, stats["min"], stats["max"], color=colour, alpha=0.2, linewidth=0)


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def _epoch_axis(ax, ylabel: str, values: pd.Series | None = None) -> None:
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    if values is not None and len(values) and (values > 0).all():
        ax.set_yscale("log")
    ax.grid(alpha=0.3)


def curves_figure(paint: _Painter, history: pd.DataFrame, metric: str, title: str) -> bytes:
    dropouts = sorted(history["dropout"].unique())
    figure = Figure(figsize=(5 * len(dropouts), 3.6))
    for i, dropout in enumerate(dropouts):
        ax = figure.add_subplot(1, len(dropouts), i + 1)
        for activation, frame in history[history["dropout"] == dropout].groupby("activation", sort=True):
            paint.band(ax, frame, "epoch", activation)
        _epoch_axis(ax, metric, history["value"] if "loss" in metric else None)
        ax.set_title(f"dropout {dropout:g}" if len(dropouts) > 1 else title, fontsize=10)
        ax.legend(fontsize=8)
    if len(dropouts) > 1:
        figure.suptitle(title, fontsize=11)
    return _png(figure)


def per_lr_figure(paint: _Painter, history: pd.DataFrame, title: str) -> bytes:
    """A panel per lr; per activation the training loss (solid) and the test loss (dashed)."""
    lrs = sorted(history["lr"].unique(), reverse=True)
    figure = Figure(figsize=(4.2 * len(lrs), 3.6))
    for i, lr in enumerate(lrs):
        ax = figure.add_subplot(1, len(lrs), i + 1)
        at_lr = history[history["lr"] == lr]
        for activation, frame in at_lr.groupby("activation", sort=True):
            for metric, part, style in (("train_loss", "train", "-"), ("test_loss", "test", "--")):
                curve = frame[frame["metric"] == metric]
                if len(curve):
                    paint.band(ax, curve, "epoch", activation, f"{activation} ({part})", style)
        _epoch_axis(ax, "reconstruction error (MSE)" if i == 0 else "", at_lr["value"])  # (one label: the
        ax.set_title(f"lr {lr:g}", fontsize=10)  # panels' log tick labels would run into the others)
        ax.legend(fontsize=7)
    figure.suptitle(title, fontsize=11)
    return _png(figure)


def robustness_figure(paint: _Painter, runs: pd.DataFrame, title: str) -> bytes:
    columns = [c for c in runs.columns if NOISE.fullmatch(c)]
    long = runs.melt(id_vars=["activation", "dropout", "seed"], value_vars=columns, var_name="column")
    parts = long["column"].str.extract(NOISE)
    long["metric"], long["a"] = "test_" + parts[0], parts[1].astype(float)
    figure = Figure(figsize=(10, 3.6))
    for i, metric in enumerate(["test_error", "test_loss"]):
        ax = figure.add_subplot(1, 2, i + 1)
        for (activation, dropout), frame in long[long["metric"] == metric].groupby(["activation", "dropout"]):
            paint.band(ax, frame.dropna(subset=["value"]), "a", activation, f"{activation}, dropout {dropout:g}")
        ax.set_xlabel("noise level a of Unif[-a, a] added to test inputs")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle(title, fontsize=11)
    return _png(figure)


def unit_activation_figure(paint: _Painter, history: pd.DataFrame, title: str) -> bytes:
    """ELU Fig. 2: the median over all units of the mean activation, beside the training cross-entropy."""
    figure = Figure(figsize=(10, 3.6))
    for i, (metric, label) in enumerate([("median_unit_activation", "median over all units of mean activation"),
                                         ("train_loss", "training cross-entropy")]):
        ax = figure.add_subplot(1, 2, i + 1)
        curves = history[history["metric"] == metric]
        for activation, frame in curves.groupby("activation", sort=True):
            paint.band(ax, frame, "epoch", activation)
        _epoch_axis(ax, label, curves["value"] if metric == "train_loss" else None)
        if metric != "train_loss":
            ax.axhline(0.0, color="black", linewidth=0.6)
        ax.legend(fontsize=8)
    figure.suptitle(title, fontsize=11)
    return _png(figure)


def unit_activation_layers_figure(paint: _Painter, history: pd.DataFrame, title: str) -> bytes:
    layers = sorted({int(UNIT_ACTIVATION.fullmatch(m).group(1)) for m in history["metric"].unique()})[:MAX_LAYER_PANELS]
    columns = min(4, len(layers))
    rows = -(-len(layers) // columns)
    figure = Figure(figsize=(3.6 * columns, 3 * rows))
    for i, layer in enumerate(layers):
        ax = figure.add_subplot(rows, columns, i + 1)
        for activation, frame in history[history["metric"] == f"median_unit_activation_{layer}"].groupby("activation"):
            paint.band(ax, frame, "epoch", activation)
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_title(f"layer {layer}", fontsize=10)
        _epoch_axis(ax, "median over units of mean activation" if i == 0 else "")
        if i == 0:
            ax.legend(fontsize=8)
    figure.suptitle(title, fontsize=11)
    return _png(figure)


def curve_metrics(results: SweepResults) -> list[str]:
    """The per-epoch metrics worth a curve: the headline, training loss, validation loss."""
    classify = results.spec.get("task", "classify") == "classify"
    headline = results.headline_metric
    if NOISE.fullmatch(headline) or headline.endswith(("_at_best_val", "_noise_mean")):
        headline = "test_error" if classify else "test_loss"
    wanted = [headline, "train_loss_eval" if classify else "train_loss", "val_loss"]
    return list(dict.fromkeys(m for m in wanted if m in results.runs))


# the plotted f and f′ are rounded to this many decimals: far below a pixel (8 units span ~400 pixels),
# and far above the last bits in which vector paths differ (float64, ~1e-16), so every CPU plots
# the same numbers and writes the same PNG bytes
PLOTTED_DECIMALS = 6


def activation_figure(names: list[str], expressions: dict[str, str] | None = None, paint: "_Painter | None" = None) -> bytes:
    """f and f′ of each activation on [−4, 4], like the GELU paper's Fig. 1 (f′ by autograd; a
    learnable parameter at its initial value; SOI as its expectation). Computed in float64 and
    rounded to :data:`PLOTTED_DECIMALS` before drawing, so the image does not depend on which vector
    instructions the CPU gives numpy and torch."""
    import numpy as np
    import torch

    from workers.activation_defs import parse_name
    from workers.activations import Activation

    paint = paint or _Painter(names)
    figure = Figure(figsize=(10, 4))
    ax_f, ax_df = figure.subplots(1, 2)
    x = torch.linspace(-4, 4, 801, dtype=torch.float64, requires_grad=True)
    plotted_x = np.round(x.detach().numpy(), PLOTTED_DECIMALS)
    for name in names:
        layer = Activation(parse_name(name, expressions or {}), units=1).double().eval()
        y = layer(x.unsqueeze(1)).squeeze(1)
        (dy,) = torch.autograd.grad(y.sum(), x)
        for ax, values in ((ax_f, y), (ax_df, dy)):
            ax.plot(plotted_x, np.round(values.detach().numpy(), PLOTTED_DECIMALS), label=name,
                    color=paint.colours.get(name))
    for ax, label in ((ax_f, "f(x)"), (ax_df, "f′(x)")):
        ax.set_xlabel("x")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.axhline(0, color="black", linewidth=0.5)
    ax_f.legend(fontsize=8)
    figure.suptitle("The activations compared (f and its derivative)", fontsize=11)
    return _png(figure)


def render_figures(results: SweepResults) -> dict[str, bytes]:
    """Every figure that applies to the sweep, as PNG bytes by file name."""
    runs = chosen_runs(results)
    if not len(runs) or results.histories is None:
        return {}
    paint = _Painter(results.runs["activation"].unique())
    title = f"{results.experiment} (median over seeds, band: min–max)"
    layers = [c for c in runs.columns if UNIT_ACTIVATION.fullmatch(c)]
    units = ["median_unit_activation", "train_loss"] if "median_unit_activation" in runs else []
    history = results.histories(runs, list(dict.fromkeys(curve_metrics(results) + layers + units)))
    figures = {f"curves_{metric}.png": curves_figure(paint, history[history["metric"] == metric], metric, title)
               for metric in curve_metrics(results)}
    figures["activations.png"] = activation_figure(sorted(results.runs["activation"].unique()),
                                                   results.spec.get("expressions"), paint)
    if results.spec.get("task") == "reconstruct":
        grid = results.runs[(results.runs["phase"] == "grid") & (results.runs["status"] == "FINISHED")
                            & ~results.runs["diverged"].astype(bool)]
        figures["curves_per_lr.png"] = per_lr_figure(paint, results.histories(grid, ["train_loss", "test_loss"]), title)
    if any(NOISE.fullmatch(c) for c in runs.columns):
        figures["robustness.png"] = robustness_figure(paint, runs, title)
    if units:
        figures["unit_activation.png"] = unit_activation_figure(paint, history[history["metric"].isin(units)], title)
    if layers:
        figures["unit_activation_layers.png"] = unit_activation_layers_figure(
            paint, history[history["metric"].isin(layers)], title)
    return figures


def stored_figures(results: SweepResults, runs: RunStore) -> dict[str, bytes]:
    """The figures logged with the sweep's parent run; drawn now if none were logged (a running sweep)."""
    return runs.figures(results.parent_run_id) or render_figures(results)
