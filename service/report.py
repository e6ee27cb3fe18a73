"""Rendering a sweep's aggregated results as Markdown, CSV or JSON."""
from __future__ import annotations

import json

import pandas as pd

from service.aggregate import SweepResults

FORMATS = ("md", "csv", "json")
SHOWN = ["activation", "dropout", "lr", "n_seeds", "train_loss", "train_loss_eval", "val_loss", "val_error",
         "test_loss", "test_error"]


def _readable(table: pd.DataFrame) -> pd.DataFrame:
    shown = table[SHOWN + (["lr_chosen"] if "lr_chosen" in table else [])].copy()
    for column in ("val_error", "test_error"):
        shown[column] = shown[column].map(lambda v: f"{100 * v:.2f}%" if pd.notna(v) else "–")
    for column in ("train_loss", "train_loss_eval", "val_loss", "test_loss"):
        shown[column] = shown[column].map(lambda v: f"{v:.4f}" if pd.notna(v) else "–")
    shown["lr"] = shown["lr"].map(lambda v: f"{v:g}")
    if "lr_chosen" in shown:
        shown["lr_chosen"] = shown["lr_chosen"].map(lambda chosen: "✓" if chosen else "")
    return shown.rename(columns={"lr_chosen": "chosen"})


def protocol_line(results: SweepResults) -> str:
    seeds = sorted(set(results.table["n_seeds"].tolist())) or [0]
    return (f"Median over {'/'.join(map(str, seeds))} seeds per (activation, dropout, lr), read back from MLflow; "
            f"the lr is chosen per (activation, dropout) by the lowest median {results.select_lr_by} "
            f"(validation data, never test). Errors in %, losses are mean cross-entropy (nats).")


def to_markdown(results: SweepResults) -> str:
    readable = _readable(results.table)
    chosen = readable[results.table["lr_chosen"]].drop(columns=["chosen"])
    retrained = []
    if len(results.retrained):
        retrained = ["## Retrained on all the training data with the chosen lr (the reported number)", "",
                     _readable(results.retrained).to_markdown(index=False), ""]
    return "\n".join([
        f"# {results.experiment}: sweep {results.sweep_id}", "",
        protocol_line(results), "",
        "## Chosen learning rate per activation and dropout", "",
        chosen.to_markdown(index=False), "",
        *retrained,
        "## Every configuration", "",
        readable.to_markdown(index=False), "",
        f"MLflow: experiment {results.experiment_id}, parent run {results.parent_run_id}.", "",
    ])


def to_json(results: SweepResults) -> dict:
    return {"sweep_id": results.sweep_id, "experiment": results.experiment,
            "protocol": {"aggregate": "median", "select_lr_by": results.select_lr_by,
                         "headline_metric": results.headline_metric},
            "mlflow": {"experiment_id": results.experiment_id, "parent_run_id": results.parent_run_id},
            "results": results.rows(), "retrained": results.rows(results.retrained)}


def render(results: SweepResults, fmt: str) -> str:
    """The report in ``fmt`` (md, csv or json)."""
    if fmt == "md":
        return to_markdown(results)
    if fmt == "csv":
        return results.table.to_csv(index=False)
    if fmt == "json":
        return json.dumps(to_json(results), indent=2)
    raise ValueError(f"--format: unknown {fmt!r}; accepted: {', '.join(FORMATS)}")
