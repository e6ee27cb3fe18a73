"""Hypothesis check on a record's training curves: where does an activation lead, and is its place
at each lr still moving at the last epoch (an effect of reduced epochs), or settled?

Reads an experiment's committed exports (EXPERIMENT/data/*.csv.gz), takes each epoch's median over
seeds of the training loss in eval mode (train_loss_eval: reconstruction error or cross-entropy, the
papers' curves), and prints per lr and epoch the FOCUS activation's gap to the best of the others
(``--every K``: every K-th epoch of long runs). Writes EXPERIMENT/gap_over_epochs.md.

``--initial`` adds epoch 0: each (activation, seed) network rebuilt from the export's params as the
trainer builds it (``torch.manual_seed(seed)``, then the model) and evaluated on the training set
before any step. It needs the dataset (ACTSWEEP_DATA_DIR).

For plain SGD (no momentum, constant lr) ``--paper-epochs N`` adds the lr × epochs view. Small SGD
steps follow the gradient flow, so the loss after t epochs at lr η is about the loss after t/10
epochs at 10η; the script checks this on the data (η at epoch 10 against 10η at epoch 1), then
reads, for each lr, the order at the lr × epochs that the paper's N epochs reach.

    python docs/reproductions/gap_over_epochs.py mnist_autoencoder --focus gelu_tanh
    python docs/reproductions/gap_over_epochs.py elu_mnist_autoencoder --focus elu --initial --paper-epochs 500
    python docs/reproductions/gap_over_epochs.py elu_mnist_learning --focus elu --initial --every 10
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
METRIC = "train_loss_eval"


def median_curves(frames: pd.DataFrame) -> pd.DataFrame:
    """(lr, epoch) rows, an activation per column: the median over seeds of METRIC."""
    return frames.pivot_table(index=["lr", "epoch"], columns="activation", values=METRIC, aggfunc="median")


def gap_to_best_other(curves: pd.DataFrame, focus: str) -> pd.DataFrame:
    """FOCUS minus the best other activation, per row: negative where FOCUS leads."""
    others = curves.drop(columns=[focus])
    return pd.DataFrame({focus: curves[focus], "best other": others.min(axis=1),
                         "which": others.idxmin(axis=1), "gap": curves[focus] - others.min(axis=1)})


def leading_epochs(gap: pd.Series) -> str:
    """The runs of epochs where the gap is negative, as "a-b, c-d"."""
    leads = gap < 0
    runs = [group.index for _, group in gap[leads].groupby((leads != leads.shift()).cumsum()[leads])]
    return ", ".join(f"{r[0]}" if r[0] == r[-1] else f"{r[0]}-{r[-1]}" for r in runs) or "none"


def initial_errors(frames: pd.DataFrame) -> pd.DataFrame:
    """The training loss before the first step, one row per (activation, seed): the spec's data and
    network, built as the trainer builds them."""
    import torch

    from search_spaces.catalog import load_spec
    from service.driver.sweeps import load_splits
    from service.settings import Settings
    from workers.models import build_model
    from workers.train import evaluate

    spec = load_spec(frames["experiment"].iloc[0])
    splits = load_splits(spec, Settings())
    x, y = torch.as_tensor(splits.train_x), torch.as_tensor(splits.train_y)
    errors = []
    for _, trial in frames.drop_duplicates(["activation", "seed"]).iterrows():
        torch.manual_seed(int(trial["seed"]))  # as workers.train.train_epochs: the seed, then the model
        net = build_model(spec.model.model_dump(), splits.in_shape, splits.n_classes, trial["activation"],
                          float(trial["dropout"]))
        errors.append({"activation": trial["activation"], "seed": trial["seed"],
                       METRIC: evaluate(net, x, y, spec.task)["loss"]})
    return pd.DataFrame(errors)


def with_epoch_zero(frames: pd.DataFrame, initial: pd.DataFrame) -> pd.DataFrame:
    """The exports' rows plus an epoch-0 row per (lr, activation, seed): the initial error."""
    zero = frames.drop_duplicates(["lr", "activation", "seed"])[["lr", "activation", "seed"]]
    return pd.concat([frames, zero.merge(initial, on=["activation", "seed"]).assign(epoch=0)])


