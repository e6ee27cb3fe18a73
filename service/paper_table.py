"""A sweep in the paper's terms: the reported number per activation, with the paper's beside it,
and a verdict on each ordering the paper reports.

Per activation (and per dropout rate where the paper reports them apart), the configuration is
the one the protocol chooses on validation: the lr (and, where the spec tunes it, the dropout)
with the best median validation metric. Its reported number is the spec's ``headline_metric``
(from the retrained runs where the protocol retrains on all the data), summarised by the median
over seeds with a bootstrap 95% interval.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats

LOWER_IS_BETTER = ("error", "loss")


@dataclass
class ReportedRow:
    activation: str
    dropout: float
    lr: float
    metric: str
    median: float
    ci_low: float
    ci_high: float
    n_seeds: int
    paper: float | None
    per_seed: dict[int, float]


@dataclass
class Verdict:
    claim: str  # "gelu < relu on test_error"
    better: str
    worse: str
    verdict: str  # reproduced, not reproduced, inconclusive
    ours: tuple[float, float]  # medians of (better, worse)
    paper: tuple[float, float]
    p_value: float | None  # paired t-test across the seeds both have
    n_pairs: int


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


def _paper_number(paper_numbers: list[dict], activation: str, dropout: float) -> float | None:
    for number in paper_numbers:
        if number["activation"] == activation and number.get("dropout") in (None, dropout):
            return number["value"]
    return None


def reported_rows(runs: pd.DataFrame, table: pd.DataFrame, spec: dict) -> list[ReportedRow]:
    """One row per activation (per activation and dropout when the paper splits by dropout)."""
    protocol = spec.get("protocol", {})
    metric, select_by = protocol.get("headline_metric", "test_error"), protocol.get("select_lr_by", "val_loss")
    # The paper splits by dropout where the grid has several rates and none is tuned away (GELU
    # Fig. 2: with and without dropout); where dropout_for is set, dropout is tuned like the lr.
    split = len(spec.get("dropout", [0.0])) > 1 and not spec.get("dropout_for")
    chosen = table[table["lr_chosen"]]
    if not split:
        chosen = chosen.loc[chosen.groupby("activation")[select_by].idxmin().dropna()]
    retrained = runs[runs["phase"] == "retrain"]
    source = retrained if len(retrained) else runs[runs["phase"] == "grid"]
    rows = []
    for config in chosen.itertuples():
        mine = source[(source["activation"] == config.activation) & (source["dropout"] == config.dropout)
                      & (source["lr"] == config.lr) & (source["status"] == "FINISHED")]
        per_seed = {int(r.seed): float(getattr(r, metric)) for r in mine.itertuples() if metric in mine}
        median, low, high = median_with_interval(list(per_seed.values()))
        rows.append(ReportedRow(config.activation, float(config.dropout), float(config.lr), metric, median, low, high,
                                len(per_seed), _paper_number(spec.get("paper_numbers", []), config.activation,
                                                             float(config.dropout)), per_seed))
    return rows


def verdicts(rows: list[ReportedRow]) -> list[Verdict]:
    """For each pair of rows whose paper numbers differ: does our sweep order them as the paper does?

    Reproduced: same order, and the intervals are apart or the paired t-test across seeds gives
    p < 0.05. Not reproduced: the opposite order with the same evidence. Inconclusive otherwise.
    """
    found = []
    lower_better = any(word in (rows[0].metric if rows else "") for word in LOWER_IS_BETTER)
    with_paper = [r for r in rows if r.paper is not None]
    split = len({r.activation for r in with_paper}) < len(with_paper)  # rows per (activation, dropout)
    for a, b in combinations(with_paper, 2):
        if a.activation == b.activation or a.paper == b.paper or (split and a.dropout != b.dropout):
            continue
        better, worse = (a, b) if (a.paper < b.paper) == lower_better else (b, a)
        seeds = sorted(set(better.per_seed) & set(worse.per_seed))
        p_value = None
        if len(seeds) >= 2:
            differences = [better.per_seed[s] - worse.per_seed[s] for s in seeds]
            if np.ptp(differences) > 0:
                p_value = float(stats.ttest_rel([better.per_seed[s] for s in seeds],
                                                [worse.per_seed[s] for s in seeds]).pvalue)
        same_order = (better.median < worse.median) == lower_better
        apart = better.ci_high < worse.ci_low or worse.ci_high < better.ci_low
        decisive = apart or (p_value is not None and p_value < 0.05)
        verdict = ("reproduced" if same_order else "not reproduced") if decisive else "inconclusive"
        relation = "<" if lower_better else ">"
        found.append(Verdict(f"{better.activation} {relation} {worse.activation} on {better.metric}", better.activation,
                             worse.activation, verdict, (better.median, worse.median), (better.paper, worse.paper),
                             p_value, len(seeds)))
    return found
