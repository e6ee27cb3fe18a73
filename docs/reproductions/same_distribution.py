"""Hypothesis check for a record extended across machines or code: do the seeds of the NEW exports
come from the same distribution as the others' (same protocol, other hardware: a GPU's fp32 kernels
sum in another order than a CPU's, so no seed is bit-identical, but the spread should not move)?

Reads an experiment's committed exports (EXPERIMENT/data/*.csv.gz). Per (activation, lr, dropout)
and per METRIC, each seed is scored by the metric at its last epoch and by its mean over the epochs
(the area the ranking claims read). It prints, per configuration, how many new seeds fall within the
range of the old ones (for exchangeable draws a new value lies within the range of n old ones with
probability (n - 1)/(n + 1)) and a two-sided Mann-Whitney test of old against new.

    python docs/reproductions/same_distribution.py elu_mnist_learning --new 9460535c40e4
    python docs/reproductions/same_distribution.py elu_mnist_autoencoder --new abafbffe15d0 --lr 0.001
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from scipy.stats import mannwhitneyu

HERE = Path(__file__).resolve().parent
KEYS = ["activation", "lr", "dropout"]


def seed_scores(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per (configuration, seed): METRIC at the last epoch and its mean over the epochs."""
    runs = frame.dropna(subset=[metric]).sort_values("epoch").groupby(KEYS + ["seed"])[metric]
    return pd.DataFrame({"last": runs.last(), "mean_over_epochs": runs.mean()}).reset_index()


def compare(old: pd.DataFrame, new: pd.DataFrame, score: str) -> list[dict]:
    rows = []
    for key, old_cfg in old.groupby(KEYS):
        new_cfg = new.set_index(KEYS).loc[[key]] if key in set(new.set_index(KEYS).index) else None
        if new_cfg is None:
            continue
        lo, hi, n = old_cfg[score].min(), old_cfg[score].max(), len(old_cfg)
        inside = int(new_cfg[score].between(lo, hi).sum())
        rows.append({"configuration": " ".join(f"{k} {v:g}" if isinstance(v, float) else str(v) for k, v in zip(KEYS, key)),
                     "old seeds": n, "new seeds": len(new_cfg), "new inside old range": inside,
                     "expected": round(len(new_cfg) * (n - 1) / (n + 1), 1),
                     "Mann-Whitney p": mannwhitneyu(old_cfg[score], new_cfg[score]).pvalue})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment")
    parser.add_argument("--new", required=True, help="comma list of the new exports' sweep ids")
    parser.add_argument("--lr", type=float, help="only this lr")
    parser.add_argument("--metrics", default="train_loss_eval,val_loss")
    args = parser.parse_args()
    new_ids = set(args.new.split(","))
    frames = [pd.read_csv(p).assign(new=p.name.split(".")[0] in new_ids)
              for p in sorted((HERE / args.experiment / "data").glob("*.csv.gz"))]
    frame = pd.concat(frames, ignore_index=True)
    frame = frame[frame.phase.fillna("train") != "test"] if "phase" in frame else frame
    if args.lr is not None:
        frame = frame[frame.lr == args.lr]
    for metric in args.metrics.split(","):
        for score in ("last", "mean_over_epochs"):
            old = seed_scores(frame[~frame.new], metric)
            new = seed_scores(frame[frame.new], metric)
            table = pd.DataFrame(compare(old, new, score))
            inside, expected = table["new inside old range"].sum(), table["expected"].sum()
            print(f"\n{metric}, {score}: {inside} of {table['new seeds'].sum()} new seeds inside the old range "
                  f"({expected:.1f} expected); Mann-Whitney p from {table['Mann-Whitney p'].min():.2g} "
                  f"to {table['Mann-Whitney p'].max():.2g}")
            print(table.to_markdown(index=False, floatfmt=".3g"))


if __name__ == "__main__":
    main()
