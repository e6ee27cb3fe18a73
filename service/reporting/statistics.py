"""The statistics behind every verdict (docs/statistics.md says what and why).

The unit is the paired difference per seed: two configurations trained on the same seed share the
initialisation stream, the data order and the dropout masks (Bouthillier et al., MLSys 2021), so
``d_i = a_i - b_i`` removes what the seed adds to both. Metrics are lower-is-better.

- Test: the paired t-test on the differences, two-sided, with a directional decision (the sign of
  the mean difference says which order was decided). Its false-decision rate is at most its level
  under normal, lognormal and heavy-tailed noise, paired or unpaired, from 3 to 20 seeds
  (tests/service/reporting/test_statistics.py simulates each).
- Intervals carry the coverage they have: the t-interval of the mean difference (95%), the
  order-statistic interval of a median (the widest one of n values covers 1 - 2/2^n: 75% with 3
  seeds, 93.8% with 5; never called 95% unless it is), the t-interval of the geometric mean ratio
  (log scale), and the Clopper–Pearson interval of P(a < b) on the same seed.
- Multiplicity: the claims of one record are one family, decided by closed testing (:func:`family_rejections`).
- A "ties or outperforms" claim is tested against a stated margin: non-inferiority, one-sided at
  alpha/2 (one half of TOST, the two one-sided tests of equivalence: the claim needs no more).
- A difference too small to matter is a decision too: "equivalent" where TOST (Schuirmann 1987;
  Lakens 2017) shows the mean paired difference within ±δ, δ the spec's smallest effect of
  interest. Each claim then holds two hypotheses, of which at most one can be true. The family's
  direction tests hold 95% of alpha and its equivalence tests 5%, each part with Holm's step-down,
  by closed testing with a claim's two tests at one level (:func:`family_rejections`).
- Power: the seeds a paired t-test needs for 80% power at the observed effect and spread.
- Seeds until decided: each claim spends its alpha over looks by the Lan–DeMets
  O'Brien–Fleming-type function; a look tests at the alpha spent since the last one, so the
  chance of any false decision over all looks is at most the sum, alpha (Bonferroni over looks,
  with Holm's recycling across claims: Maurer & Bretz 2013).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

ALPHA = 0.05  # the family-wise error rate of a record's verdicts
POWER = 0.80  # the power "seeds needed" aims at
# the share of a family's alpha its equivalence tests hold while a direction test is open (the rest is
# the direction tests'): docs/statistics.md, "One family", says why 5% and what it costs
EQUIVALENCE_SHARE = 0.05


# -- intervals -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    coverage: float  # the probability the method covers the true value (exact, or nominal for t)
    method: str


def _clean(values) -> np.ndarray:
    data = np.asarray(list(values), dtype=float)
    return data[~np.isnan(data)]


# Intervals, tests and power take a handful of distinct (n, level) pairs, and a report or a simulation
# asks for them thousands of times: scipy's distribution objects spend ~0.1 ms per call checking their
# arguments, so the values that depend only on counts are cached and power is searched with array calls
# (the same ufuncs, element by element: the same bits as one call per value).

@functools.lru_cache(maxsize=None)
def order_statistic_coverage(n: int, k: int) -> float:
    """The coverage of [x_(k), x_(n+1-k)] for the median of a continuous distribution."""
    return float(1 - 2 * stats.binom.cdf(k - 1, n, 0.5))


@functools.lru_cache(maxsize=None)
def _t_quantile(q: float, df: int) -> float:
    return float(stats.t.ppf(q, df))


@functools.lru_cache(maxsize=None)
def _normal_quantile(q: float) -> float:
    return float(stats.norm.ppf(q))


def median_interval(values, level: float = 0.95) -> tuple[float, Interval]:
    """The median and the distribution-free order-statistic interval for it: the narrowest
    [x_(k), x_(n+1-k)] whose coverage reaches ``level``, or, where no interval of n values can,
    the widest one ([min, max]) with the coverage it has (75% for 3 values, 93.8% for 5)."""
    data = np.sort(_clean(values))
    n = len(data)
    if n == 0:
        return math.nan, Interval(math.nan, math.nan, 0.0, "order statistics")
    median = float(np.median(data))
    if n == 1:
        return median, Interval(math.nan, math.nan, 0.0, "order statistics")
    k = 1
    while k + 1 <= n // 2 and order_statistic_coverage(n, k + 1) >= level:
        k += 1
    return median, Interval(float(data[k - 1]), float(data[n - k]), order_statistic_coverage(n, k),
                            "order statistics")


def t_interval(differences, level: float = 0.95) -> Interval:
    """The t-interval of the mean paired difference."""
    d = _clean(differences)
    if len(d) < 2:
        return Interval(math.nan, math.nan, 0.0, "t")
    half = _t_quantile(0.5 + level / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return Interval(float(d.mean() - half), float(d.mean() + half), level, "t")


@functools.lru_cache(maxsize=4096)
def clopper_pearson(successes: float, n: int, level: float = 0.95) -> Interval:
    """The exact binomial interval of a proportion (its coverage is at least ``level``)."""
    if n == 0:
        return Interval(math.nan, math.nan, 0.0, "Clopper-Pearson")
    k = successes
    low = 0.0 if k <= 0 else float(stats.beta.ppf((1 - level) / 2, k, n - k + 1))
    high = 1.0 if k >= n else float(stats.beta.ppf(0.5 + level / 2, k + 1, n - k))
    return Interval(low, high, level, "Clopper-Pearson")


# -- tests ---------------------------------------------------------------------------------------------

def paired_t_p(differences, null: float = 0.0, alternative: str = "two-sided") -> float:
    """The paired t-test's p-value for mean difference ``null`` (NaN where it cannot be computed:
    fewer than 2 pairs; all differences equal give 1 at the null and 0 elsewhere)."""
    d = _clean(differences)
    if len(d) < 2:
        return math.nan
    if np.ptp(d) == 0:
        side = {"two-sided": d[0] != null, "less": d[0] < null, "greater": d[0] > null}[alternative]
        return 0.0 if side else 1.0
    # scipy.stats.ttest_1samp's arithmetic step for step, so the same bits (the tests compare them),
    # without the argument handling it spends on every call (367 µs a call against 17 µs here)
    n = len(d)
    mean = np.mean(d)
    variance = np.mean((d - mean) ** 2) * (n / (n - 1))
    t = (mean - null) / np.sqrt(variance / n)
    if alternative == "less":
        return float(special.stdtr(n - 1, t))
    if alternative == "greater":
        return float(special.stdtr(n - 1, -t))
    return float(2 * special.stdtr(n - 1, -np.abs(t)))


def tost_p(differences, delta: float) -> float:
    """Schuirmann's TOST on the paired differences: the p-value of "the mean difference lies
    within ±``delta``", the larger of the two one-sided paired t-tests (mean ≤ −delta, mean ≥
    +delta). NaN with fewer than 2 pairs or no margin."""
    if not delta or delta <= 0 or math.isnan(delta):
        return math.nan
    return max(paired_t_p(differences, -delta, "greater"), paired_t_p(differences, delta, "less"))


# -- a family of claims: direction and equivalence together ---------------------------------------------

def split_multipliers(n_direction: int, n_equivalence: int, share: float = EQUIVALENCE_SHARE) -> tuple[float, float]:
    """What a direction and an equivalence p-value are multiplied by (the reciprocal of their share of
    alpha) in the local test of an intersection of ``n_direction`` direction and ``n_equivalence``
    equivalence hypotheses: the equivalence tests hold ``share`` of alpha and the direction tests
    the rest, each part split evenly; a part with no hypothesis there leaves all of alpha to the
    other (inf: that kind is not in the intersection)."""
    if n_equivalence == 0:
        return float(n_direction), math.inf
    if n_direction == 0:
        return math.inf, float(n_equivalence)
    return n_direction / (1 - share), n_equivalence / share


def _scaled(p: np.ndarray, multiplier: float) -> np.ndarray:
    """p × multiplier: the alpha from which a local test rejects with it (inf: never)."""
    return p * multiplier if math.isfinite(multiplier) else np.full(p.shape, np.inf)


def family_rejections(direction, equivalence, alpha=ALPHA, share: float = EQUIVALENCE_SHARE):
    """Which hypotheses a family of claims rejects: (direction rejected, equivalence rejected), boolean
    arrays shaped like the p-value arrays ``direction`` and ``equivalence`` (..., claims; NaN: the
    claim has no such test). ``alpha`` is a number, or an array over the leading axes.

    Each claim holds two hypotheses, "no difference" (its direction test) and "a difference of at
    least δ" (its TOST), of which at most one is true. Closed testing (Marcus, Peritz & Gabriel 1976):
    a hypothesis is rejected when every intersection of hypotheses that contains it is rejected by its
    local test, a weighted Bonferroni test with :func:`split_multipliers`. An intersection takes at most
    one hypothesis of each claim (the two cannot both be true: three-sided testing, Goeman, Solari &
    Stijnen 2010, so a claim's two tests share its level without a split). The weights depend only on
    how many hypotheses of each kind an intersection holds, so it is enough to ask, for each pair of
    counts, whether enough other claims keep a hypothesis of each kind unrejected at those weights.
    With no equivalence p-values it is Holm's procedure on the direction tests.
    """
    p_direction, p_equivalence = np.asarray(direction, dtype=float), np.asarray(equivalence, dtype=float)
    alpha = np.asarray(alpha, dtype=float)[..., None]
    has_direction, has_equivalence = ~np.isnan(p_direction), ~np.isnan(p_equivalence)
    claims = p_direction.shape[-1]
    direction_kept = np.zeros(np.broadcast_shapes(p_direction.shape, alpha.shape), dtype=bool)
    equivalence_kept = direction_kept.copy()
    for n_direction in range(claims + 1):
        for n_equivalence in range(claims + 1 - n_direction):
            if n_direction + n_equivalence == 0:
                continue
            m_direction, m_equivalence = split_multipliers(n_direction, n_equivalence, share)
            # a hypothesis can sit in such an intersection without its local test rejecting there
            stays_direction = has_direction & (_scaled(p_direction, m_direction) > alpha)
            stays_equivalence = has_equivalence & (_scaled(p_equivalence, m_equivalence) > alpha)
            # the other claims that can fill the rest: by direction only, by equivalence only, or either
            only_direction = stays_direction & ~stays_equivalence
            only_equivalence = stays_equivalence & ~stays_direction
            either = stays_direction & stays_equivalence
            a = only_direction.sum(-1, keepdims=True) - only_direction
            b = only_equivalence.sum(-1, keepdims=True) - only_equivalence
            c = either.sum(-1, keepdims=True) - either

            def fills(need_direction: int, need_equivalence: int) -> np.ndarray:
                return ((need_direction <= a + c) & (need_equivalence <= b + c)
                        & (need_direction + need_equivalence <= a + b + c))

            if n_direction:
                direction_kept |= stays_direction & fills(n_direction - 1, n_equivalence)
            if n_equivalence:
                equivalence_kept |= stays_equivalence & fills(n_direction, n_equivalence - 1)
    return has_direction & ~direction_kept, has_equivalence & ~equivalence_kept


def family_adjusted_p(direction: list[float], equivalence: list[float],
                      share: float = EQUIVALENCE_SHARE) -> tuple[list[float], list[float]]:
    """The adjusted p-values of :func:`family_rejections`: each hypothesis's smallest alpha at which
    the family rejects it (1 where none up to 1 does; NaN where the claim has no such test). A
    rejection can change only at an alpha where some p-value meets some weight, so every such alpha
    is tried at once (as a leading axis of :func:`family_rejections`)."""
    p_direction, p_equivalence = np.asarray(direction, dtype=float), np.asarray(equivalence, dtype=float)
    claims = len(p_direction)
    if claims == 0:
        return [], []
    candidates = {1.0}
    for n_direction in range(claims + 1):
        for n_equivalence in range(claims + 1 - n_direction):
            if n_direction + n_equivalence:
                for p, multiplier in zip((p_direction, p_equivalence), split_multipliers(n_direction, n_equivalence, share)):
                    candidates.update(float(v) for v in _scaled(p, multiplier) if v <= 1.0)
    levels = np.array(sorted(candidates))
    shape = (len(levels), claims)
    rejected = family_rejections(np.broadcast_to(p_direction, shape), np.broadcast_to(p_equivalence, shape),
                                 levels, share)
    adjusted = []
    for p, when in zip((p_direction, p_equivalence), rejected):
        first = np.where(when.any(0), levels[np.argmax(when, 0)], 1.0)
        adjusted.append([math.nan if math.isnan(q) else float(a) for q, a in zip(p, first)])
    return adjusted[0], adjusted[1]


def seeds_for_equivalence(effect: float, spread: float, delta: float, alpha: float = ALPHA,
                          power: float = POWER, most: int = 1000) -> int | None:
    """Paired seeds for TOST at ``alpha`` to show ±``delta`` with ``power`` when the mean difference
    is ``effect`` (|effect| < delta) and its standard deviation ``spread``: the binding one-sided
    test is the nearer bound's, a one-sided test at alpha (a two-sided one at 2 alpha). None where
    |effect| ≥ delta (no seeds would show it) or more than ``most``."""
    if abs(effect) >= delta:
        return None
    return seeds_needed(delta - abs(effect), spread, min(2 * alpha, 0.5), power, most)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and does not count)."""
    order = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p))
        adjusted[i] = running
    return adjusted


