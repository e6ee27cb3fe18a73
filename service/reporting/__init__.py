"""Reports of sweeps: medians over seeds and the lr chosen on validation (aggregate), the paper's
terms and verdicts (paper_table), Markdown/CSV/JSON/HTML (report, html), figures, and the
reproduction record built from exports (record). Runs come from service.runs."""
