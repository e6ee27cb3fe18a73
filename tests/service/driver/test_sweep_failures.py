"""Whatever happens to a sweep, every MLflow run it opened ends (a real local Ray, a real store)."""
from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from search_spaces import load_spec
from service.driver.sweeps import run_sweep
from service.settings import Settings
from tests.conftest import ONE_WORKER, ensure_local_ray

pytestmark = pytest.mark.slow  # sweeps trained end to end on a real Ray (make test-fast leaves them out)

# a convolutional net on vector inputs: every trial fails in its first forward pass
BROKEN = {"dataset": "digits", "val_size": 200, "epochs": 2, "batch_size": 64, "activation": ["gelu", "relu"],
          "lr": [0.01], "dropout": 0, "seeds": 1, "execution.max_failures": 0,
          "model": {"kind": "cifar_small", "init": "torch_default"}}


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    ensure_local_ray()
    return Settings(home=tmp_path_factory.mktemp("failures"), download=False)


@pytest.mark.long("a sweep whose two trials fail in their first step, with the local Ray's start where it is the first to ask")
@pytest.mark.timeout(160)  # 59 s in a full suite of three test processes
def test_a_sweep_whose_trials_fail_leaves_no_run_running(settings):
    outcome = run_sweep(load_spec("mnist_classification", quick=True, overrides=BROKEN), settings)
    assert outcome.errors == 2
    # the cause, in one line, as the sweep record's error shows it (not Tune's "Traceback ...")
    assert outcome.first_error.startswith("RuntimeError") and "conv2d" in outcome.first_error, outcome.first_error
    client = MlflowClient(settings.resolved_tracking_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              f"tags.sweep_id = '{outcome.sweep_id}'")
    assert len(runs) == 3 and {r.info.status for r in runs} == {"FAILED"}  # two trials and the sweep


def test_a_figure_that_cannot_be_drawn_fails_nothing(settings, monkeypatch):
    from service.reporting import figures

    def broken(results):  # injected fault: matplotlib gives up
        raise RuntimeError("no figures today")

    monkeypatch.setattr(figures, "render_figures", broken)  # (imported where a sweep draws them)
    good = {**BROKEN, "model": {"kind": "mlp", "depth": 2, "width": 16, "init": "torch_default"}, **ONE_WORKER}
    outcome = run_sweep(load_spec("mnist_classification", quick=True, overrides=good), settings)
    client = MlflowClient(settings.resolved_tracking_uri)
    assert outcome.errors == 0 and client.get_run(outcome.parent_run_id).info.status == "FINISHED"


def test_a_driver_that_breaks_mid_sweep_ends_every_run(settings):
    from ray import tune
    from ray.tune.error import TuneError

    class Breaks(tune.Callback):  # injected fault: the driver fails while its trials are running
        def on_trial_result(self, iteration, trials, trial, result, **info):
            raise RuntimeError("the driver broke")

    slow = {**BROKEN, "epochs": 30, "model": {"kind": "mlp", "depth": 2, "width": 16, "init": "torch_default"}}
    spec = load_spec("mnist_classification", quick=True, overrides=slow)
    with pytest.raises(TuneError, match="the driver broke"):  # the callback's own error, as Tune reports it
        run_sweep(spec, settings, sweep_id="breaks1", callbacks=(Breaks(),))
    client = MlflowClient(settings.resolved_tracking_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.sweep_id = 'breaks1'")
    assert runs and "RUNNING" not in {r.info.status for r in runs}