def seeds_needed(effect: float, spread: float, alpha: float = ALPHA, power: float = POWER,
                 most: int = 1000) -> int | None:
    """Paired seeds for a two-sided paired t-test at ``alpha`` to reach ``power`` when the mean
    difference is ``effect`` and its standard deviation ``spread`` (None: more than ``most``)."""
    if spread == 0:
        return 2
    size = abs(effect) / spread

    def enough(ns: np.ndarray) -> np.ndarray:
        df = ns - 1
        critical = np.array([_t_quantile(1 - alpha / 2, int(k)) for k in df])
        noncentrality = size * np.sqrt(ns)
        other_tail = np.nan_to_num(stats.nct.cdf(-critical, df, noncentrality), nan=0.0)  # (NaN where it underflows)
        return stats.nct.sf(critical, df, noncentrality) + other_tail >= power

    if not enough(np.array([most]))[0]:
        return None
    # power grows with n: the first n that is enough. The normal approximation puts it within a few
    # seeds of n_z = ((z_(1-alpha/2) + z_power) / size)^2 + 1, so one array call over a window around
    # n_z finds it; where the window misses, bisection over [1, most] does.
    guess = ((_normal_quantile(1 - alpha / 2) + _normal_quantile(power)) / size) ** 2 + 1 if size > 0 else most
    window = np.arange(max(1, int(guess) - 6), min(most, int(guess) + 6) + 1)
    hits = enough(window)
    if len(window) > 1 and hits.any() and (window[0] == 1 or not hits[0]):
        return int(window[np.argmax(hits)])
    low, high = 1, most
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(np.array([middle]))[0] else (middle, high)
    return high


