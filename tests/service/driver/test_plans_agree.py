"""What an execution plan may change, and what it may not (README, "What a plan changes").

A fused member and its lone trial compute the same function in another order of floating-point
operations: they agree to rounding after a step (tests/workers/test_fused.py), and training grows
that rounding, as another CPU's vector unit does. So across plans, and across CPUs, what must hold is
what the protocol decides, not the last digits: the lr chosen on validation, every verdict, and each
median inside the other plan's seed interval. This module trains one small grid both ways, on a real
local Ray, and checks exactly that; then that the trial cache reuses a finished trial across plans."""
from __future__ import annotations

import pytest

from search_spaces import load_spec
from service.reporting.report import family
from service.reporting.results import sweep_results
from service.settings import Settings
from tests.conftest import ensure_local_ray

pytestmark = pytest.mark.slow  # three sweeps trained end to end on a real Ray

# Figure 2's claim (GELU lowest training loss, per dropout rate), on the digits: 3 activations × 2 lrs
# × 2 dropouts × 3 seeds = 36 trials of 3 epochs
GRID = {"dataset": "digits", "val_size": 300, "epochs": 3, "batch_size": 64, "model.depth": 3, "model.width": 48,
        "activation": ["gelu_tanh", "relu", "elu"], "lr": [0.01, 0.001], "dropout": [0.0, 0.5], "seeds": 3}


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    ensure_local_ray()
    return Settings(home=tmp_path_factory.mktemp("plans"), download=False)


def _run(settings, **execution):
    from service.driver.sweeps import run_sweep

    spec = load_spec("mnist_classification", quick=True, overrides={
        **GRID, **{f"execution.{k}": v for k, v in execution.items()}})
    outcome = run_sweep(spec, settings)
    assert outcome.errors == 0
    return outcome, sweep_results(settings.resolved_tracking_uri, outcome.sweep_id)


@pytest.mark.long("three sweeps of the same 36-trial grid: per trial, from the cache, fused")
@pytest.mark.timeout(200)  # 39-81 s in full suites of three test processes (80.6 s at 3627392, a slow hour)
def test_fused_and_per_trial_plans_choose_alike_and_decide_alike_and_the_cache_spans_them(settings):
    alone_outcome, alone = _run(settings, mode="per_trial", rerun=True)
    reused, _ = _run(settings, mode="fused")  # the same grid in another plan: every trial from the cache
    assert (alone_outcome.trials, reused.reused, reused.trials) == (36, 36, 0)
    _, fused = _run(settings, mode="fused", rerun=True)
    metric = "train_loss_eval"

    chosen = {plan: {(r.activation, r.dropout): r.lr for r in results.table[results.table["lr_chosen"]].itertuples()}
              for plan, results in (("fused", fused), ("per_trial", alone))}
    assert chosen["fused"] == chosen["per_trial"] and len(chosen["fused"]) == 6

    verdicts = {plan: {v.claim + v.where: v.verdict for v in family(results).claims}
                for plan, results in (("fused", fused), ("per_trial", alone))}
    assert verdicts["fused"] == verdicts["per_trial"] and len(verdicts["fused"]) == 4

    for mine, other in ((fused, alone), (alone, fused)):  # each median inside the other plan's [min, max] over seeds
        spread = other.runs.groupby(["activation", "dropout", "lr"])[metric].agg(["min", "max"])
        medians = mine.table.set_index(["activation", "dropout", "lr"])[metric]
        inside = (medians >= spread["min"] - 1e-9) & (medians <= spread["max"] + 1e-9)
        assert inside.all(), f"outside the other plan's seed interval:\n{medians[~inside]}\n{spread[~inside]}"