def rescaling_check(curves: pd.DataFrame) -> pd.DataFrame:
    """Loss at (lr, last epoch) beside (10 × lr, last epoch / 10): equal under the gradient flow."""
    last = int(curves.index.get_level_values("epoch").max())
    rows = []
    for lr in sorted(curves.index.get_level_values("lr").unique()):
        faster = [other for other in curves.index.get_level_values("lr").unique() if abs(other / lr - 10) < 1e-6]
        if not faster or (faster[0], last // 10) not in curves.index:
            continue
        for activation in curves.columns:
            slow, fast = curves.loc[(lr, last), activation], curves.loc[(faster[0], last // 10), activation]
            rows.append({"lr η": f"{lr:g}", "activation": activation, f"at η, epoch {last}": slow,
                         f"at 10η, epoch {last // 10}": fast, "relative difference": fast / slow - 1})
    return pd.DataFrame(rows)


def read_at_paper_epochs(gaps: pd.DataFrame, paper_epochs: int) -> pd.DataFrame:
    """Per lr: the lr × epochs the paper reaches, and FOCUS's gap at the measured point of equal lr × epochs."""
    by_time = gaps.assign(lr_epochs=[lr * epoch for lr, epoch in gaps.index])
    rows = []
    for lr in sorted(gaps.index.get_level_values("lr").unique()):
        target = lr * paper_epochs
        matches = by_time[(by_time["lr_epochs"] - target).abs() <= 1e-9 + 1e-6 * target]
        rows.append({"lr": f"{lr:g}", "paper's lr × epochs": f"{target:g}",
                     "measured at": ", ".join(f"lr {a:g} epoch {b}" for a, b in matches.index) or "beyond the data",
                     "gap there": matches["gap"].median() if len(matches) else float("nan")})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", help="a folder of docs/reproductions with data/*.csv.gz")
    parser.add_argument("--focus", required=True, help="the activation whose gap is followed, e.g. elu or gelu_tanh")
    parser.add_argument("--initial", action="store_true", help="add epoch 0, the error at initialisation")
    parser.add_argument("--every", type=int, default=1, help="show every K-th epoch (and 0, 1 and the last)")
    parser.add_argument("--paper-epochs", type=int, help="plain SGD only: read the order at the paper's lr × epochs")
    args = parser.parse_args()

    folder = HERE / args.experiment
    frames = pd.concat(pd.read_csv(path) for path in sorted((folder / "data").glob("*.csv.gz")))
    if args.focus not in set(frames["activation"]):
        parser.error(f"--focus: accepted: {', '.join(sorted(set(frames['activation'])))}")
    seeds = ", ".join(str(seed) for seed in sorted(frames["seed"].unique()))
    command = " ".join(["python docs/reproductions/gap_over_epochs.py", args.experiment, "--focus", args.focus]
                       + (["--initial"] if args.initial else [])
                       + ([f"--every {args.every}"] if args.every != 1 else [])
                       + ([f"--paper-epochs {args.paper_epochs}"] if args.paper_epochs else []))
    others = " and ".join(sorted(set(frames["activation"]) - {args.focus}))
    lines = [f"# {args.focus}'s gap to the best other activation, epoch by epoch ({METRIC}, median over seeds {seeds})", "",
             f"Written by `{command}` from the exports in data/. Gap = {args.focus} minus the best of {others}: "
             f"negative where {args.focus} leads.", ""]

    if args.initial:
        initial = initial_errors(frames)
        frames = with_epoch_zero(frames, initial)
        lines += ["## At initialisation (epoch 0)", "",
                  "Each network as the trainer builds it for its seed, on the training set before any step:", "",
                  initial.pivot_table(index="seed", columns="activation", values=METRIC).round(4).to_markdown(), ""]

    curves = median_curves(frames)
    gaps = gap_to_best_other(curves, args.focus)
    for lr, table in gaps.groupby(level="lr"):
        table = table.droplevel("lr")
        first, last = table["gap"].iloc[0], table["gap"].iloc[-1]
        shrinking = (table["gap"].diff().dropna() < 0).mean()
        shown = table[[epoch <= 1 or epoch % args.every == 0 or epoch == table.index[-1] for epoch in table.index]]
        lines += [f"## lr {lr:g}", "", shown.round(5).to_markdown(), "",
                  f"Gap at epoch {table.index[0]}: {first:+.5f}; at epoch {table.index[-1]}: {last:+.5f}; "
                  f"it fell in {shrinking:.0%} of the epoch steps. {args.focus} leads at epochs: "
                  f"{leading_epochs(table['gap'])}.", ""]

    if args.paper_epochs:
        sgd = set(frames["param.optimizer"].dropna()) == {"sgd"} and not frames["param.momentum"].fillna(0).any()
        if not sgd:
            parser.error("--paper-epochs: the lr × epochs view holds for plain SGD only (optimizer sgd, momentum 0)")
        lines += ["## lr × epochs (plain SGD)", "",
                  "Under the gradient flow, t epochs at lr η ≈ t/10 epochs at 10η. Checked on the data:", "",
                  rescaling_check(curves.drop(index=0, level="epoch", errors="ignore")).round(4).to_markdown(index=False), "",
                  f"So the paper's {args.paper_epochs} epochs at lr η are read where the data have the same lr × epochs:", "",
                  read_at_paper_epochs(gaps, args.paper_epochs).round(5).to_markdown(index=False), ""]

    text = "\n".join(lines)
    (folder / "gap_over_epochs.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