# -- group-sequential looks ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)  # (the looks of a family ask again for the same fractions and shares)
def obrien_fleming_spent(fraction: float, alpha: float = ALPHA) -> float:
    """Lan–DeMets O'Brien–Fleming-type spending: the alpha spent by information ``fraction``."""
    if fraction <= 0:
        return 0.0
    return float(2 * (1 - stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(min(fraction, 1.0)))))


def look_levels(seeds_at_looks: list[int], max_seeds: int, alpha: float = ALPHA) -> list[float]:
    """The level of each look: the alpha spent between it and the one before. The last look at
    the budget spends what is left, so the levels sum to ``alpha``."""
    levels, spent = [], 0.0
    for n in seeds_at_looks:
        now = alpha if n >= max_seeds else obrien_fleming_spent(n / max_seeds, alpha)
        levels.append(max(now - spent, 0.0))
        spent = max(spent, now)
    return levels


# -- one comparison ------------------------------------------------------------------------------------

PUBLISHED_DIGITS = 10  # significant digits of a number computed through exp and log


def published(value: float) -> float:
    """``value`` at :data:`PUBLISHED_DIGITS` significant digits. numpy's exp and log are vectorised
    differently on different CPUs (AVX-512, AVX2, none) and may differ in the last bit; a record
    must read the same wherever it is rebuilt, and 10 digits are far more than any table prints."""
    return float(f"{value:.{PUBLISHED_DIGITS}g}") if math.isfinite(value) else value


