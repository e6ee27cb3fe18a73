"""A sweep in the paper's terms: the reported number per activation, with the paper's beside it,
and a verdict on each ordering the paper reports.

Per activation (and per dropout rate where the paper reports them apart), the configuration is
the one the protocol chooses on validation: the lr (and, where the spec tunes it, the dropout)
with the best median validation metric. Its reported number is the spec's ``headline_metric``
(from the retrained runs where the protocol retrains on all the data), summarised by the median
over seeds with a bootstrap 95% interval. An activation whose every configuration mostly
diverged has no reported number: its row says so.

Orderings come from the paper's numbers (GELU 12.57% < ReLU 12.67%) and from its ranking claims,
the orderings a paper shows in a figure without numbers (GELU Fig. 2: the lowest training loss).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats

from service.reporting.aggregate import claim_column, mostly_diverged, selection_metric


MIN_SEEDS_FOR_INTERVALS = 3


@dataclass
class ReportedRow:
    activation: str
    dropout: float
    lr: float | None  # None: every lr of this activation mostly diverged
    metric: str
    median: float
    ci_low: float
    ci_high: float
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
    verdict: str  # reproduced, not reproduced, inconclusive, diverged
    ours: tuple[float, float]  # medians of (better, worse)
    paper: tuple[float | None, float | None]
    p_value: float | None  # paired t-test across the seeds both have
    n_pairs: int
    where: str = ""  # "dropout 0.5", "lr 0.001": the panel of the figure the pair belongs to


def median_with_interval(values: list[float], seed: int = 0) -> tuple[float, float, float]:
    """The median and a percentile-bootstrap 95% interval of the median (NaN with one value)."""
    data = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    if len(data) == 0:
        return math.nan, math.nan, math.nan
    median = float(np.median(data))
    if len(data) < 2 or np.all(data == data[0]):
        return median, (median if len(data) > 1 else math.nan), (median if len(data) > 1 else math.nan)
    found = stats.bootstrap((data,), np.median, confidence_level=0.95, n_resamples=2000, method="percentile",
                            rng=np.random.default_rng(seed))
    return median, float(found.confidence_interval.low), float(found.confidence_interval.high)


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


def _seed_values(runs: pd.DataFrame, activation: str, dropout: float, lr: float, metric: str) -> dict[int, float]:
    mine = runs[(runs["activation"] == activation) & (runs["dropout"] == dropout) & (runs["lr"] == lr)
                & (runs["status"] == "FINISHED") & ~runs["diverged"].astype(bool)]
    if metric not in mine:
        return {}
    return {int(r.seed): float(getattr(r, metric)) for r in mine.itertuples() if not pd.isna(getattr(r, metric))}


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
    rows = []
    for config in chosen_configs(table, spec).itertuples():
        per_seed = _seed_values(source, config.activation, config.dropout, config.lr, metric)
        median, low, high = median_with_interval(list(per_seed.values()))
        epoch = getattr(config, "best_val_epoch", None) if protocol.get("report_epoch") == "best_val_epoch" else None
        rows.append(ReportedRow(config.activation, float(config.dropout), float(config.lr), metric, median, low, high,
                                len(per_seed), paper_number(spec.get("paper_numbers", []), config.activation,
                                                            float(config.dropout), spec.get("dataset")),
                                per_seed, int(config.n_diverged),
                                None if epoch is None or pd.isna(epoch) else float(epoch)))
    # an activation (or activation and dropout) with no eligible configuration: every lr mostly diverged
    reported = {(r.activation, r.dropout if split else None) for r in rows}
    for (activation, dropout), group in table.groupby(["activation", "dropout"], sort=True):
        if (activation, dropout if split else None) in reported or not mostly_diverged(group).all():
            continue
        reported.add((activation, dropout if split else None))
        rows.append(ReportedRow(activation, float(dropout), None, metric, math.nan, math.nan, math.nan, 0,
                                paper_number(spec.get("paper_numbers", []), activation, float(dropout),
                                             spec.get("dataset")), {}, int(group["n_diverged"].sum())))
    return sorted(rows, key=lambda r: (r.activation, r.dropout))


def compare(better: ReportedRow, worse: ReportedRow, claim: str, paper: tuple, where: str = "") -> Verdict:
    """Is ``better`` lower than ``worse`` (metrics here are lower-is-better)?

    Reproduced: same order, and the 95% intervals are apart or a paired t-test across the seeds
    both have gives p < 0.05. Not reproduced: the opposite order on the same evidence.
    Inconclusive otherwise; diverged where one side has no number because its seeds diverged.
    Intervals count only with at least :data:`MIN_SEEDS_FOR_INTERVALS` seeds a side: the
    bootstrap interval of two values is no more than their range.
    """
    if better.diverged or worse.diverged:
        return Verdict(claim, better.activation, worse.activation, "diverged", (better.median, worse.median), paper,
                       None, 0, where)
    seeds = sorted(set(better.per_seed) & set(worse.per_seed))
    p_value = None
    if len(seeds) >= 2:
        differences = [better.per_seed[s] - worse.per_seed[s] for s in seeds]
        if np.ptp(differences) > 0:
            p_value = float(stats.ttest_rel([better.per_seed[s] for s in seeds],
                                            [worse.per_seed[s] for s in seeds]).pvalue)
    same_order = better.median < worse.median
    enough = min(better.n_seeds, worse.n_seeds) >= MIN_SEEDS_FOR_INTERVALS
    apart = enough and (better.ci_high < worse.ci_low or worse.ci_high < better.ci_low)
    decisive = apart or (p_value is not None and p_value < 0.05)
    verdict = ("reproduced" if same_order else "not reproduced") if decisive else "inconclusive"
    return Verdict(claim, better.activation, worse.activation, verdict, (better.median, worse.median), paper,
                   p_value, len(seeds), where)


def verdicts(rows: list[ReportedRow]) -> list[Verdict]:
    """For each pair of rows whose paper numbers differ: does our sweep order them as the paper does?"""
    found = []
    with_paper = [r for r in rows if r.paper is not None]
    split = len({r.activation for r in with_paper}) < len(with_paper)  # rows per (activation, dropout)
    for a, b in combinations(with_paper, 2):
        if a.activation == b.activation or a.paper == b.paper or (split and a.dropout != b.dropout):
            continue
        better, worse = (a, b) if a.paper < b.paper else (b, a)
        found.append(compare(better, worse, f"{better.activation} < {worse.activation} on {better.metric}",
                             (better.paper, worse.paper), f"dropout {better.dropout:g}" if split else ""))
    return found


def claim_verdicts(runs: pd.DataFrame, table: pd.DataFrame, spec: dict) -> list[Verdict]:
    """For each ranking claim of the spec, a verdict per pair (its ``best`` against each other
    activation): at the configurations the protocol reports, or at every lr (``at_every_lr``)."""
    headline = spec.get("protocol", {}).get("headline_metric", "test_error")
    found = []
    for claim in spec.get("ranking_claims", []):
        column = claim_column(claim, headline)
        if claim.get("at_every_lr"):
            groups = [(f"lr {lr:g}, dropout {d:g}", _rows_at(runs, table, lr, d, column))
                      for (lr, d), _ in table.groupby(["lr", "dropout"], sort=True)]
            groups = [(where.split(",")[0] if len(table["dropout"].unique()) == 1 else where, rows)
                      for where, rows in groups]
        else:
            rows = reported_rows(runs, table, spec, metric=column)
            dropouts = sorted({r.dropout for r in rows}) if split_by_dropout(spec) else [None]
            groups = [(f"dropout {d:g}" if d is not None else "", [r for r in rows if d is None or r.dropout == d])
                      for d in dropouts]
        for where, rows in groups:
            best = next((r for r in rows if r.activation == claim["best"]), None)
            for other in (r for r in rows if r.activation != claim["best"]):
                if best is None:
                    continue
                found.append(compare(best, other, f"{best.activation} < {other.activation} on {column}",
                                     (None, None), where))
    return found


def _rows_at(runs: pd.DataFrame, table: pd.DataFrame, lr: float, dropout: float, metric: str) -> list[ReportedRow]:
    rows = []
    for config in table[(table["lr"] == lr) & (table["dropout"] == dropout)].itertuples():
        per_seed = _seed_values(runs[runs["phase"] == "grid"], config.activation, dropout, lr, metric)
        median, low, high = median_with_interval(list(per_seed.values()))
        diverged = bool(config.n_diverged > config.n_seeds)
        rows.append(ReportedRow(config.activation, float(dropout), None if diverged else float(lr), metric, median, low,
                                high, len(per_seed), None, per_seed, int(config.n_diverged)))
    return rows
