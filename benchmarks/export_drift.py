"""How far a rerun's numbers moved from a record's: ``python benchmarks/export_drift.py OLD NEW [--spread EXPORT ...]``.

OLD and NEW are exports (``actsweep export``) of the same grid points trained twice, for example
a committed seed slice and the same slice trained again by newer code. Per metric and activation,
after the first epoch and after the last, it prints the largest and the median difference between
the two over the grid points (relative; error rates absolute), and, for scale, how much the
same metric moves between seeds (``--spread``: exports of the other seeds; the median over grid
points of the range over seeds). A rerun whose differences are rounding (another CPU, another
summation order, a kernel one ulp apart) moves a metric far less than another seed does.
"""
from __future__ import annotations

import argparse
import json

import pandas as pd

METRICS = ("train_loss", "train_loss_eval", "val_loss", "val_error", "test_loss", "test_error",
           "test_error_at_best_val", "test_error_noise_1", "test_error_noise_3")
POINT = ["activation", "lr", "dropout", "seed"]


def _at(frame: pd.DataFrame, epoch: int | None) -> pd.DataFrame:
    """Each grid point's row after ``epoch`` (None: its last)."""
    if epoch is not None:
        return frame[frame["epoch"] == epoch].set_index(POINT)
    return frame.sort_values("epoch").groupby(POINT).tail(1).set_index(POINT)


def _difference(metric: str, old: pd.Series, new: pd.Series) -> pd.Series:
    if "error" in metric:  # a rate near 0: absolute
        return (new - old).abs()
    return ((new - old) / old.abs().clip(lower=1e-12)).abs()


def drift(old: pd.DataFrame, new: pd.DataFrame, spread: list[pd.DataFrame] = (), epoch: int | None = None) -> dict:
    """Per metric and activation: the largest and median difference between ``old`` and ``new``
    after ``epoch`` (None: the last; relative, error rates absolute), and with ``spread``, the
    median range over seeds."""
    old_last, new_last = _at(old, epoch), _at(new, epoch)
    missing = sorted(set(old_last.index) ^ set(new_last.index))
    if missing:
        raise ValueError(f"the exports hold different grid points: {missing[:4]}")
    new_last = new_last.loc[old_last.index]
    seeds = _at(pd.concat([old, *spread]), epoch) if spread else None
    found: dict[str, dict] = {}
    for metric in METRICS:
        if metric not in old_last or metric not in new_last or old_last[metric].isna().all():
            continue  # (the noisy copies' errors: only after the last epoch)
        difference = _difference(metric, old_last[metric], new_last[metric])
        row = {}
        for activation, values in difference.groupby(level="activation"):
            row[activation] = {"largest": float(values.max()), "median": float(values.median())}
            if seeds is not None:
                by_point = seeds[metric].xs(activation, level="activation").groupby(level=["lr", "dropout"])
                ranges = by_point.max() - by_point.min()
                if "error" not in metric:
                    ranges = ranges / by_point.median().abs()
                row[activation]["seed_range_median"] = float(ranges.median())
        found[metric] = row
    return found


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--spread", nargs="*", default=[], help="exports of other seeds, for scale")
    args = parser.parse_args(argv)
    old, new, spread = pd.read_csv(args.old), pd.read_csv(args.new), [pd.read_csv(p) for p in args.spread]
    result = {"after_epoch_1": drift(old, new, spread, epoch=1), "after_the_last": drift(old, new, spread)}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