@dataclass
class PairedComparison:
    """``a`` against ``b`` on the seeds both have: effect sizes with their intervals, and the test."""

    n: int
    differences: tuple[float, ...]  # a - b per seed, in seed order
    mean_difference: float
    mean_interval: Interval  # t, 95%
    median_difference: float
    median_interval: Interval  # order statistics, with the coverage it has
    spread: float  # standard deviation of the differences
    ratio: float  # geometric mean of a/b over seeds (NaN unless every value is positive)
    ratio_interval: Interval  # t on log ratios, 95%
    p_improvement: float  # P(a < b) on the same seed: the share of seeds where a is lower (ties half)
    p_improvement_interval: Interval  # Clopper-Pearson, 95%
    p_value: float  # two-sided paired t-test of mean difference 0


def paired_comparison(a: dict[int, float], b: dict[int, float]) -> PairedComparison:
    """Compare the per-seed values ``a`` and ``b`` (seed → value) on the seeds both have."""
    seeds = sorted(s for s in set(a) & set(b) if not (math.isnan(a[s]) or math.isnan(b[s])))
    x = np.asarray([a[s] for s in seeds], dtype=float)
    y = np.asarray([b[s] for s in seeds], dtype=float)
    d = x - y
    n = len(d)
    median_d, median_ci = median_interval(d)
    if n and np.all(x > 0) and np.all(y > 0):
        logs = np.log(x / y)
        log_ci = t_interval(logs)
        ratio, ratio_ci = published(math.exp(logs.mean())), Interval(
            published(math.exp(log_ci.low)) if n > 1 else math.nan, published(math.exp(log_ci.high)) if n > 1 else math.nan,
            log_ci.coverage, "t on log ratios")
    else:
        ratio, ratio_ci = math.nan, Interval(math.nan, math.nan, 0.0, "t on log ratios")
    wins = float(np.sum(d < 0) + 0.5 * np.sum(d == 0))
    return PairedComparison(n, tuple(float(v) for v in d), float(d.mean()) if n else math.nan, t_interval(d), median_d, median_ci,
                            float(d.std(ddof=1)) if n > 1 else math.nan, ratio, ratio_ci,
                            wins / n if n else math.nan, clopper_pearson(wins, n), paired_t_p(d))


