"""Rendering a sweep's aggregated results as Markdown, CSV or JSON."""
from __future__ import annotations

import json
import math
from dataclasses import asdict

import pandas as pd

from service.aggregate import SweepResults
from service.paper_table import reported_rows, verdicts

FORMATS = ("md", "csv", "json", "html")
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


def _value(metric: str, value: float | None) -> str:
    if value is None or pd.isna(value):
        return "–"
    return f"{100 * value:.2f}%" if "error" in metric else f"{value:.4f}"


def paper_terms_table(results: SweepResults) -> pd.DataFrame:
    """The reported number per activation (and dropout) beside the paper's."""
    rows = reported_rows(results.runs, results.table, results.spec)
    return pd.DataFrame([{
        "activation": r.activation, "dropout": r.dropout, "chosen lr": f"{r.lr:g}", "metric": r.metric,
        "ours (median)": _value(r.metric, r.median),
        "95% interval": f"[{_value(r.metric, r.ci_low)}, {_value(r.metric, r.ci_high)}]",
        "seeds": r.n_seeds, "paper": _value(r.metric, r.paper)} for r in rows])


def verdicts_table(results: SweepResults) -> pd.DataFrame:
    """One row per ordering the paper reports: ours, a paired t-test across seeds, the verdict."""
    found = verdicts(reported_rows(results.runs, results.table, results.spec))
    return pd.DataFrame([{
        "claim (paper's order)": v.claim,
        "paper": f"{_value(v.claim, v.paper[0])} vs {_value(v.claim, v.paper[1])}",
        "ours (medians)": f"{_value(v.claim, v.ours[0])} vs {_value(v.claim, v.ours[1])}",
        "paired t-test p (seeds)": (f"{v.p_value:.3g} ({v.n_pairs})" if v.p_value is not None else f"– ({v.n_pairs})"),
        "verdict": v.verdict} for v in found])


def paper_terms_markdown(results: SweepResults) -> list[str]:
    """The reported number per activation beside the paper's, and the verdicts on its claims."""
    if not results.spec or not len(results.table):
        return []
    lines = ["## In the paper's terms", "", paper_terms_table(results).to_markdown(index=False), ""]
    found = verdicts_table(results)
    if len(found):
        lines += [found.to_markdown(index=False), ""]
    claims = results.spec.get("claims", [])
    if claims:
        lines += ["Claims of the paper for this experiment: " + " ".join(claims), ""]
    return lines


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
        *paper_terms_markdown(results),
        "## Chosen learning rate per activation and dropout", "",
        chosen.to_markdown(index=False), "",
        *retrained,
        "## Every configuration", "",
        readable.to_markdown(index=False), "",
        f"MLflow: experiment {results.experiment_id}, parent run {results.parent_run_id}.", "",
    ])


def to_json(results: SweepResults) -> dict:
    reported = reported_rows(results.runs, results.table, results.spec) if results.spec and len(results.table) else []
    return {"sweep_id": results.sweep_id, "experiment": results.experiment,
            "protocol": {"aggregate": "median", "select_lr_by": results.select_lr_by,
                         "headline_metric": results.headline_metric},
            "mlflow": {"experiment_id": results.experiment_id, "parent_run_id": results.parent_run_id},
            "results": results.rows(), "retrained": results.rows(results.retrained),
            "reported": _finite([asdict(r) for r in reported]), "verdicts": _finite([asdict(v) for v in verdicts(reported)])}


def _finite(value):
    """NaN → None, recursively: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def render(results: SweepResults, fmt: str, figures: dict[str, bytes] | None = None,
           mlflow_ui_url: str | None = None) -> str:
    """The report in ``fmt`` (md, csv, json, or html with ``figures`` and links into the MLflow UI)."""
    if fmt == "html":
        from service.html_report import to_html

        return to_html(results, figures or {}, mlflow_ui_url)
    if fmt == "md":
        return to_markdown(results)
    if fmt == "csv":
        return results.table.to_csv(index=False)
    if fmt == "json":
        return json.dumps(to_json(results), indent=2)
    raise ValueError(f"--format: unknown {fmt!r}; accepted: {', '.join(FORMATS)}")
