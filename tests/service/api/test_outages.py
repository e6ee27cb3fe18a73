"""Outages that lose nothing: the MLflow server, then the sweep database (PostgreSQL), killed by pid
for 30 s in the middle of a sweep run through the real API on a real Ray head."""
from __future__ import annotations

import time

import httpx
import pytest
from mlflow.tracking import MlflowClient

from service.local_servers import ApiServer, MlflowServer, PostgresServer
from service.records import SweepStore
from tests.service.api.conftest import TINY, api_env, finished, wait_for

OUTAGE_S = 30
EPOCHS = 300  # 4 trials × 300 epochs of a tiny MLP: long enough to span the outage


def _epochs_done(client: httpx.Client, sweep_id: str) -> int:
    return client.get(f"/sweeps/{sweep_id}").json()["progress"]["trial_epochs_done"]


def _trial_histories(mlflow: MlflowClient, sweep_id: str) -> list[list]:
    runs = mlflow.search_runs([e.experiment_id for e in mlflow.search_experiments()], f"tags.sweep_id = '{sweep_id}'")
    return [mlflow.get_metric_history(r.info.run_id, "val_loss") for r in runs if r.data.tags.get("role") == "trial"]


def _epochs_between(histories: list[list], start_s: float, end_s: float) -> int:
    """Epochs whose metrics were stamped (when the driver took them) inside the outage."""
    return sum(start_s * 1000 <= m.timestamp <= end_s * 1000 for history in histories for m in history)


@pytest.mark.timeout(300)  # an API, a sweep of 1,200 trial-epochs and a 30 s outage
def test_mlflow_down_for_30_s_mid_sweep_loses_no_epoch(ray_head, tmp_path):
    mlflow = MlflowServer(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", tmp_path / "mlflow.log").start()
    server = ApiServer(api_env(tmp_path, ray_head, ACTSWEEP_TRACKING_URI=mlflow.url), log=tmp_path / "api.log").start()
    try:
        with server.client() as client:
            sweep = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                                 "overrides": {**TINY, "epochs": EPOCHS}}).json()
            wait_for(client, sweep["id"], lambda r: r["progress"]["trial_epochs_done"] >= 40, timeout=300)
            mlflow.kill()
            killed_at, at_kill = time.time(), _epochs_done(client, sweep["id"])
            time.sleep(OUTAGE_S)
            during = _epochs_done(client, sweep["id"])
            back_at = time.time()
            mlflow.start()
            done = wait_for(client, sweep["id"], finished, timeout=600)
        assert done["state"] == "succeeded", done["error"]
        assert during > at_kill + 20  # the trials kept training, and their states kept coming, while MLflow was away
        client = MlflowClient(mlflow.url)
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                  f"tags.sweep_id = '{sweep['id']}'")
        assert len(runs) == 5 and {r.info.status for r in runs} == {"FINISHED"}  # 4 trials and the sweep
        histories = _trial_histories(client, sweep["id"])
        assert [[m.step for m in h] for h in histories] == [list(range(1, EPOCHS + 1))] * 4  # every epoch, once
        buffered = _epochs_between(histories, killed_at, back_at)
        assert buffered > 20
        print(f"MLflow killed by pid at {at_kill} trial-epochs and down {OUTAGE_S} s; {buffered} epochs trained "
              f"meanwhile were kept and sent once it was back; all {4 * EPOCHS} epochs of the 4 trials in MLflow, "
              f"each once, every run FINISHED")
    finally:
        server.stop()
        mlflow.stop()


def test_the_sweep_database_down_for_30_s_mid_sweep_is_503s_then_reconciled(ray_head, tmp_path):
    postgres = PostgresServer(("actsweep",))
    url = postgres.urls["actsweep"]
    server = ApiServer(api_env(tmp_path, ray_head, ACTSWEEP_DATABASE_URL=url), log=tmp_path / "api.log").start()
    try:
        with server.client() as client:
            sweep = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                                 "overrides": {**TINY, "epochs": EPOCHS}}).json()
            wait_for(client, sweep["id"], lambda r: r["progress"]["trial_epochs_done"] >= 40, timeout=300)
            at_kill_epochs = _epochs_done(client, sweep["id"])
            postgres.kill()
            at_kill, killed_at = time.monotonic(), time.time()
            answers = []
            while time.monotonic() - at_kill < OUTAGE_S:
                answers.append(client.get(f"/sweeps/{sweep['id']}"))
                time.sleep(2)
            back_at = time.time()
            postgres.start()
            done = wait_for(client, sweep["id"], finished, timeout=600)
        codes = {answer.status_code for answer in answers}
        assert codes == {503} and all("sweep database" in answer.text for answer in answers)
        assert done["state"] == "succeeded", done["error"]
        assert [(t["state"], t["epoch"]) for t in done["trials"]] == [("succeeded", EPOCHS)] * 4
        trained = _epochs_between(_trial_histories(MlflowClient(f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}"),
                                                   sweep["id"]), killed_at, back_at)
        assert trained > 20  # the trials trained on while the database was away
        assert SweepStore(url).get(sweep["id"]).state == "succeeded"
        print(f"PostgreSQL killed at {at_kill_epochs} trial-epochs for {OUTAGE_S} s: {len(answers)} reads answered "
              f"{sorted(codes)}; {trained} trial-epochs trained meanwhile; the sweep ended succeeded "
              f"with every trial at epoch {EPOCHS}")
    finally:
        server.stop()
        postgres.stop()
