"""Rendering a sweep's aggregated results as Markdown, CSV or JSON."""
from __future__ import annotations

import math
from dataclasses import asdict

import pandas as pd

from service.reporting.aggregate import SweepResults
from service.reporting.family import Family, decide_family
from service.reporting.paper_table import Verdict, reported_rows

SHOWN = ["activation", "dropout", "lr", "n_seeds", "n_diverged", "train_loss", "train_loss_eval", "val_loss",
         "val_error", "test_loss", "test_error"]
AT_BEST_SHOWN = ["best_val_epoch", "val_error_at_best_val", "test_error_at_best_val"]  # report_epoch: best_val_epoch


def format_value(column: str, value: float | None) -> str:
    """One number as every report prints it: errors in %, losses to 4 decimals (3 significant digits
    below 0.01), "–" where there is none."""
    if value is None or pd.isna(value):
        return "–"
    if "error" in column:
        return f"{100 * value:.2f}%"
    if column == "best_val_epoch":
        return f"{value:.1f}"
    return f"{value:.4f}" if abs(value) >= 0.01 or value == 0 else f"{value:.3g}"  # 0.000212, not 0.0002


def readable_table(table: pd.DataFrame, task: str | None = None) -> pd.DataFrame:
    """The grid table as it is printed; a network that reconstructs its input has no error rate, so
    its error columns (zeros in the logs) are left out."""
    at_best = [c for c in AT_BEST_SHOWN if c in table]
    columns = [c for c in SHOWN if c in table] + at_best + (["lr_chosen"] if "lr_chosen" in table else [])
    if task == "reconstruct":
        columns = [c for c in columns if "error" not in c]
    shown = table[columns].copy()
    for column in shown.columns:
        if column.endswith(("_error", "_loss", "_eval", "_at_best_val", "best_val_epoch")):
            shown[column] = shown[column].map(lambda v, c=column: format_value(c, v))
    if "n_diverged" in shown:  # "2 of 5" where seeds diverged (left out of the medians), else blank
        total = table["n_seeds"] + table["n_diverged"]
        shown["n_diverged"] = [f"{d} of {n}" if d else "" for d, n in zip(table["n_diverged"], total)]
    shown["lr"] = shown["lr"].map(lambda v: f"{v:g}")
    if "lr_chosen" in shown:
        shown["lr_chosen"] = shown["lr_chosen"].map(lambda chosen: "✓" if chosen else "")
    return shown.rename(columns={"lr_chosen": "chosen", "n_diverged": "diverged"})


def protocol_line(results: SweepResults) -> str:
    seeds = sorted(set(results.table["n_seeds"].tolist())) or [0]
    at_best = (" at each trial's epoch of lowest validation error (its best epoch), where the reported number is "
               "also taken" if results.select_lr_by.endswith("_at_best_val") else "")
    return (f"Median over {'/'.join(map(str, seeds))} {'seed' if seeds == [1] else 'seeds'} per (activation, dropout, lr); a seed whose loss became "
            f"NaN or inf (diverged) is left out, and a configuration where most seeds diverged is never chosen. "
            f"The lr is chosen per (activation, dropout) by the lowest median {results.select_lr_by}{at_best} "
            f"(validation data, never test). Errors in %, losses are mean cross-entropy (nats), or mean squared "
            f"error where the network reconstructs its input.")


def _execution(results: SweepResults) -> dict:
    """The spec's execution settings that reports show, with their defaults (older specs lack some)."""
    execution = (results.spec or {}).get("execution", {})
    return {k: execution.get(k, default) for k, default in (("mode", "per_trial"), ("dtype", "fp32"), ("compile", False))}


def execution_line(results: SweepResults) -> str:
    """How the trials ran, where that changes their numbers: the matmul precision (execution.dtype)."""
    execution = _execution(results)
    dtype, mode = execution["dtype"], execution["mode"]
    how = {"fp32": "fp32", "tf32": "TF32 matmuls on a GPU (fp32 elsewhere)",
           "bf16": "bf16 matmuls (autocast), fp32 master weights and optimiser state: an exploratory precision "
                   "(docs/speed.md measures its cost)"}[dtype]
    if results.sources:  # exports: their sweeps may have run per trial or fused (the sources table says which)
        return f"Precision: {how}."
    packed = "fused packs" + (", compiled" if execution["compile"] else "") if mode == "fused" else "one trial each"
    return f"Precision: {how}; {packed}."


