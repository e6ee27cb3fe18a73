"""Families of claims simulated, for the tests and for the table in docs/statistics.md.

Each claim of a family is a paired comparison over seeds: per seed a difference drawn from
N(θ, 1) (the paired difference per seed is the unit, as the verdict code reads it), a direction
test (the two-sided paired t-test) and an equivalence test (TOST at ±δ). Families of 2, 7 and 12
claims at 3, 5 and 11 seeds, in three cases, every claim alike:

- ``null``: θ = 0, where a decided order is false;
- ``at_delta``: θ = δ, where "equivalent" (or the wrong order) is false;
- ``clear``: θ = −(the effect one paired t-test at the Bonferroni level alpha / claims detects
  half the time), far beyond δ at 3 and 5 seeds: the family's power is the share of claims decided in
  the true order, and "not reproduced" or "equivalent" is false.

The procedures compared: ``now`` (statistics.family_rejections), ``holm`` (Holm's procedure on the
direction tests alone, no equivalence test: the power to match), ``before`` (Holm's step-down with
Shaffer's counts over both tests, the procedure at 79f404e) and ``leaves`` (Holm over claims, where a
claim is decided by whichever of its tests has the smaller p and then leaves the family).

    python -m tests.service.reporting.family_simulation   # prints the table of docs/statistics.md
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

from service.reporting import statistics as st

CLAIMS = (2, 7, 12)
SEEDS = (3, 5, 11)
CASES = ("null", "at_delta", "clear")
DELTA = 1.0  # the equivalence margin, in standard deviations of the paired difference
REPS = 2000  # families a cell


def clear_effect(claims: int, seeds: int, power: float = 0.5, alpha: float = st.ALPHA) -> float:
    """The mean difference (in standard deviations) that one two-sided paired t-test at the
    Bonferroni level alpha / claims detects with ``power``."""
    df, critical = seeds - 1, stats.t.ppf(1 - alpha / claims / 2, seeds - 1)
    return optimize.brentq(lambda e: stats.nct.sf(critical, df, e * math.sqrt(seeds)) - power, 1e-3, 100.0)


def draw(rng, theta: np.ndarray, seeds: int, reps: int, delta: float | np.ndarray = DELTA):
    """Families of claims with true mean differences ``theta`` (one per claim): (direction p, TOST p,
    sign of the observed mean difference), each shaped (reps, claims)."""
    d = np.asarray(theta, dtype=float)[None, :, None] + rng.normal(size=(reps, len(theta), seeds))
    delta = np.broadcast_to(np.asarray(delta, dtype=float), (len(theta),))[None, :, None]
    p_direction = stats.ttest_1samp(d, 0.0, axis=-1).pvalue
    p_equivalence = np.maximum(stats.ttest_1samp(d, -delta, axis=-1, alternative="greater").pvalue,
                               stats.ttest_1samp(d, delta, axis=-1, alternative="less").pvalue)
    return p_direction, p_equivalence, np.sign(d.mean(-1))


# -- the procedures: (direction decided, equivalent decided), each (reps, claims) ------------------------

def now(p_direction, p_equivalence, alpha=st.ALPHA):
    return st.family_rejections(p_direction, p_equivalence, alpha)


def holm(p_direction, p_equivalence, alpha=st.ALPHA):
    return st.family_rejections(p_direction, np.full_like(p_equivalence, np.nan), alpha)


def before(p_direction, p_equivalence, alpha=st.ALPHA):
    """Holm's step-down with Shaffer's counts: a step's multiplier is the number of claims that still
    have an unrejected hypothesis (statistics.holm_pairs at 79f404e), one family at a time."""
    direction, equivalence = np.zeros(p_direction.shape, bool), np.zeros(p_direction.shape, bool)
    for r, (ps, qs) in enumerate(zip(p_direction, p_equivalence)):
        items = sorted((p, claim, kind) for kind, values in enumerate((ps, qs)) for claim, p in enumerate(values))
        remaining = {claim: 2 for claim in range(len(ps))}
        for p, claim, kind in items:
            if p * len(remaining) > alpha:
                break
            (direction, equivalence)[kind][r, claim] = True
            remaining[claim] -= 1
            if not remaining[claim]:
                del remaining[claim]
    return direction, equivalence


def leaves(p_direction, p_equivalence, alpha=st.ALPHA):
    """Holm over claims on the smaller of each claim's two p-values; a decided claim leaves."""
    reps, claims = p_direction.shape
    smaller = np.minimum(p_direction, p_equivalence)
    order = np.argsort(smaller, axis=1)
    steps = np.take_along_axis(smaller, order, axis=1) <= alpha / (claims - np.arange(claims))
    decided = np.zeros((reps, claims), bool)
    np.put_along_axis(decided, order, np.cumprod(steps, axis=1).astype(bool), axis=1)
    by_direction = p_direction <= p_equivalence
    return decided & by_direction, decided & ~by_direction


