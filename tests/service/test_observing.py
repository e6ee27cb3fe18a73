"""The UIs a user opens on a sweep, looked at as a user does, in headless Chromium: MLflow's UI
(a real ``mlflow server`` on the sweep's store) opens on the training runs comparing GELU, ReLU,
ELU and SOI, each named by its grid point and showing its dataset (Ray's dashboard:
tests/service/api/test_sweeps.py). The screenshot in docs/observing.md is the one this test
takes (ACTSWEEP_UPDATE_SCREENSHOTS=1 writes it there)."""
from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from search_spaces import load_spec
from service.driver.sweeps import run_sweep
from service.local_servers import MlflowServer
from service.runs.links import experiment_link
from service.settings import Settings
from tests.browser import keep_screenshot, load_in_chromium
from tests.conftest import ONE_WORKER, ensure_local_ray

pytestmark = pytest.mark.slow  # sweeps trained end to end on a real Ray (make test-fast leaves them out)

COMPARISON = {"dataset": "digits", "val_size": 200, "epochs": 3, "batch_size": 64, "model.depth": 3,
              "model.width": 64, "activation": ["gelu", "relu", "elu", "soi"], "lr": [0.01], "dropout": 0,
              "seeds": 2, **ONE_WORKER}


@pytest.mark.long("a sweep of 8 trials, an MLflow server, and its UI opened in headless Chromium")
@pytest.mark.timeout(160)  # 40-60 s in full suites (60.1 s at 35328a7)
def test_the_mlflow_ui_opens_on_the_training_runs_with_their_names_and_dataset(tmp_path):
    ensure_local_ray()
    settings = Settings(home=tmp_path / "home", download=False)
    outcome = run_sweep(load_spec("mnist_classification", quick=True, overrides=COMPARISON), settings)
    assert outcome.errors == 0
    names = {r.info.run_name for r in MlflowClient(settings.resolved_tracking_uri).search_runs(
        [outcome.experiment_id], "tags.role = 'trial'")}
    assert "soi lr=0.01 d=0 s=1" in names
    server = MlflowServer(settings.resolved_tracking_uri, tmp_path / "artifacts", tmp_path / "mlflow.log").start()
    try:
        # the link actsweep gives (REST links, the HTML report), in a browser that never opened MLflow before
        dom, screenshot = load_in_chromium(experiment_link(server.url, outcome.experiment_id), tmp_path,
                                           size="1600,900")
    finally:
        server.stop()
    # the runs table, not MLflow 3's GenAI overview (traces, "Detect issues"), is what opens
    for name in names:
        assert name in dom, f"the run {name!r} is not on the page the experiment opens on"
    assert "digits" in dom  # the Dataset column
    assert "Detect Issues" not in dom
    keep_screenshot(screenshot, "mlflow_runs.png")

