"""The reproduction record: every experiment's report, figures and data, rebuilt from committed exports.

``actsweep record docs/reproductions/campaign.yaml`` reads the campaign's manifest: per experiment,
the exports of the sweeps (or slices) that ran it, the spec to read them under, the commands that
produced them and how the protocol was reduced where it was. It writes, per experiment, a folder
with the report in the paper's terms (``report.md``, ``report.json``), the figures (PNG) and the
spec used (``spec.yaml``), and the index ``README.md`` with one row per experiment: the paper's
claim or number, ours, the verdicts, deviations, wall time, machine, commit and command.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from search_spaces import load_spec
from service.lock import NO_LOCK, environment_lock
from service.reporting.figures import render_figures
from service.reporting.paper_table import reported_rows
from service.reporting.render import render
from service.reporting.report import family, format_interval, format_value, to_json
from service.reporting.results import results_from_exports
from service.runs.exports import ExportError


@dataclass
class RecordEntry:
    """One experiment of the manifest."""

    name: str  # the folder, usually the experiment's name
    spec: str  # the catalog experiment (or a YAML relative to the manifest) the exports are read under
    exports: list[str]  # relative to the manifest
    commands: list[str]
    deviations: list[str] = field(default_factory=list)  # how this run differs from the paper's protocol
    notes: list[str] = field(default_factory=list)
    # where a claim does not reproduce, a stated hypothesis for why, tested on the same exports read
    # under another spec (YAML beside the manifest): [{name, question, spec}]
    hypotheses: list[dict] = field(default_factory=list)
    # a hypothesis tested by a script whose page is committed in the folder (e.g. gap_over_epochs.md):
    # [{page, question, verdict (one line, for the index), finding}]
    analyses: list[dict] = field(default_factory=list)


@dataclass
class Tested:
    """A tested hypothesis as the index and the experiment's page list it."""

    label: str
    page: str  # relative to the experiment's folder
    question: str
    verdict: str  # one line
    finding: str = ""


def read_manifest(path: Path) -> tuple[dict, list[RecordEntry]]:
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("experiments"), list):
        raise ExportError(f"record: {path} needs a list `experiments:`")
    entries = []
    for item in raw["experiments"]:
        unknown = set(item) - set(RecordEntry.__dataclass_fields__)
        if unknown:
            raise ExportError(f"record: {path}: unknown field(s) {', '.join(sorted(unknown))} in {item.get('name')}")
        entries.append(RecordEntry(**item))
    return raw, entries


VERDICT_WORDS = ("reproduced", "not reproduced", "equivalent", "inconclusive", "diverged")


def _summary(results) -> tuple[str, str, str, dict[str, int]]:
    """(ours, verdicts, the paper's, the verdicts' counts) for the index: ours per activation with its interval and that
    interval's coverage; each verdict with its Holm-adjusted p, the mean paired difference, and the
    seeds it used or would need."""
    rows = reported_rows(results.runs, results.table, results.spec)
    split = len({r.activation for r in rows}) < len(rows)
    ours = "; ".join(
        f"{r.activation}{f' (dropout {r.dropout:g})' if split else ''}: "
        + ("diverged" if r.diverged else f"{format_value(r.metric, r.median)} "
                                         f"{format_interval(r.metric, r.ci_low, r.ci_high, r.ci_coverage)}, "
                                         f"{r.n_seeds} seeds")
        for r in rows)
    found = family(results).numbers + family(results).claims
    counts = {v: sum(x.verdict == v for x in found)
              for v in VERDICT_WORDS}
    verdict = ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "no ordering to check"
    details = []
    for v in found:
        metric = v.metric
        line = f"{v.claim.rsplit(' on ', 1)[0]}{f' ({v.where})' if v.where else ''}: **{v.verdict}**"
        if v.verdict != "diverged" and v.effect is not None and v.effect.n >= 2:
            sign = "−" if v.effect.mean_difference < 0 else "+"
            line += (f", Δ {sign}{format_value(metric, abs(v.effect.mean_difference))}, "
                     + (f"TOST at ±{format_value(metric, v.delta)}, p<sub>adj</sub> {v.p_equivalent_adjusted:.2g}, "
                        if v.verdict == "equivalent" else
                        f"p<sub>Holm</sub> {v.p_adjusted:.2g}, " if v.p_adjusted is not None else
                        f"p {v.p_value:.2g} at the last look (group-sequential), " if v.p_value is not None else "")
                     + (f"{v.n_pairs} seeds" if v.verdict != "inconclusive" else v.seeds_needed))
        details.append(line)
    if details:
        verdict += "<br>" + "<br>".join(details)
    paper = "; ".join(f"{r.activation}: {format_value(r.metric, r.paper)}" for r in rows if r.paper is not None)
    return ours, verdict, paper or " ".join(results.spec.get("claims", [])), counts


