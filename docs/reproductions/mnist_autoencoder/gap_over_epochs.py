"""Hypothesis check for the reduced mnist_autoencoder record: is GELU's place at each lr still moving
at epoch 10 (an effect of the reduced epochs), or settled?

Reads the committed exports (data/*.csv.gz), takes each epoch's median over seeds of the training
reconstruction error (train_loss_eval, Figure 4's curves), and prints per lr and epoch GELU's
gap to the best of the others. A gap that shrinks epoch on epoch says the 10-epoch order is not
yet Figure 4's end state; a steady or widening one says it is. Writes gap_over_epochs.md.

    python docs/reproductions/mnist_autoencoder/gap_over_epochs.py
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
METRIC = "train_loss_eval"


def median_curves(frames: pd.DataFrame) -> pd.DataFrame:
    """(lr, epoch) rows, an activation per column: the median over seeds of METRIC."""
    return frames.pivot_table(index=["lr", "epoch"], columns="activation", values=METRIC, aggfunc="median")


def gelu_gap(curves: pd.DataFrame, gelu: str = "gelu_tanh") -> pd.DataFrame:
    """GELU minus the best other activation, per (lr, epoch): negative where GELU leads."""
    others = curves.drop(columns=[gelu])
    return pd.DataFrame({"gelu": curves[gelu], "best other": others.min(axis=1),
                         "which": others.idxmin(axis=1), "gap": curves[gelu] - others.min(axis=1)})


def main() -> None:
    frames = pd.concat(pd.read_csv(path) for path in sorted((HERE / "data").glob("*.csv.gz")))
    seeds = sorted(frames["seed"].unique())
    gaps = gelu_gap(median_curves(frames))
    lines = [f"# GELU's gap to the best other activation, epoch by epoch ({METRIC}, median over seeds {seeds})", "",
             "Written by `python docs/reproductions/mnist_autoencoder/gap_over_epochs.py` from the exports in data/. "
             "Gap = GELU minus the best of ELU and ReLU: negative where GELU leads.", ""]
    for lr, table in gaps.groupby(level="lr"):
        table = table.droplevel("lr")
        first, last = table["gap"].iloc[0], table["gap"].iloc[-1]
        shrinking = (table["gap"].diff().dropna() < 0).mean()
        lines += [f"## lr {lr:g}", "", table.round(5).to_markdown(), "",
                  f"Gap at epoch {table.index[0]}: {first:+.5f}; at epoch {table.index[-1]}: {last:+.5f}; "
                  f"it fell in {shrinking:.0%} of the epoch steps.", ""]
    text = "\n".join(lines)
    (HERE / "gap_over_epochs.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