PROCEDURES = {"now": now, "holm": holm, "before": before, "leaves": leaves}


def outcome(procedure, p_direction, p_equivalence, sign, theta, delta=DELTA) -> tuple[float, float, float]:
    """(family-wise error, share of claims decided in the true order, share decided "equivalent"). A
    claim's word is its direction where that is decided, else "equivalent" where that is."""
    theta = np.asarray(theta, dtype=float)[None, :]
    delta = np.asarray(delta, dtype=float)
    direction, equivalence = procedure(p_direction, p_equivalence)
    equivalent = equivalence & ~direction
    false = (direction & ((theta == 0) | (sign != np.sign(theta)))) | (equivalent & (np.abs(theta) >= delta))
    true_order = direction & (sign == np.sign(theta)) & (theta != 0)
    return float(false.any(1).mean()), float(true_order.mean()), float(equivalent.mean())


def theta_of(case: str, claims: int, seeds: int) -> np.ndarray:
    effect = {"null": 0.0, "at_delta": DELTA, "clear": -clear_effect(claims, seeds)}[case]
    return np.full(claims, effect)


def cell(case: str, claims: int, seeds: int, procedures=("now", "holm"), reps: int = REPS) -> dict:
    """One cell of the table: per procedure (family-wise error, power, share equivalent)."""
    rng = np.random.default_rng(1000 * claims + seeds + 10 * CASES.index(case))
    theta = theta_of(case, claims, seeds)
    drawn = draw(rng, theta, seeds, reps)
    return {name: outcome(PROCEDURES[name], *drawn, theta) for name in procedures}


# families that mix kinds of claims, where a procedure that passes alpha on too freely overspends:
# (name, seeds, θ per claim, δ per claim)
MIXED = (
    ("10 ties TOST can show beside 2 nulls it cannot", 11, [0.0] * 12, [1.5] * 10 + [0.3] * 2),
    ("10 claims at exactly δ beside 2 nulls", 11, [1.5] * 10 + [0.0] * 2, [1.5] * 10 + [0.3] * 2),
    ("4 clear effects beside 3 nulls", 3, [-6.0] * 4 + [0.0] * 3, [DELTA] * 7),
)


def mixed_cell(index: int, procedures=("now", "before", "leaves"), reps: int = REPS) -> dict:
    """One family of :data:`MIXED`: per procedure (family-wise error, power, share equivalent)."""
    _, seeds, theta, delta = MIXED[index]
    drawn = draw(np.random.default_rng(77 + index), np.array(theta), seeds, reps, np.array(delta))
    return {name: outcome(PROCEDURES[name], *drawn, theta, delta) for name in procedures}


def bound(reps: int = REPS, alpha: float = st.ALPHA) -> float:
    """alpha plus 4 simulation standard errors: the most a valid procedure's simulated rate may show."""
    return alpha + 4 * math.sqrt(alpha * (1 - alpha) / reps)


def table() -> str:
    """The markdown table of docs/statistics.md."""
    names = ("before", "now", "holm")
    lines = ["| case | claims | seeds | θ | family-wise error: before / now | power (true order): before / now / Holm alone | equivalent: before / now |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for case in CASES:
        for claims in CLAIMS:
            for seeds in SEEDS:
                found = cell(case, claims, seeds, names)
                theta = theta_of(case, claims, seeds)[0]
                lines.append(f"| {case.replace('_', ' ')} | {claims} | {seeds} | {theta:.2f} | "
                             f"{found['before'][0]:.1%} / {found['now'][0]:.1%} | "
                             + " / ".join(f"{found[n][1]:.0%}" for n in names) + " | "
                             + f"{found['before'][2]:.0%} / {found['now'][2]:.0%} |")
    lines += ["", "| mixed family | seeds | family-wise error: before / now / a decided claim leaves |",
              "| --- | ---: | ---: |"]
    for index, (name, seeds, _, _) in enumerate(MIXED):
        found = mixed_cell(index)
        lines.append(f"| {name} | {seeds} | " + " / ".join(f"{found[n][0]:.1%}" for n in ("before", "now", "leaves")) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(f"{REPS} families a cell; δ = {DELTA:g} sd of the paired difference; bound {bound():.2%}")
    print(table())
