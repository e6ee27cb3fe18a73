"""The HTML report of a sweep: tables, figures (embedded, so the file stands alone), the spec,
the code version, the hardware, and links to the MLflow runs."""
from __future__ import annotations

import base64
import html
import time

import pandas as pd
import yaml
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from service.reporting.aggregate import SweepResults
from service.reporting.report import (claim_verdicts_table, execution_line, format_value, learned_parameters_table,
                                      looks_table, paper_terms_table, protocol_line, readable_table, verdicts_line,
                                      verdicts_table)
from service.runs.links import experiment_link, run_link
from service.settings import mask_secrets

PAPERS = {"gelu": "Hendrycks & Gimpel, Gaussian Error Linear Units (GELUs)",
          "elu": "Clevert, Unterthiner & Hochreiter, Fast and Accurate Deep Network Learning by ELUs"}
_templates = Environment(loader=PackageLoader("service.reporting", "templates"), autoescape=select_autoescape(["html", "j2"]))


def _table(frame: pd.DataFrame) -> Markup:  # cells are escaped by _escaped; the markup is ours
    return Markup(frame.to_html(index=False, border=0, na_rep="–", escape=False))


def _verdicts(frame: pd.DataFrame) -> str:
    frame = frame.copy()
    frame["verdict"] = frame["verdict"].map(lambda v: f'<span class="{v.replace(" ", "-")}">{html.escape(v)}</span>')
    return _table(frame)


def _escaped(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.map(lambda v: html.escape(v) if isinstance(v, str) else v)


def _trial_links(results: SweepResults, run_url) -> pd.DataFrame:
    runs = results.runs.sort_values(["phase", "activation", "dropout", "lr", "seed"])
    metric = results.headline_metric if results.headline_metric in runs else "test_error"
    return pd.DataFrame({
        "run": [f'<a href="{html.escape(run_url(r), quote=True)}">{html.escape(r[:8])}</a>' for r in runs["run_id"]],
        "phase": runs["phase"], "activation": runs["activation"].map(html.escape), "dropout": runs["dropout"],
        "lr": runs["lr"].map(lambda v: f"{v:g}"), "seed": runs["seed"], "status": runs["status"],
        "diverged": runs["diverged"].map(lambda d: "yes" if d else ""),
        metric: runs[metric].map(lambda v: format_value(metric, v)),
    })


def to_html(results: SweepResults, figures: dict[str, bytes], mlflow_ui_url: str | None = None) -> str:
    """The report as one self-contained HTML page."""
    ui = mask_secrets(mlflow_ui_url or "http://127.0.0.1:5000").rstrip("/")
    if not ui.startswith(("http://", "https://")):  # a link, never a script (javascript: ...)
        ui = "http://127.0.0.1:5000"
    experiment_url = experiment_link(ui, results.experiment_id, results.sweep_id if "+" not in results.sweep_id else None)

    def run_url(run_id: str) -> str:
        return run_link(ui, results.experiment_id, run_id)

    spec = results.spec or {}
    task = spec.get("task")
    readable = readable_table(results.table, task)
    has_table = bool(spec) and len(results.table)
    verdicts = verdicts_table(results) if has_table else pd.DataFrame()
    ranked = claim_verdicts_table(results) if has_table else pd.DataFrame()
    return _templates.get_template("report.html.j2").render(
        r=results, spec=spec, paper=PAPERS.get(spec.get("paper", ""), spec.get("paper", "")),
        finished=int((results.runs["status"] == "FINISHED").sum()),
        experiment_url=experiment_url, parent_url=run_url(results.parent_run_id),
        generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        protocol=protocol_line(results), execution=execution_line(results), notes=spec.get("protocol", {}).get("notes", []),
        paper_terms=_table(_escaped(paper_terms_table(results))) if has_table else None,
        verdicts=_verdicts(_escaped(verdicts)) if len(verdicts) else None,
        ranked=_verdicts(_escaped(ranked)) if len(ranked) else None,
        verdicts_how=verdicts_line(results) if len(verdicts) or len(ranked) else "",
        looks=_table(_escaped(looks)) if has_table and len(looks := looks_table(results)) else None,
        sources=_table(_escaped(pd.DataFrame(results.sources))) if results.sources else None,
        claims=spec.get("claims", []),
        figures=[(name, base64.b64encode(png).decode()) for name, png in sorted(figures.items())],
        chosen=_table(_escaped(readable[results.table["lr_chosen"]].drop(columns=["chosen"]))) if len(readable) else "",
        retrained=_table(_escaped(readable_table(results.retrained, task))) if len(results.retrained) else None,
        learned=_table(_escaped(learned)) if len(learned := learned_parameters_table(results)) else None,
        every=_table(_escaped(readable)), trials=_table(_trial_links(results, run_url)),
        spec_text=yaml.safe_dump(spec, sort_keys=False, allow_unicode=True),
    )
