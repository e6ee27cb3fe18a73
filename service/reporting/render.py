"""A sweep's report in one of its formats: Markdown, CSV, JSON (service.reporting.report) or one
self-contained HTML page (service.reporting.html). Above both, so that neither imports the other."""
from __future__ import annotations

import json

from service.reporting import FORMATS
from service.reporting.aggregate import SweepResults
from service.reporting.html import to_html
from service.reporting.report import to_json, to_markdown


def render(results: SweepResults, fmt: str, figures: dict[str, bytes] | None = None,
           mlflow_ui_url: str | None = None) -> str:
    """The report in ``fmt`` (md, csv, json, or html with ``figures`` and links into the MLflow UI)."""
    if fmt == "html":
        return to_html(results, figures or {}, mlflow_ui_url)
    if fmt == "md":
        return to_markdown(results)
    if fmt == "csv":
        return results.table.to_csv(index=False)
    if fmt == "json":
        return json.dumps(to_json(results), indent=2)
    raise ValueError(f"--format: unknown {fmt!r}; accepted: {', '.join(FORMATS)}")
