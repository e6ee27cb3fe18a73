"""A sweep in the paper's terms: the reported number per activation, with the paper's beside it,
and a verdict on each ordering the paper reports.

Per activation (and per dropout rate where the paper reports them apart), the configuration is
the one the protocol chooses on validation: the lr (and, where the spec tunes it, the dropout)
with the best median validation metric. Its reported number is the spec's ``headline_metric``
(from the retrained runs where the protocol retrains on all the data), summarised by the median
over seeds with its order-statistic interval and the coverage that interval has. An activation
whose every configuration mostly diverged has no reported number: its row says so.

Orderings come from the paper's numbers (GELU 12.57% < ReLU 12.67%) and from its ranking claims,
the orderings a paper shows in a figure without numbers (GELU Fig. 2: the lowest training loss).
Each is a paired comparison over seeds; the claims of a sweep are one family, decided together
with Holm's adjustment (service.reporting.statistics, docs/statistics.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import pandas as pd

from service.reporting import statistics as st
from service.reporting.aggregate import claim_column, mostly_diverged, selection_metric


@dataclass
class ReportedRow:
    activation: str
    dropout: float
    lr: float | None  # None: every lr of this activation mostly diverged
    metric: str
    median: float
    ci_low: float
    ci_high: float
    ci_coverage: float  # of the order-statistic interval [ci_low, ci_high] (75% with 3 seeds, 93.8% with 5)
    n_seeds: int
    paper: float | None
    per_seed: dict[int, float]
    n_diverged: int = 0
    best_val_epoch: float | None = None  # median over seeds, where the number is taken at the best epoch

    @property
    def diverged(self) -> bool:
        return self.lr is None


@dataclass
class Verdict:
    claim: str  # "gelu < relu on test_error"
    better: str
    worse: str
    verdict: str  # reproduced, not reproduced, equivalent, inconclusive, diverged
    ours: tuple[float, float]  # medians of (better, worse)
    paper: tuple[float | None, float | None]
    p_value: float | None  # the claim's test: paired t-test across the seeds both have (raw)
    n_pairs: int
    where: str = ""  # "dropout 0.5", "lr 0.001": the panel of the figure the pair belongs to
    metric: str = ""  # what is compared (a column of the runs)
    dropout: float | None = None  # the panel's dropout rate, where the claim is made per dropout rate
    kind: str = "lower"  # lower, or ties_or_better (non-inferiority at margin)
    words: str = ""  # the paper's words for the claim
    source: str = ""  # where the paper makes it
    margin: float | None = None  # ties_or_better: the absolute margin (smallest_effect × the other's median)
    p_adjusted: float | None = None  # Holm, over the sweep's family of claims
    effect: st.PairedComparison | None = None
    seeds_needed: str = ""  # an undecided claim: how many seeds would decide it, or why none would
    towards: str = ""  # the order the test leans to: "reproduced" or "not reproduced"
    delta: float | None = None  # a "lower" claim: the equivalence margin ±δ (smallest_effect × the other's median)
    p_equivalent: float | None = None  # TOST of |mean difference| < δ (raw)
    p_equivalent_adjusted: float | None = None  # with the direction tests, over the family (statistics.family_adjusted_p)


def median_with_interval(values: list[float]) -> tuple[float, float, float, float]:
    """The median, its order-statistic interval and that interval's coverage (NaN with one value)."""
    median, interval = st.median_interval(values)
    return median, interval.low, interval.high, interval.coverage


def paper_number(paper_numbers: list[dict], activation: str, dropout: float, dataset: str | None) -> float | None:
    """The paper's number for this activation (and dropout, and dataset, where the paper gives them apart)."""
    for number in paper_numbers:
        if (number["activation"] == activation and number.get("dropout") in (None, dropout)
                and number.get("dataset") in (None, dataset)):
            return number["value"]
    return None


def split_by_dropout(spec: dict) -> bool:
    """The paper reports dropout rates apart where the grid has several and none is tuned away
    (GELU Fig. 2: with and without dropout); where ``dropout_for`` is set, dropout is tuned like the lr."""
    return len(spec.get("dropout", [0.0])) > 1 and not spec.get("dropout_for")


