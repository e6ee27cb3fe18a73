"""A full disk mid-sweep: ACTSWEEP_HOME (the MLflow store, Tune's checkpoints) on a small tmpfs,
filled while a sweep trains. The sweep fails and says why, the API stays up, and the sweep records
(SQLite, on another disk) and the MLflow store still open and read back."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from service.local_servers import ApiServer
from service.patience import poll
from service.records import SweepStore
from tests.machine_speed import scaled
from tests.service.api.conftest import TINY, api_env, finished, wait_for


@pytest.fixture
def small_disk(tmp_path):
    """A 256 MiB tmpfs (mounting needs root, which the CI machine has)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(folder: Path) -> int:
    """Write zeros until the disk is full; bytes written."""
    written = 0
    with open(folder / "filler", "wb") as out:
        try:
            while True:
                out.write(b"\0" * 2 ** 20)
                out.flush()
                written += 2 ** 20
        except OSError:
            pass
    return written


def _trial_histories(mlflow: MlflowClient, sweep_id: str) -> dict[str, int]:
    """Each trial run of the sweep → the number of val_loss values MLflow holds for it."""
    runs = mlflow.search_runs([e.experiment_id for e in mlflow.search_experiments()], f"tags.sweep_id = '{sweep_id}'")
    return {r.info.run_id: len(mlflow.get_metric_history(r.info.run_id, "val_loss"))
            for r in runs if r.data.tags.get("role") == "trial"}


# In WAL mode MLflow's writes go on a while after the disk is full (into the write-ahead log), and
# the trials fail first, on their checkpoints; Tune then cannot read its own results back.
@pytest.mark.long("a sweep trained until a 256 MiB disk fills, then failed (in WAL mode by its trials first, after the outage patience)")
@pytest.mark.timeout(400)  # 30-31 s alone, 57-69 s in full suites of three test processes (a Xeon; 2 cores)
@pytest.mark.parametrize("wal", ["false", "true"], ids=["sqlite", "sqlite-wal"])
def test_a_full_disk_fails_the_sweep_clearly_and_loses_no_record(ray_head, small_disk, tmp_path, wal):
    home = small_disk / "home"
    database = f"sqlite:///{tmp_path / 'sweeps.db'}"  # where the failure can be written down
    server = ApiServer(api_env(tmp_path, ray_head, ACTSWEEP_HOME=str(home), ACTSWEEP_DATABASE_URL=database,
                               ACTSWEEP_OUTAGE_PATIENCE_S="5", ACTSWEEP_SQLITE_WAL=wal), log=tmp_path / "api.log")
    server.start(timeout_s=scaled(60))
    try:
        with server.client() as client:
            sweep = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                                 "overrides": {**TINY, "epochs": 2000}}).json()
            wait_for(client, sweep["id"], lambda r: r["progress"]["trial_epochs_done"] >= 20, timeout=300)
            # what is stored before the disk fills must read back after it: wait until every running
            # trial's run has epochs in MLflow (they are written off Tune's loop, a moment later)
            mlflow = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
            before = poll(lambda: (h := _trial_histories(mlflow, sweep["id"])) and all(h.values()) and h, 120, 0.5)
            assert before, "no trial run has epochs in MLflow before the disk fills"
            filled = _fill(small_disk)
            started = time.monotonic()
            done = wait_for(client, sweep["id"], finished, timeout=300)
            took = time.monotonic() - started
            assert client.get("/healthz").status_code in (200, 503)  # the API answers
            listed = client.get("/sweeps").json()
        assert done["state"] == "failed"
        assert "No space left on device" in done["error"] or "disk is full" in done["error"], done["error"]
        assert listed["total"] >= 1 and sweep["id"] in {s["id"] for s in listed["items"]}
        assert SweepStore(database).get(sweep["id"]).state == "failed"  # the records read back
        after = _trial_histories(MlflowClient(f"sqlite:///{home / 'mlflow.db'}"), sweep["id"])  # opens, reads back
        lost = {run: (n, after.get(run, 0)) for run, n in before.items() if after.get(run, 0) < n}
        assert not lost, f"epochs stored before the disk filled are gone (run: before, after): {lost}"
        print(f"disk filled ({filled / 2 ** 20:.0f} MiB of zeros) mid-sweep: failed {took:.0f} s later with "
              f"{done['error']!r}; {len(after)} trial runs read back from MLflow, none with fewer epochs")
    finally:
        server.stop()