def paper_terms_table(results: SweepResults) -> pd.DataFrame:
    """The reported number per activation (and dropout) beside the paper's."""
    rows = reported_rows(results.runs, results.table, results.spec)
    at_best = results.spec.get("protocol", {}).get("report_epoch") == "best_val_epoch"
    return pd.DataFrame([{
        "activation": r.activation, "dropout": r.dropout, "chosen lr": "diverged" if r.diverged else f"{r.lr:g}",
        "metric": r.metric, "ours (median)": "diverged" if r.diverged else format_value(r.metric, r.median),
        "interval (coverage)": format_interval(r.metric, r.ci_low, r.ci_high, r.ci_coverage),
        **({"best epoch (median)": format_value("best_val_epoch", r.best_val_epoch)} if at_best else {}),
        "seeds": r.n_seeds, "diverged": r.n_diverged, "paper": format_value(r.metric, r.paper)} for r in rows])


def family(results: SweepResults) -> Family:
    """The sweep's claims, decided once per results: every table, line and look of a report reads
    the same decision."""
    if results.family is None:
        results.family = decide_family(results.runs, results.table, results.spec)
    return results.family


def format_interval(metric: str, low: float, high: float, coverage: float) -> str:
    """An interval as reports print it, with the coverage its method has (never a bare "95%")."""
    if low is None or pd.isna(low):
        return "–"
    return f"[{format_value(metric, low)}, {format_value(metric, high)}] ({coverage:.1%})".replace(".0%)", "%)")


def _difference(metric: str, value: float) -> str:
    if value is None or pd.isna(value):
        return "–"
    text = format_value(metric, abs(value))
    return ("−" if value < 0 else "+") + text


def _p(value: float | None) -> str:
    return "–" if value is None or pd.isna(value) else f"{value:.3g}"


def _verdict_rows(found: list[Verdict]) -> pd.DataFrame:
    rows = []
    for v in found:
        e, metric = v.effect, v.metric
        rows.append({
            "claim": v.claim + (f" ({v.where})" if v.where else ""),
            **({"paper": f"{format_value(metric, v.paper[0])} vs {format_value(metric, v.paper[1])}"}
               if v.paper[0] is not None else {}),
            "ours (medians)": f"{format_value(metric, v.ours[0])} vs {format_value(metric, v.ours[1])}",
            "mean paired difference [95% t]": ("–" if e is None or e.n < 2 else
                                               f"{_difference(metric, e.mean_difference)} "
                                               f"[{_difference(metric, e.mean_interval.low)}, "
                                               f"{_difference(metric, e.mean_interval.high)}]"),
            "ratio": "–" if e is None or pd.isna(e.ratio) else f"{e.ratio:.3f}",
            "P(better on a seed) [95%]": ("–" if e is None or not e.n else
                                          f"{e.p_improvement:.2f} [{e.p_improvement_interval.low:.2f}, "
                                          f"{e.p_improvement_interval.high:.2f}]"),
            "seeds": v.n_pairs,
            "p (Holm)": f"{_p(v.p_value)} ({_p(v.p_adjusted)})",
            "±δ: TOST p (adjusted)": ("–" if v.delta is None else
                                      f"±{format_value(metric, v.delta)}: {_p(v.p_equivalent)} ({_p(v.p_equivalent_adjusted)})"),
            "verdict": v.verdict,
            "to decide": v.seeds_needed})
    return pd.DataFrame(rows)


def verdicts_table(results: SweepResults) -> pd.DataFrame:
    """One row per ordering the paper reports with numbers: ours, the paired comparison, the verdict."""
    return _verdict_rows(family(results).numbers)


def claim_verdicts_table(results: SweepResults) -> pd.DataFrame:
    """One row per pair of each ranking claim (an ordering the paper shows without numbers)."""
    return _verdict_rows(family(results).claims)


def _delta_words(protocol: dict) -> str:
    why = protocol.get("smallest_effect_why")
    return (f"δ = {protocol.get('smallest_effect', 0.02):.1%} of the other's median, the spec's smallest effect of "
            f"interest" + (f": {why}" if why else ", its default, set before the data"))


