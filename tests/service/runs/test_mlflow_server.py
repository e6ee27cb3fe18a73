"""A sweep against a real ``mlflow server`` over HTTP, its store on a real PostgreSQL, artifacts served."""
from __future__ import annotations

import psutil
import pytest
from mlflow.tracking import MlflowClient

from search_spaces import load_spec
from service.driver.sweeps import run_sweep
from service.local_servers import MlflowServer
from service.reporting.figures import stored_figures
from service.reporting.render import render
from service.reporting.results import sweep_results
from service.runs.store import RunStore
from service.settings import Settings
from tests.conftest import TINY, ensure_local_ray

pytestmark = pytest.mark.slow  # sweeps trained end to end on a real Ray (make test-fast leaves them out)


@pytest.fixture(scope="module")
def server(postgres, tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-server")
    server = MlflowServer(postgres["mlflow"], root / "artifacts", root / "mlflow.log").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def settings(server, tmp_path_factory):
    ensure_local_ray()
    return Settings(home=tmp_path_factory.mktemp("home"), tracking_uri=server.url, download=False)


def test_a_sweep_logs_over_http_and_reads_back(settings):
    assert settings.resolved_tracking_uri.startswith("http://127.0.0.1:")
    outcome = run_sweep(load_spec("mnist_classification", quick=True, overrides=TINY), settings)
    assert (outcome.trials, outcome.errors) == (4, 0)

    results = sweep_results(settings.resolved_tracking_uri, outcome.sweep_id)
    assert len(results.runs) == 4 and set(results.runs["status"]) == {"FINISHED"}
    assert set(results.table["n_seeds"]) == {2} and results.spec["name"] == "mnist_classification"
    client = MlflowClient(settings.resolved_tracking_uri)
    run_id = results.runs["run_id"].iloc[0]
    assert [m.step for m in client.get_metric_history(run_id, "val_loss")] == [1, 2]
    figures = stored_figures(results, RunStore(settings.resolved_tracking_uri))  # served by the server's artifact proxy
    assert sorted(figures) == ["activations.png", "curves_train_loss_eval.png", "curves_val_loss.png", "robustness.png"]
    assert all(png.startswith(b"\x89PNG") for png in figures.values())
    assert render(results, "html", figures).count("<img ") == 4


def test_the_trial_cache_works_through_the_server(settings):
    first = run_sweep(load_spec("mnist_classification", quick=True, overrides={**TINY, "seeds": [7]}), settings)
    again = run_sweep(load_spec("mnist_classification", quick=True, overrides={**TINY, "seeds": [7]}), settings)
    assert (first.trials, first.reused, again.trials, again.reused) == (2, 0, 0, 2)


def test_the_server_runs_without_mlflows_job_runner(server):
    # MLflow 3 starts a job runner and Huey consumers for its GenAI jobs beside every server: eight more
    # processes, polling, and 4x the server's CPU in its first 30 s (docs/testing.md). actsweep runs
    # none of those jobs. (This runs after the sweeps above, long after the runner would have started.)
    below = [" ".join(p.cmdline()) for p in psutil.Process(server.process.pid).children(recursive=True)]
    assert not [c for c in below if "huey" in c or "jobs._job_runner" in c], below
    assert len(below) <= 1, below  # uvicorn's one worker
