"""Reports of sweeps: medians over seeds and the lr chosen on validation (aggregate), the paper's
terms and verdicts (paper_table; a sweep's claims as one family: family, over the looks of seeds
until decided: sequential), Markdown/CSV/JSON (report) and HTML (html), in a format by name
(render), figures, and the reproduction record built from exports (record). Runs come from
service.runs."""

FORMATS = ("md", "csv", "json", "html")  # a report's formats, by name (render)