def verdicts_line(results: SweepResults) -> str:
    """How the verdicts below are decided, with the family's size and the spec's smallest effect."""
    protocol = (results.spec or {}).get("protocol", {})
    found = family(results)
    tested = sum(v.verdict != "diverged" for v in found.numbers + found.claims)
    subject = ("Hypotheses of this experiment, not claims of the papers" if (results.spec or {}).get("paper") == "custom"
               else "Verdicts")
    plan = (results.spec or {}).get("until_decided")
    if plan:
        return (f"{subject}, seeds until decided: the {tested} claims below are one family, looked at after the spec's seeds and after "
                f"each round of {plan['seeds_per_round']} more (up to {plan['max_seeds']}); only the configurations "
                f"of undecided claims got more seeds, and the lr was chosen again at every look. Each claim spends "
                f"its share of alpha = {protocol.get('alpha', 0.05):g} over the looks (Lan–DeMets, O'Brien–Fleming "
                f"type); a decided claim's share goes to the others (Holm). A claim is also decided \"equivalent\" "
                f"where TOST shows its mean paired difference within ±δ ({_delta_words(protocol)}), with its own "
                f"boundary at each look. The table of looks gives each claim's paired t-test p against the level of "
                f"that look (✓: decided there). docs/statistics.md")
    return (f"{subject}: each claim is a "
            f"paired comparison on the seeds both sides share (the difference per seed; docs/statistics.md). The "
            f"{tested} claims below are one family: a claim is decided when its Holm-adjusted paired t-test p is "
            f"below {protocol.get('alpha', 0.05):g} (reproduced: the paper's order; not reproduced: the opposite "
            f"order), never from intervals that fail to overlap; \"equivalent\" when its TOST shows the mean paired "
            f"difference within ±δ ({_delta_words(protocol)}), adjusted with the order tests in one family (Holm's "
            f"step-down, Shaffer's counts: at most one of a claim's two hypotheses can be true). "
            f"A \"≤\" claim (ties or outperforms) is tested "
            f"against a margin of {protocol.get('smallest_effect', 0.02):.0%} of the other's median. An undecided "
            f"claim says how many seeds would decide it with 80% power at the observed effect and spread.")


def paper_terms_markdown(results: SweepResults) -> list[str]:
    """The reported number per activation beside the paper's, and the verdicts on its claims."""
    if not results.spec or not len(results.table):
        return []
    lines = ["## In the paper's terms", "", paper_terms_table(results).to_markdown(index=False), "",
             "Medians over seeds with their order-statistic interval and the coverage it has (the widest interval of "
             "n values, [min, max], covers the median with probability 1 − 2/2ⁿ: 75% with 3 seeds, 93.8% with 5).",
             "", verdicts_line(results), ""]
    found = verdicts_table(results)
    if len(found):
        lines += [found.to_markdown(index=False), ""]
    claims = results.spec.get("claims", [])
    if claims:
        lines += ["Claims of the paper for this experiment: " + " ".join(claims), ""]
    ranked = claim_verdicts_table(results)
    if len(ranked):
        lines += [*claim_sources(results.spec),
                  "Orderings the paper shows (lower is better; at the configuration chosen on validation unless a "
                  "panel is named):", "", ranked.to_markdown(index=False), ""]
    looks = looks_table(results)
    if len(looks):
        lines += ["### Looks (seeds until decided)", "", looks.to_markdown(index=False), ""]
    return lines


def looks_table(results: SweepResults) -> pd.DataFrame:
    """The looks of an until_decided sweep: per look its seeds and each claim's p against its level."""
    sequential = family(results).sequential
    return sequential.looks_table() if sequential is not None else pd.DataFrame()


def claim_sources(spec: dict) -> list[str]:
    """Each ranking claim in the paper's words, where the paper makes it, and how it is tested."""
    lines = []
    for claim in spec.get("ranking_claims", []):
        if not (claim.get("words") or claim.get("source")):
            continue
        against = ", ".join(claim.get("against") or []) or "each other activation"
        test = ("no worse than" if claim.get("kind") == "ties_or_better" else "lower than")
        lines.append(f"- {claim.get('source') or 'the paper'}: “{claim.get('words', '')}”: tested as "
                     f"{claim['best']} {test} {against} on {claim.get('metric') or 'the headline metric'}"
                     + (f" ({claim['over'].replace('_', ' ')})" if claim.get("over", "final") != "final" else "")
                     + (", at every lr" if claim.get("at_every_lr") else ""))
    return [*lines, ""] if lines else []