def build_record(manifest: Path) -> list[Path]:
    """Write every experiment's folder and the index beside the manifest; returns the files written."""
    meta, entries = read_manifest(manifest)
    root = manifest.parent
    written, index, hypotheses_index, totals = [], [], [], {}
    for entry in entries:
        folder = root / entry.name
        folder.mkdir(parents=True, exist_ok=True)
        spec = load_spec(str(root / entry.spec) if (root / entry.spec).is_file() else entry.spec)  # (a YAML beside the manifest)
        exports = [root / e for e in entry.exports]
        results = results_from_exports(exports, spec)
        (folder / "report.md").write_text(render(results, "md"))
        (folder / "report.json").write_text(json.dumps(to_json(results), indent=2))
        (folder / "spec.yaml").write_text(yaml.safe_dump(spec.unsliced().model_dump(mode="json"), sort_keys=False))
        written += [folder / "report.md", folder / "report.json", folder / "spec.yaml"]
        for name, png in render_figures(results).items():
            (folder / name).write_bytes(png)
            written.append(folder / name)
        wall = sum(s["wall (s)"] or 0 for s in results.sources)
        commits = sorted({(s["code version"] or "?").replace("git ", "")[:10] for s in results.sources})
        locks = sorted({s["lock"] for s in results.sources})
        ours, verdict, paper, counts = _summary(results)
        if spec.paper != "custom":
            for word, n in counts.items():
                totals[word] = totals.get(word, 0) + n
        tested = []
        for hypothesis in entry.hypotheses:
            variant = results_from_exports(exports, load_spec(str(root / hypothesis["spec"])))
            page = folder / "hypotheses" / f"{hypothesis['name']}.md"
            page.parent.mkdir(exist_ok=True)
            page.write_text(f"# Hypothesis: {hypothesis['question']}\n\nThe same exports, read under "
                            f"`{hypothesis['spec']}`.\n\n{render(variant, 'md')}")
            written.append(page)
            tested.append(Tested(hypothesis["name"], f"hypotheses/{hypothesis['name']}.md", hypothesis["question"],
                                 _summary(variant)[1]))
        for analysis in entry.analyses:
            missing = {"page", "question", "verdict", "finding"} - set(analysis)
            if missing or not (folder / analysis["page"]).is_file():
                raise ExportError(f"record: {entry.name}: analyses needs page, question, verdict and finding, and the "
                                  f"page in the folder (missing: {', '.join(sorted(missing)) or analysis['page']})")
            tested.append(Tested(Path(analysis["page"]).stem, analysis["page"], analysis["question"],
                                 analysis["verdict"], analysis["finding"]))
        (folder / "README.md").write_text(_experiment_page(entry, spec, results, wall, commits, locks, tested))
        written.append(folder / "README.md")
        (hypotheses_index if spec.paper == "custom" else index).append({"experiment": f"[{entry.name}]({entry.name}/README.md)",
                      "paper, section": f"{spec.paper.upper()} {spec.section}", "paper's claim or number": paper,
                      "ours (median [interval] (its coverage), seeds)": ours, "verdicts": verdict,
                      "protocol deviations": "; ".join(entry.deviations) or "none",
                      "hypotheses tested": "<br>".join(f"[{t.label}]({entry.name}/{t.page}): {t.verdict}"
                                                       for t in tested) or "–",
                      "wall time": f"{wall / 3600:.2f} h" if wall >= 3600 else f"{wall / 60:.0f} min",
                      "commit": ", ".join(commits),
                      "command": "<br>".join(f"`{c}`" for c in entry.commands)})
    readme = root / "README.md"
    readme.write_text(_index_page(meta, index, hypotheses_index, totals))
    return [*written, readme]


