"""A sweep's claims decided as one family: the orderings of the paper's numbers and the ranking
claims' pairs, with Holm (service.reporting.paper_table.decide) or, for seeds until decided, over
the looks (service.reporting.sequential). Above both, so that neither imports the other."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from service.reporting import statistics as st
from service.reporting.paper_table import Verdict, claim_verdicts, decide, reported_rows, verdicts
from service.reporting.sequential import sequential_verdicts


@dataclass
class Family:
    """A sweep's claims, decided as one family."""

    numbers: list[Verdict] = field(default_factory=list)  # the orderings of the paper's numbers
    claims: list[Verdict] = field(default_factory=list)  # the ranking claims' pairs
    sequential: Any = None  # until_decided: its looks (service.reporting.sequential.SequentialOutcome)


def decide_family(runs: pd.DataFrame, table: pd.DataFrame, spec: dict, explain: bool = True) -> Family:
    """Every claim of a sweep decided as one family: with Holm (:func:`decide`; ``explain``: as
    there), or over the looks of seeds until decided."""
    if not spec or not len(table):
        return Family()
    if spec.get("until_decided"):  # seeds until decided: the looks' group-sequential decisions
        outcome = sequential_verdicts(runs[runs["phase"] == "grid"], spec)
        return Family(outcome.numbers, outcome.claims, outcome)
    protocol = spec.get("protocol", {})
    smallest_effect = protocol.get("smallest_effect", 0.02)
    numbers = verdicts(reported_rows(runs, table, spec), smallest_effect)
    claims = claim_verdicts(runs, table, spec)
    decide(numbers + claims, protocol.get("alpha", st.ALPHA), smallest_effect, explain)
    return Family(numbers, claims)


def family_verdicts(runs: pd.DataFrame, table: pd.DataFrame, spec: dict,
                    explain: bool = True) -> tuple[list[Verdict], list[Verdict]]:
    """(the orderings of the paper's numbers, the ranking claims' pairs), decided as one family."""
    found = decide_family(runs, table, spec, explain)
    return found.numbers, found.claims
