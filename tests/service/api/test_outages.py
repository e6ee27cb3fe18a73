"""Outages that lose nothing: the MLflow server and the sweep database (PostgreSQL), each killed by
pid for 16 s in the middle of one sweep run through the real API on a real Ray head. The outages
overlap: MLflow alone for 6 s, both for 10 s, then the database alone for 6 s. Each outlasts what a
client waits on its own (MLflow's HTTP retry: 1 s; service.settings), so the driver's own keeping
and retrying is what carries the sweep through."""
from __future__ import annotations

import time

import httpx
import pytest
from mlflow.tracking import MlflowClient

from service.local_servers import ApiServer, MlflowServer, PostgresServer
from service.records import SweepStore
from tests.machine_speed import scaled
from tests.service.api.conftest import SIDE_BY_SIDE, TINY, api_env, finished, wait_for

OUTAGE_S = 16  # each server is down this long
OVERLAP_S = 6  # the sweep database goes down this long after MLflow, while MLflow is still down
EPOCHS = 225  # 4 trials × 225 epochs of a tiny MLP: 40-110 before the first kill; 43 trial-epochs a second on
# an idle Xeon, so training ends some 12 s into the database's outage (6 s on a CPU twice as fast); about
# 4 a second in a busy full suite, where the sweep outlasts both outages
KEPT = 12  # trial-epochs that must train through each outage: more than a flush's worth in flight (1 s)


def _epochs_done(client: httpx.Client, sweep_id: str) -> int:
    return client.get(f"/sweeps/{sweep_id}").json()["progress"]["trial_epochs_done"]


def _trial_histories(mlflow: MlflowClient, sweep_id: str) -> list[list]:
    runs = mlflow.search_runs([e.experiment_id for e in mlflow.search_experiments()], f"tags.sweep_id = '{sweep_id}'")
    return [mlflow.get_metric_history(r.info.run_id, "val_loss") for r in runs if r.data.tags.get("role") == "trial"]


def _epochs_between(histories: list[list], start_s: float, end_s: float) -> int:
    """Epochs whose metrics were stamped (when the driver took them) inside the outage."""
    return sum(start_s * 1000 <= m.timestamp <= end_s * 1000 for history in histories for m in history)


def _reads_until(client: httpx.Client, sweep_id: str, until: float) -> list[httpx.Response]:
    answers = []
    while time.monotonic() < until:
        answers.append(client.get(f"/sweeps/{sweep_id}"))
        time.sleep(2)
    return answers


@pytest.mark.long("an API, a sweep of 900 trial-epochs, and MLflow and the database each down for 16 s of it")
@pytest.mark.timeout(720)  # 142.7 s in a full suite (f75cb23); at 1,600 trial-epochs and 30-s outages: 191-456 s
def test_mlflow_and_the_sweep_database_down_for_16_s_each_mid_sweep_lose_nothing(ray_head, tmp_path):
    postgres = PostgresServer(("actsweep",))
    url = postgres.urls["actsweep"]
    mlflow = MlflowServer(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", tmp_path / "mlflow.log").start()
    server = ApiServer(api_env(tmp_path, ray_head, ACTSWEEP_TRACKING_URI=mlflow.url, ACTSWEEP_DATABASE_URL=url),
                       log=tmp_path / "api.log").start(timeout_s=scaled(60))
    try:
        with server.client() as client:
            sweep = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                                 "overrides": {**TINY, **SIDE_BY_SIDE, "epochs": EPOCHS}}).json()
            wait_for(client, sweep["id"], lambda r: r["progress"]["trial_epochs_done"] >= 40, timeout=300)
            # MLflow down: the API still answers, and the trials' states keep coming
            mlflow.kill()
            mlflow_killed, mlflow_down_at = time.time(), time.monotonic()
            at_mlflow_kill = _epochs_done(client, sweep["id"])
            time.sleep(OVERLAP_S - 1)
            while_mlflow_down = _epochs_done(client, sweep["id"])
            time.sleep(max(0.0, mlflow_down_at + OVERLAP_S - time.monotonic()))
            # the sweep database down too: every read is a 503 naming it
            postgres.kill()
            database_killed, database_down_at = time.time(), time.monotonic()
            answers = _reads_until(client, sweep["id"], mlflow_down_at + OUTAGE_S)
            mlflow_back = time.time()
            mlflow.start()
            answers += _reads_until(client, sweep["id"], database_down_at + OUTAGE_S)
            database_back = time.time()
            postgres.start()
            done = wait_for(client, sweep["id"], finished, timeout=600)
        # the sweep database: 503s while it was away, then every state reconciled
        codes = {answer.status_code for answer in answers}
        assert codes == {503} and all("sweep database" in answer.text for answer in answers), codes
        assert done["state"] == "succeeded", done["error"]
        assert [(t["state"], t["epoch"]) for t in done["trials"]] == [("succeeded", EPOCHS)] * 4
        assert SweepStore(url).get(sweep["id"]).state == "succeeded"
        # MLflow: the trials kept training while it was away, and every epoch reached it once it was back
        assert while_mlflow_down > at_mlflow_kill + KEPT
        mlflow_client = MlflowClient(mlflow.url)
        runs = mlflow_client.search_runs([e.experiment_id for e in mlflow_client.search_experiments()],
                                         f"tags.sweep_id = '{sweep['id']}'")
        assert len(runs) == 5 and {r.info.status for r in runs} == {"FINISHED"}  # 4 trials and the sweep
        histories = _trial_histories(mlflow_client, sweep["id"])
        assert [[m.step for m in h] for h in histories] == [list(range(1, EPOCHS + 1))] * 4  # every epoch, once
        kept_through_mlflow = _epochs_between(histories, mlflow_killed, mlflow_back)
        trained_through_database = _epochs_between(histories, database_killed, database_back)
        assert kept_through_mlflow > KEPT and trained_through_database > KEPT
        print(f"MLflow killed by pid at {at_mlflow_kill} trial-epochs and down {OUTAGE_S} s: {kept_through_mlflow} "
              f"epochs trained meanwhile were kept and sent once it was back. PostgreSQL killed {OVERLAP_S} s later "
              f"for {OUTAGE_S} s: {len(answers)} reads answered {sorted(codes)}; {trained_through_database} "
              f"trial-epochs trained meanwhile. All {4 * EPOCHS} epochs of the 4 trials in MLflow, each once, every "
              f"run FINISHED; the sweep ended succeeded with every trial at epoch {EPOCHS}")
    finally:
        server.stop()
        mlflow.stop()
        postgres.stop()