LEARNED = "learned_"  # workers.activations.learned_parameters: learned_<param>_<layer>


def learned_parameters_table(results: SweepResults) -> pd.DataFrame:
    """Learnable activation parameters at the end of training, per configuration (median over its
    finished seeds) and layer: one row per activation, dropout, lr and parameter, layers as columns."""
    runs = results.runs
    columns = [c for c in runs.columns if c.startswith(LEARNED)]
    if not columns:
        return pd.DataFrame()
    finished = runs[(runs["status"] == "FINISHED") & ~runs["diverged"].astype(bool)]
    rows = []
    for (activation, dropout, lr), group in finished.groupby(["activation", "dropout", "lr"], sort=True):
        found = {c: group[c].median() for c in columns if group[c].notna().any()}
        for param in sorted({c[len(LEARNED):].rsplit("_", 1)[0] for c in found}):
            layers = {f"layer {c.rsplit('_', 1)[1]}": f"{v:.4g}" for c, v in found.items()
                      if c[len(LEARNED):].rsplit("_", 1)[0] == param}
            rows.append({"activation": activation, "dropout": dropout, "lr": f"{lr:g}", "parameter": param,
                         "seeds": len(group), **dict(sorted(layers.items(), key=lambda kv: int(kv[0].split()[1])))})
    return pd.DataFrame(rows)


def learned_parameters_markdown(results: SweepResults) -> list[str]:
    table = learned_parameters_table(results)
    if not len(table):
        return []
    return ["## Learned activation parameters (final value, median over seeds; mean over units where per unit)", "",
            table.to_markdown(index=False), ""]


def origin_line(results: SweepResults) -> str:
    """Where the numbers live: the sweep's MLflow runs, or the exports a record was built from."""
    if results.sources:
        return f"Built from the exports of sweeps {', '.join(s['sweep'] for s in results.sources)} (one row per trial and epoch)."
    return f"MLflow: experiment {results.experiment_id}, parent run {results.parent_run_id}."


def to_markdown(results: SweepResults) -> str:
    task = (results.spec or {}).get("task")
    readable = readable_table(results.table, task)
    chosen = readable[results.table["lr_chosen"]].drop(columns=["chosen"])
    retrained = []
    if len(results.retrained):
        retrained = ["## Retrained on all the training data with the chosen lr (the reported number)", "",
                     readable_table(results.retrained, task).to_markdown(index=False), ""]
    return "\n".join([
        f"# {results.experiment}: sweep {results.sweep_id}", "",
        protocol_line(results), "", execution_line(results), "",
        *paper_terms_markdown(results),
        "## Chosen learning rate per activation and dropout", "",
        chosen.to_markdown(index=False), "",
        *retrained,
        *learned_parameters_markdown(results),
        "## Every configuration", "",
        readable.to_markdown(index=False), "",
        origin_line(results), "",
    ])


def to_json(results: SweepResults) -> dict:
    reported = reported_rows(results.runs, results.table, results.spec) if results.spec and len(results.table) else []
    numbers, claimed = family(results).numbers, family(results).claims
    return {"sweep_id": results.sweep_id, "experiment": results.experiment,
            "protocol": {"aggregate": "median", "select_lr_by": results.select_lr_by,
                         "headline_metric": results.headline_metric},
            "execution": _execution(results),
            "mlflow": {"experiment_id": results.experiment_id, "parent_run_id": results.parent_run_id},
            "results": results.rows(), "retrained": results.rows(results.retrained),
            "reported": _finite([asdict(r) for r in reported]), "verdicts": _finite([asdict(v) for v in numbers]),
            "claim_verdicts": _finite([asdict(v) for v in claimed]),
            "learned_parameters": learned_parameters_table(results).to_dict(orient="records"),
            **({"sources": results.sources} if results.sources else {})}


def _finite(value):
    """NaN → None, recursively: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
