"""Seeds until decided: a sweep's claims read as a group-sequential design over its rounds.

A spec with ``until_decided`` starts with its own seeds and adds ``seeds_per_round`` more, round by
round, to the configurations an undecided claim involves, up to ``max_seeds``. Each round is a
look: the lr is chosen again on validation with the seeds so far, every claim is compared again,
and :func:`service.reporting.statistics.sequential_decisions` decides the family with
alpha spent over the looks. Everything here is computed from the runs alone (look k holds the
first n_k seeds of the spec's seed order), so a report rebuilt from exports shows the same looks
and verdicts as the driver saw when it stopped.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field

import pandas as pd

from service.reporting import statistics as st
from service.reporting.aggregate import choose_lr_on_validation, median_over_seeds, selection_metric, table_metrics
from service.reporting.paper_table import Verdict, claim_verdicts, reported_rows, verdicts


def seed_order(spec: dict) -> list[int]:
    """Every seed the spec may use, in the order rounds add them."""
    seeds = spec.get("seeds", 1)
    first = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    plan = spec.get("until_decided") or {}
    extra = max(plan.get("max_seeds", len(first)) - len(first), 0)
    start = max(first, default=-1) + 1
    return first + list(range(start, start + extra))


def look_sizes(spec: dict) -> list[int]:
    """The seed counts of the looks: the spec's seeds, then each round's, up to max_seeds."""
    seeds = spec.get("seeds", 1)
    n = seeds if isinstance(seeds, int) else len(seeds)
    plan = spec.get("until_decided")
    sizes = [n]
    while plan and n < plan["max_seeds"]:
        n = min(n + plan["seeds_per_round"], plan["max_seeds"])
        sizes.append(n)
    return sizes


def claim_key(v: Verdict) -> str:
    return v.claim + (f" ({v.where})" if v.where else "")


@dataclass
class SequentialOutcome:
    numbers: list[Verdict]  # at the last look, each with its sequential verdict
    claims: list[Verdict]
    looks: list[int]  # seed counts of the looks taken
    max_seeds: int
    decided_at: dict[str, int] = field(default_factory=dict)  # claim → index of the deciding look (-1: open)
    p_values: dict[str, list[float]] = field(default_factory=dict)  # claim → p at each look
    levels: dict[str, list[float]] = field(default_factory=dict)  # claim → the alpha its direction test spent a look

    @property
    def open_claims(self) -> list[Verdict]:
        return [v for v in self.numbers + self.claims if v.verdict == "inconclusive"]

    def looks_table(self) -> pd.DataFrame:
        """A row per look: its seeds, and per claim its p-value against its boundary."""
        rows = []
        for k, n in enumerate(self.looks):
            row = {"look": k + 1, "seeds": n}
            for claim, ps in self.p_values.items():
                p, level = ps[k] if k < len(ps) else None, self.levels[claim][k] if k < len(ps) else None
                decided = self.decided_at.get(claim, -1)
                mark = " ✓" if decided == k else ""
                if 0 <= decided < k:
                    row[claim] = "decided"
                else:
                    row[claim] = "–" if p is None or pd.isna(p) else f"{p:.3g} / {level:.2g}{mark}"
            rows.append(row)
        return pd.DataFrame(rows)


def sequential_verdicts(runs: pd.DataFrame, spec: dict) -> SequentialOutcome:
    """The claims of an ``until_decided`` sweep, decided over its looks (see the module's docstring)."""
    plan = spec["until_decided"]
    order, sizes = seed_order(spec), look_sizes(spec)
    protocol = spec.get("protocol", {})
    alpha, smallest_effect = protocol.get("alpha", st.ALPHA), protocol.get("smallest_effect", 0.02)
    present = set(runs["seed"].astype(int)) if len(runs) else set()
    taken = [n for i, n in enumerate(sizes) if i == 0 or present & set(order[sizes[i - 1]:n])]
    looks: dict[str, list[st.ClaimLook]] = {}
    last: tuple[list[Verdict], list[Verdict]] = ([], [])
    for n in taken:
        subset = runs[runs["seed"].astype(int).isin(order[:n])]
        table = choose_lr_on_validation(median_over_seeds(subset, metrics=table_metrics(subset, spec)),
                                        by=selection_metric(protocol))
        numbers = verdicts(reported_rows(subset, table, spec), smallest_effect)
        claims = claim_verdicts(subset, table, spec)
        for v in numbers + claims:
            looks.setdefault(claim_key(v), []).append(
                st.ClaimLook(v.n_pairs, float("nan") if v.p_value is None else v.p_value, v.towards,
                             float("nan") if v.p_equivalent is None else v.p_equivalent))
        last = (numbers, claims)
    decisions = st.sequential_decisions(looks, plan["max_seeds"], alpha)
    outcome = SequentialOutcome(*last, taken, plan["max_seeds"])
    # the direction test's share of alpha, for the levels shown: an open claim's at the end (the decided
    # claims' shares passed to it), a decided one's at the first look's even split at least
    verdict_of = {key: verdict for key, (verdict, _) in decisions.items()}
    tied = {key for key, history in looks.items() if any(not math.isnan(look.p_equivalent) for look in history)}
    direction_open = [key for key in looks if verdict_of[key] in ("inconclusive", "equivalent")]
    equivalence_open = [key for key in tied if verdict_of[key] != "equivalent"]
    share_open = alpha / st.split_multipliers(max(len(direction_open), 1), len(equivalence_open))[0]
    share_first = alpha / st.split_multipliers(max(len(looks), 1), len(tied))[0]
    for v in last[0] + last[1]:
        key = claim_key(v)
        verdict, at = decisions.get(key, ("inconclusive", -1))
        history = looks.get(key, [])
        outcome.decided_at[key] = at
        outcome.p_values[key] = [look.p_value for look in history]
        share = share_open if verdict == "inconclusive" else share_first
        outcome.levels[key] = st.look_levels([look.seeds for look in history], plan["max_seeds"], share)
        if v.verdict == "diverged":
            continue
        v.verdict = verdict
        if verdict == "inconclusive":
            at_budget = taken[-1] >= plan["max_seeds"]
            v.seeds_needed = (f"undecided at the budget of {plan['max_seeds']} seeds" if at_budget
                              else f"open after {taken[-1]} seeds")
        else:
            v.seeds_needed = ""
    return outcome