def _environment_line(locks: list[str]) -> str:
    """Which locked environment the sweeps ran in, and whether it is the one rebuilding the record."""
    now = environment_lock() or "none (this environment was not built from requirements.lock)"
    if locks == [now]:
        return f"Environment: requirements.lock {now}, the lock this record was rebuilt under."
    made = [lock for lock in locks if lock != NO_LOCK]
    ran = (f"the sweeps ran under requirements.lock {', '.join(made)}" if made else
           "the sweeps ran before environments were locked (no lock recorded)")
    if made and NO_LOCK in locks:
        ran += ", and some before environments were locked (no lock recorded)"
    return (f"Environment: {ran}; this record was rebuilt under requirements.lock {now}. Numbers may differ "
            f"where a package changed between the two.")


def _experiment_page(entry: RecordEntry, spec, results, wall: float, commits: list[str], locks: list[str],
                     tested: list[Tested]) -> str:
    import pandas as pd

    figures = sorted(p for p in render_figures(results))
    sources = pd.DataFrame(results.sources).to_markdown(index=False) if results.sources else ""
    return "\n".join([
        f"# {entry.name}: {spec.title}", "",
        f"{spec.paper.upper()} paper, {spec.section}. " + " ".join(spec.claims), "",
        "## Protocol", "",
        "Deviations from the paper's protocol: " + ("; ".join(entry.deviations) or "none") + ".", "",
        *[f"- {note}" for note in entry.notes], "",
        f"Wall time on this machine, all sweeps: {wall / 3600:.2f} h. Code: {', '.join(commits)}.", "",
        _environment_line(locks), "",
        "## Results", "",
        "- [report.md](report.md): the report in the paper's terms, with every table "
        "([report.json](report.json) the same as data)",
        *[f"- [{name}]({name})" for name in figures],
        "- [spec.yaml](spec.yaml): the spec the reports read the data under; the data in [data/](data/)", "",
        *(["## Hypotheses tested", "", *[f"- [{t.question}]({t.page}): {t.verdict}" + (f". {t.finding}" if t.finding else "")
                                          for t in tested],
           ""] if tested else []),
        "## How to run it again", "",
        "```bash", *entry.commands, "```", "",
        "The sweeps, as exported:", "", sources, "",
    ])


def _index_page(meta: dict, rows: list[dict], own: list[dict], totals: dict[str, int]) -> str:
    import pandas as pd

    counted = sum(totals.values())
    tally = (f"The papers' verdicts, {counted} in all: "
             + ", ".join(f"{totals.get(word, 0)} {word}" for word in VERDICT_WORDS)
             + " (equivalent: the difference shown within ±δ, the spec's smallest effect of interest; "
               "docs/statistics.md)." if counted else "")

    table = pd.DataFrame(rows).to_markdown(index=False) if rows else "(no experiment recorded yet)"
    own_table = ([ "## Questions the papers do not ask", "",
                   "These sweeps test hypotheses of their own on the papers' networks. Their verdicts are not paper "
                   "verdicts and are not counted with them.", "",
                   pd.DataFrame(own).rename(columns={"paper's claim or number": "hypothesis"}).to_markdown(index=False),
                   ""] if own else [])
    return "\n".join([
        "# Reproductions",
        "",
        meta.get("intro", "").strip(),
        "",
        f"Machine: {meta.get('machine', 'not recorded')}.",
        "",
        tally,
        "",
        table,
        "",
        *own_table,
        meta.get("outro", "").strip(),
        "",
        "This page and every folder beside it are written by `actsweep record docs/reproductions/campaign.yaml` "
        "from the exported data in each folder's `data/`.",
        "",
    ])