def _seed_values(runs: pd.DataFrame, metric: str) -> dict[tuple[str, float, float], dict[int, float]]:
    """Per (activation, dropout, lr): each seed's ``metric`` over the finished runs that did not
    diverge, in one pass over ``runs`` (a report looks up every configuration of every claim)."""
    found: dict[tuple[str, float, float], dict[int, float]] = {}
    if metric not in runs:
        return found
    kept = runs[(runs["status"] == "FINISHED") & ~runs["diverged"].astype(bool) & runs[metric].notna()]
    for activation, dropout, lr, seed, value in zip(kept["activation"], kept["dropout"], kept["lr"], kept["seed"],
                                                    kept[metric]):
        found.setdefault((activation, float(dropout), float(lr)), {})[int(seed)] = float(value)
    return found


def chosen_configs(table: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """The grid rows the protocol reports: the lr chosen per (activation, dropout), and where dropout
    is tuned, the best of those per activation (by the same validation metric)."""
    select_by = selection_metric(spec.get("protocol", {}))
    chosen = table[table["lr_chosen"]]
    if not split_by_dropout(spec) and chosen["activation"].duplicated().any() and select_by in chosen:
        chosen = chosen.loc[chosen.groupby("activation")[select_by].idxmin().dropna()]
    return chosen


def reported_rows(runs: pd.DataFrame, table: pd.DataFrame, spec: dict, metric: str | None = None) -> list[ReportedRow]:
    """One row per activation (per activation and dropout when the paper splits by dropout), with
    ``metric`` (default: the headline metric) at the configuration the protocol chooses."""
    protocol = spec.get("protocol", {})
    metric = metric or protocol.get("headline_metric", "test_error")
    split = split_by_dropout(spec)
    retrained = runs[runs["phase"] == "retrain"]
    source = retrained if len(retrained) else runs[runs["phase"] == "grid"]
    rows, values = [], _seed_values(source, metric)
    for config in chosen_configs(table, spec).itertuples():
        per_seed = dict(values.get((config.activation, float(config.dropout), float(config.lr)), {}))
        median, low, high, coverage = median_with_interval(list(per_seed.values()))
        epoch = getattr(config, "best_val_epoch", None) if protocol.get("report_epoch") == "best_val_epoch" else None
        rows.append(ReportedRow(config.activation, float(config.dropout), float(config.lr), metric, median, low, high,
                                coverage, len(per_seed), paper_number(spec.get("paper_numbers", []), config.activation,
                                                            float(config.dropout), spec.get("dataset")),
                                per_seed, int(config.n_diverged),
                                None if epoch is None or pd.isna(epoch) else float(epoch)))
    # an activation (or activation and dropout) with no eligible configuration: every lr mostly diverged
    reported = {(r.activation, r.dropout if split else None) for r in rows}
    for (activation, dropout), group in table.groupby(["activation", "dropout"], sort=True):
        if (activation, dropout if split else None) in reported or not mostly_diverged(group).all():
            continue
        reported.add((activation, dropout if split else None))
        rows.append(ReportedRow(activation, float(dropout), None, metric, math.nan, math.nan, math.nan, 0.0, 0,
                                paper_number(spec.get("paper_numbers", []), activation, float(dropout),
                                             spec.get("dataset")), {}, int(group["n_diverged"].sum())))
    return sorted(rows, key=lambda r: (r.activation, r.dropout))


def compare(better: ReportedRow, worse: ReportedRow, claim: str, paper: tuple, where: str = "", *,
            dropout: float | None = None, kind: str = "lower", smallest_effect: float = 0.02, words: str = "",
            source: str = "") -> Verdict:
    """The paired comparison of ``better`` and ``worse`` on the seeds both have, and its test's raw
    p-value; the verdict comes from :func:`decide`, over the family the claim belongs to.

    ``lower``: a two-sided paired t-test of mean difference 0; its sign says which order.
    Its equivalence test, TOST at ±δ with δ = ``smallest_effect`` × the other's median, decides
    "equivalent" where the difference is shown too small to matter.
    ``ties_or_better``: the margin is ``smallest_effect`` × the other's median; the claim holds when
    the mean difference is decided below the margin (non-inferiority) and fails when decided above
    it, each one-sided at alpha/2 (the p-value doubles the smaller one). A side whose seeds all
    diverged has no number: the verdict is "diverged".
    """
    if better.diverged or worse.diverged:
        return Verdict(claim, better.activation, worse.activation, "diverged", (better.median, worse.median), paper,
                       None, 0, where, better.metric, dropout, kind, words, source)
    effect = st.paired_comparison(better.per_seed, worse.per_seed)
    margin, towards, p_value = None, "", None
    if kind == "ties_or_better":
        margin = smallest_effect * abs(worse.median)
        below = st.paired_t_p(effect.differences, margin, "less")
        above = st.paired_t_p(effect.differences, margin, "greater")
        if not math.isnan(below):
            p_value = min(1.0, 2 * min(below, above))
            towards = "reproduced" if below <= above else "not reproduced"
    elif not math.isnan(effect.p_value):
        p_value = effect.p_value
        towards = "reproduced" if effect.mean_difference < 0 else "not reproduced"
    delta, p_equivalent = None, None
    if kind == "lower":
        delta = smallest_effect * abs(worse.median)
        tost = st.tost_p(effect.differences, delta)
        p_equivalent = None if math.isnan(tost) else tost
    return Verdict(claim, better.activation, worse.activation, "pending", (better.median, worse.median), paper,
                   p_value, effect.n, where, better.metric, dropout, kind, words, source, margin, None, effect, "",
                   towards, delta, p_equivalent)


def decide(found: list[Verdict], alpha: float = st.ALPHA, smallest_effect: float = 0.02,
           explain: bool = True) -> list[Verdict]:
    """Decide a family of claims. Each "lower" claim holds two hypotheses, no difference (its
    direction test) and a difference of at least δ (its TOST); a "ties or better" claim one. They are
    adjusted together (statistics.family_adjusted_p: closed testing, the direction tests holding
    95% of alpha with Holm's step-down, the equivalence tests 5%). A claim whose direction test's
    adjusted p is below ``alpha`` is decided in the order that test leans to; else one whose TOST's
    is, "equivalent"; else it is inconclusive and says how many seeds would decide it with 80% power
    (at the family's first-step level for each test). ``explain=False`` leaves that count out: the
    verdicts are the same, and a simulation of thousands of decisions spent most of its time on it."""
    tested = [v for v in found if v.verdict != "diverged"]
    direction, equivalence = st.family_adjusted_p(
        [math.nan if v.p_value is None else v.p_value for v in tested],
        [math.nan if v.p_equivalent is None else v.p_equivalent for v in tested])
    with_equivalence = sum(v.p_equivalent is not None for v in tested)
    direction_multiplier, equivalence_multiplier = st.split_multipliers(len(tested), with_equivalence)
    for v, p, q in zip(tested, direction, equivalence):
        v.p_adjusted = None if math.isnan(p) else p
        v.p_equivalent_adjusted = None if math.isnan(q) else q
        if v.p_adjusted is not None and v.p_adjusted < alpha:
            v.verdict, v.seeds_needed = v.towards, ""
        elif v.p_equivalent_adjusted is not None and v.p_equivalent_adjusted < alpha:
            v.verdict, v.seeds_needed = "equivalent", ""
        else:
            v.verdict, v.seeds_needed = "inconclusive", _seeds_needed(
                v, alpha / direction_multiplier, alpha / equivalence_multiplier, smallest_effect) if explain else ""
    return found


def _seeds_needed(v: Verdict, level: float, equivalence_level: float, smallest_effect: float) -> str:
    effect = v.effect
    if effect is None or effect.n < 2 or math.isnan(effect.spread):
        return "needs 3 or more seeds a side"
    distance = effect.mean_difference - (v.margin or 0.0)
    to_order = st.seeds_needed(distance, effect.spread, level)
    to_tie = (st.seeds_for_equivalence(effect.mean_difference, effect.spread, v.delta, equivalence_level)
              if v.delta and equivalence_level > 0 else None)
    if to_tie is not None and (to_order is None or to_tie < to_order):
        return f"needs about {to_tie} seeds to show equivalence within ±{v.delta:.3g}"
    return f"needs about {to_order} seeds" if to_order else "needs more than 1000 seeds"


def verdicts(rows: list[ReportedRow], smallest_effect: float = 0.02) -> list[Verdict]:
    """For each pair of rows whose paper numbers differ: does our sweep order them as the paper does?
    (Undecided: see :func:`decide`.)"""
    found = []
    with_paper = [r for r in rows if r.paper is not None]
    split = len({r.activation for r in with_paper}) < len(with_paper)  # rows per (activation, dropout)
    for a, b in combinations(with_paper, 2):
        if a.activation == b.activation or a.paper == b.paper or (split and a.dropout != b.dropout):
            continue
        better, worse = (a, b) if a.paper < b.paper else (b, a)
        found.append(compare(better, worse, f"{better.activation} < {worse.activation} on {better.metric}",
                             (better.paper, worse.paper), f"dropout {better.dropout:g}" if split else "",
                             dropout=better.dropout if split else None, smallest_effect=smallest_effect))
    return found


def claim_verdicts(runs: pd.DataFrame, table: pd.DataFrame, spec: dict) -> list[Verdict]:
    """For each ranking claim of the spec, a comparison per pair (its ``best`` against each other
    activation it names, or every other): at the configurations the protocol reports, or at every
    lr (``at_every_lr``). (Undecided: see :func:`decide`.)"""
    headline = spec.get("protocol", {}).get("headline_metric", "test_error")
    smallest_effect = spec.get("protocol", {}).get("smallest_effect", 0.02)
    found = []
    for claim in spec.get("ranking_claims", []):
        column = claim_column(claim, headline)
        if claim.get("at_every_lr"):  # (where, the panel's dropout, rows)
            one_dropout = len(table["dropout"].unique()) == 1
            values = _seed_values(runs[runs["phase"] == "grid"], column)
            groups = [(f"lr {lr:g}" if one_dropout else f"lr {lr:g}, dropout {d:g}", float(d),
                       _rows_at(values, configs, lr, d, column))
                      for (lr, d), configs in table.groupby(["lr", "dropout"], sort=True)]
        else:
            rows = reported_rows(runs, table, spec, metric=column)
            dropouts = sorted({r.dropout for r in rows}) if split_by_dropout(spec) else [None]
            groups = [(f"dropout {d:g}" if d is not None else "", d,
                       [r for r in rows if d is None or r.dropout == d]) for d in dropouts]
        against = set(claim.get("against") or [])
        kind = claim.get("kind", "lower")
        relation = "≤" if kind == "ties_or_better" else "<"
        for where, dropout, rows in groups:
            best = next((r for r in rows if r.activation == claim["best"]), None)
            for other in (r for r in rows if r.activation != claim["best"] and (not against or r.activation in against)):
                if best is None:
                    continue
                found.append(compare(best, other, f"{best.activation} {relation} {other.activation} on {column}",
                                     (None, None), where, dropout=dropout, kind=kind, smallest_effect=smallest_effect,
                                     words=claim.get("words", ""), source=claim.get("source", "")))
    return found


def _rows_at(values: dict, configs: pd.DataFrame, lr: float, dropout: float, metric: str) -> list[ReportedRow]:
    """One row per configuration of the table at (``lr``, ``dropout``), from the grid's ``values``."""
    rows = []
    for config in configs.itertuples():
        per_seed = dict(values.get((config.activation, float(dropout), float(lr)), {}))
        median, low, high, coverage = median_with_interval(list(per_seed.values()))
        diverged = bool(config.n_diverged > config.n_seeds)
        rows.append(ReportedRow(config.activation, float(dropout), None if diverged else float(lr), metric, median, low,
                                high, coverage, len(per_seed), None, per_seed, int(config.n_diverged)))
    return rows