# -- seeds until decided: a family over looks ------------------------------------------------------------

@dataclass
class ClaimLook:
    """One claim's tests at one look: its pairs, the direction test's p-value and the order it
    leans to, and the equivalence test's (TOST at the claim's δ; NaN where the claim has none)."""

    seeds: int
    p_value: float  # NaN: not testable at this look
    towards: str  # "reproduced" or "not reproduced"
    p_equivalent: float = math.nan


def sequential_decisions(looks: dict[str, list[ClaimLook]], max_seeds: int,
                         alpha: float = ALPHA) -> dict[str, tuple[str, int]]:
    """Decide a family of claims over group-sequential looks: claim → (verdict, index of the look
    that decided it; -1 while undecided). The verdict is the order the direction test leans to, or
    "equivalent" where the equivalence test decided first.

    Each claim holds two hypotheses, "no difference" and "a difference of at least δ", each with a
    group-sequential test: at a look with n of ``max_seeds`` seeds it tests at the alpha its
    O'Brien–Fleming-type spending function spends since its last look (:func:`look_levels`), so over
    all its looks it spends at most its share. The shares are those of :func:`family_rejections`
    without its three-sided refinement: the equivalence hypotheses still open hold
    :data:`EQUIVALENCE_SHARE` of alpha and the direction hypotheses still open the rest, each part
    split evenly among them (Holm's step-down within each part); a rejected hypothesis's share goes
    to the others of its kind, and when a kind has none left, to the other kind. The others are then
    tested again at every look so far with the larger share (the graphical approach for
    group-sequential trials, Maurer & Bretz, Stat. Biopharm. Res. 2013). The family-wise chance of
    a false decision stays at most ``alpha`` (tests/service/reporting/test_statistics.py checks it
    by simulation: no difference, a difference of exactly δ, and a clear effect).
    """
    hypotheses = {(claim, kind) for claim, history in looks.items() for kind in ("direction", "equivalence")
                  if kind == "direction" or any(not math.isnan(look.p_equivalent) for look in history)}
    rejected: dict[tuple[str, str], int] = {}
    decided: dict[str, tuple[str, int]] = {}
    n_looks = max((len(v) for v in looks.values()), default=0)
    for k in range(n_looks):
        changed = True
        while changed:
            changed = False
            still_open = hypotheses - set(rejected)
            if not still_open:
                break
            multipliers = dict(zip(("direction", "equivalence"), split_multipliers(
                sum(kind == "direction" for _, kind in still_open), sum(kind == "equivalence" for _, kind in still_open))))
            for claim, kind in sorted(still_open):
                history = looks[claim][:k + 1]
                levels = look_levels([look.seeds for look in history], max_seeds, alpha / multipliers[kind])
                p_values = [look.p_value if kind == "direction" else look.p_equivalent for look in history]
                hit = next((i for i, (p, level) in enumerate(zip(p_values, levels))
                            if not math.isnan(p) and p <= level), None)
                if hit is not None:
                    rejected[(claim, kind)] = k
                    if claim not in decided:
                        decided[claim] = (history[hit].towards if kind == "direction" else "equivalent", k)
                    changed = True
    return {c: decided.get(c, ("inconclusive", -1)) for c in looks}
