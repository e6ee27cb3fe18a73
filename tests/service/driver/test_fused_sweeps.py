"""Fused packs through the whole sweep: Ray Tune, MLflow, the aggregator (real local Ray, real store)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from ray import tune

from search_spaces import SpecError, load_spec, packs
from service.driver.execution_plan import PlanError
from service.driver.sweeps import load_splits, run_sweep
from service.reporting.results import sweep_results
from service.settings import Settings
from tests.conftest import ONE_WORKER, ensure_local_ray
from workers.pack_memory import measure_footprint

pytestmark = pytest.mark.slow  # sweeps trained end to end on a real Ray (make test-fast leaves them out)

# 2 activations × 2 dropouts × 3 seeds = 12 grid points: at most 4 a pack, 4 packs of 3 on 2 slots
SMALL = {"dataset": "digits", "val_size": 200, "epochs": 2, "batch_size": 64, "model.depth": 2, "model.width": 32,
         "activation": ["gelu", "soi"], "lr": [0.01], "dropout": [0.0, 0.5], "seeds": 3, "execution.rerun": True}


class TuneStatistics(tune.Callback):
    """The numbers Tune keeps running statistics of (each trial's metric_analysis), at each trial's end."""

    def __init__(self):
        self.keys: set[str] = set()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.keys |= set(trial.run_metadata.metric_analysis)


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    ensure_local_ray()
    return Settings(home=tmp_path_factory.mktemp("fused"), download=False)


def test_packs_are_balanced_sorted_by_activation_and_formed_by_seed():
    points = load_spec("mnist_classification", quick=True, overrides={**SMALL, "activation": ["relu", "gelu", "elu"]}).grid_points()
    made = packs(points, 5)
    assert [len(p.points) for p in made] == [5, 5, 4, 4]  # 18 points, at most 5 a pack
    assert [len(p.points) for p in packs(points, 12, slots=2)] == [9, 9]  # one pack per slot
    assert [len(p.points) for p in packs(points, 6, slots=2)] == [5, 5, 4, 4]  # 3 packs → 4: no idle slot
    assert sorted(m for p in made for m in p.points) == sorted(points)
    for pack in made:  # each pack: its members sorted, and the same mix of activations
        assert list(pack.points) == sorted(pack.points, key=lambda m: (m.activation, m.lr, m.dropout, m.seed))
        assert {m.activation for m in pack.points} == {"relu", "gelu", "elu"}
    assert [{m.seed for m in p.points} for p in made] == [{0}, {0, 1}, {1, 2}, {2}]  # 6 points a seed, 5 a pack
    assert [{m.seed for m in p.points} for p in packs(points, 6)] == [{0}, {1}, {2}]  # a seed a pack


@pytest.mark.long("two 12-trial sweeps end to end, fused and one trial at a time, on the module's in-process Ray")
@pytest.mark.timeout(200)  # 11 s alone; 20-78 s in full suites here (2 cores shared by two test processes and their Rays)
def test_every_member_is_its_own_run_with_the_numbers_it_has_alone(settings):
    statistics = TuneStatistics()
    fused = run_sweep(load_spec("mnist_classification", quick=True,
                                overrides={**SMALL, "execution.mode": "fused", "execution.pack_size": 4}), settings,
                      callbacks=(statistics,))
    alone = run_sweep(load_spec("mnist_classification", quick=True, overrides={**SMALL, **ONE_WORKER}), settings)
    assert (fused.trials, fused.errors, alone.trials) == (12, 0, 12)
    # Tune's CSV and TensorBoard result files are off (MLflow holds every metric): flattened, a pack's
    # result has a column per member and metric, and writing them slowed the driver (docs/load.md)
    written = {p.name for p in Path(settings.ray_results).rglob("*") if p.is_file()}
    assert "result.json" in written and "progress.csv" not in written, sorted(written)
    assert not any(name.startswith("events.out.tfevents") for name in written)
    # nor does Tune keep running statistics of each member's metrics (2.6 MB a 50-member pack in
    # the driver's memory: docs/load.md): a pack reports its members as a list, which Tune leaves whole
    assert statistics.keys and not any(key.startswith("members") for key in statistics.keys), sorted(statistics.keys)

    client = MlflowClient(settings.resolved_tracking_uri)
    runs = sweep_results(settings.resolved_tracking_uri, fused.sweep_id).runs
    assert len(runs) == 12 and set(runs["status"]) == {"FINISHED"}
    tags = [client.get_run(r).data.tags for r in runs["run_id"]]
    assert {t["execution"] for t in tags} == {"fused"} and len({t["pack_id"] for t in tags}) == 4
    assert len({t["trial_id"] for t in tags}) == 12  # <pack trial id>/<member>
    for run_id in runs["run_id"]:  # per epoch, its own metrics
        assert [m.step for m in client.get_metric_history(run_id, "val_loss")] == [1, 2]

    key = ["activation", "dropout", "seed"]
    mine = runs.set_index(key).sort_index()
    reference = sweep_results(settings.resolved_tracking_uri, alone.sweep_id).runs.set_index(key).sort_index()
    for metric in ("train_loss", "val_loss", "test_error"):
        assert mine[metric].to_numpy() == pytest.approx(reference[metric].to_numpy(), rel=1e-5, abs=1e-6), metric


def test_fused_needs_a_model_it_can_stack():
    with pytest.raises(SpecError, match="execution"):
        load_spec("cifar10_small", quick=True, overrides={"execution.mode": "fused"})


def test_auto_packs_hold_what_the_memory_budget_takes(settings):
    """pack_size auto on a budget measured to hold 3 members: 12 points in packs of at most 3."""
    spec = load_spec("mnist_classification", quick=True, overrides={**SMALL, "execution.mode": "fused"})
    data = load_splits(spec, settings)
    cfgs = [spec.trial_config(p)
            for p in ({p.activation: p for p in spec.grid_points()}.values())]
    footprint = measure_footprint(cfgs, data)
    budget_gb = (footprint.bytes(3) + footprint.per_member // 2) / 2 ** 30
    outcome = run_sweep(load_spec("mnist_classification", quick=True, overrides={
        **SMALL, "execution.mode": "fused", "execution.pack_size": "auto", "execution.pack_memory_gb": budget_gb}), settings)
    assert (outcome.trials, outcome.errors) == (12, 0)
    client = MlflowClient(settings.resolved_tracking_uri)
    runs = sweep_results(settings.resolved_tracking_uri, outcome.sweep_id).runs
    tags = [client.get_run(r).data.tags for r in runs["run_id"]]
    sizes = Counter(t["pack_id"] for t in tags)
    assert sorted(sizes.values()) == [3, 3, 3, 3]  # 4 packs: a multiple of the 2 slots, none over budget
    assert {t["pack_size"] for t in tags} == {"3"}


def test_a_budget_below_one_member_is_refused_by_name(settings):
    spec = load_spec("mnist_classification", quick=True, overrides={
        **SMALL, "execution.mode": "fused", "execution.pack_size": "auto", "execution.pack_memory_gb": 0.001})
    with pytest.raises(PlanError, match=r"execution.pack_size auto: a pack of one member needs .* GiB .*"
                                              r"raise execution.pack_memory_gb"):
        run_sweep(spec, settings)
