"""A sweep on a Ray cluster of three nodes on this machine (a head without CPUs and two worker
nodes with one CPU each, on loopback): trials run on both workers, and losing one worker
mid-sweep costs no trial, no epoch logged twice and no duplicate MLflow run: the trials it ran
are retried on the other node from their last checkpoint (Tune's FailureConfig)."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import ray
import torch
from mlflow.tracking import MlflowClient

from search_spaces import load_spec
from service.driver.sweeps import run_sweep
from service.local_servers import RayNode, free_port
from service.settings import Settings
from tests.machine_speed import scaled
from workers.checkpoints import STATE_FILE

pytestmark = pytest.mark.slow  # sweeps trained end to end on a real Ray (make test-fast leaves them out)

EPOCHS = 16
# 2 activations × 2 seeds on the real digits data; epochs of about half a second each (batch 16,
# 4 × 256 units), so that a node can be lost while its trial is half done.
SWEEP = {"dataset": "digits", "val_size": 200, "epochs": EPOCHS, "batch_size": 16, "model.depth": 4,
         "model.width": 256, "activation": ["gelu", "relu"], "lr": [0.003], "dropout": 0, "seeds": 2,
         "execution.rerun": True, "execution.max_failures": 3,
         "execution.mode": "per_trial"}  # (a trial per process: the lost node holds some of them, not a whole pack)


@pytest.fixture
def cluster():
    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes = [RayNode.head(port, 0, "--include-dashboard", "false")]
    try:
        _wait_until_listening(port)  # the head's GCS, which the workers join
        nodes += [RayNode.worker(address, 1, '{"worker_a": 1}'), RayNode.worker(address, 1, '{"worker_b": 1}')]
        ray.shutdown()  # this test's driver joins the cluster (another test may have left a local Ray)
        deadline = time.monotonic() + scaled(90)
        while time.monotonic() < deadline:
            ray.init(address=address, log_to_driver=False)
            if sum(n["Alive"] for n in ray.nodes()) == 3:
                break
            ray.shutdown()
            time.sleep(1)
        else:
            pytest.fail("the three-node Ray cluster did not come up")
        node_ids = {name: n["NodeID"] for n in ray.nodes() for name in ("worker_a", "worker_b")
                    if name in n["Resources"]}
        yield {"address": address, "nodes": dict(zip(("head", "worker_a", "worker_b"), nodes)), "node_ids": node_ids}
    finally:
        ray.shutdown()
        for node in reversed(nodes):
            node.stop()


def _wait_until_listening(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"the Ray head never listened on port {port}")


def search_runs(client: MlflowClient, filter_string: str) -> list:
    return client.search_runs([e.experiment_id for e in client.search_experiments()], filter_string)


def _kill_when_half_done(client: MlflowClient, sweep_id: str, node_id: str, node: RayNode, ray_results: str,
                         killed: dict) -> None:
    """Crash ``node`` while a trial on it is half done: by the epoch in its saved state, because the
    driver's MLflow log trails the trials by a few epochs on a busy machine (3 logged when the
    trial had saved 7, in one run here), and a trial may be over before its log shows it begun."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for run in search_runs(client, f"tags.sweep_id = '{sweep_id}' and tags.node_id = '{node_id}'"):
            saved = _saved_epoch(ray_results, run.data.tags["trial_id"])
            if 3 <= saved <= EPOCHS - 6:
                logged = len(client.get_metric_history(run.info.run_id, "train_loss"))
                node.crash()
                killed.update(run_id=run.info.run_id, saved=saved, logged=logged)
                return
        time.sleep(0.2)


def _saved_epoch(ray_results: str, trial_id: str) -> int:
    """The epoch in a trial's state.pt (workers.checkpoints), 0 before its first."""
    for path in Path(ray_results).glob(f"*/{trial_id}/{STATE_FILE}"):
        try:
            return int(torch.load(path, weights_only=True)["epoch"])
        except (OSError, RuntimeError, EOFError):
            pass  # being replaced: read it on the next round
    return 0


@pytest.mark.long("a sweep on a two-node Ray cluster, its worker node killed mid-sweep and the sweep finished on the head")
@pytest.mark.timeout(200)  # 42-77 s in full suites
def test_losing_a_worker_node_mid_sweep_loses_nothing(cluster, tmp_path):
    settings = Settings(home=tmp_path, ray_address=cluster["address"], download=False)
    spec = load_spec("mnist_classification", quick=True, overrides=SWEEP)
    client = MlflowClient(settings.resolved_tracking_uri)
    sweep_id, killed = "cluster-faults", {}
    killer = threading.Thread(target=_kill_when_half_done, args=(
        client, sweep_id, cluster["node_ids"]["worker_b"], cluster["nodes"]["worker_b"], settings.ray_results, killed),
        daemon=True)
    killer.start()
    outcome = run_sweep(spec, settings, sweep_id=sweep_id)
    killer.join(5)

    assert killed, "worker_b never ran a trial that could be interrupted"
    assert (outcome.trials, outcome.errors) == (4, 0)  # every trial finished
    runs = search_runs(client, f"tags.sweep_id = '{sweep_id}' and tags.role = 'trial'")
    assert len(runs) == 4 and len({r.data.tags["trial_id"] for r in runs}) == 4  # no duplicate runs
    assert {r.info.status for r in runs} == {"FINISHED"}
    for run in runs:  # every epoch logged once, in order, whatever happened to the trial
        assert [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")] == list(range(1, EPOCHS + 1))
    # the trials ran on both workers (each run names its nodes); the interrupted one moved to worker_a
    a, b = cluster["node_ids"]["worker_a"], cluster["node_ids"]["worker_b"]
    assert {node for r in runs for node in r.data.tags["node_ids"].split(",")} == {a, b}
    interrupted = client.get_run(killed["run_id"])
    assert interrupted.data.tags["node_ids"] == f"{b},{a}" and interrupted.data.tags["node_id"] == a
    # it resumed from its last checkpoint, not from epoch 0: at or after the epoch it had saved
    # (and so after every epoch logged: a trial saves an epoch before it reports it)
    resumed_from = int(interrupted.data.tags["resumed_from_epoch"])
    assert killed["logged"] <= killed["saved"] <= resumed_from < EPOCHS
    assert resumed_from <= killed["saved"] + 1  # the crash stopped it (one epoch may end while the node is killed)
    history = client.get_metric_history(killed["run_id"], "resumed_from_epoch")
    assert [m.step for m in history] == [resumed_from + 1]
    print(f"worker_b crashed when its trial had saved epoch {killed['saved']} (MLflow showed {killed['logged']}); "
          f"the retry resumed from epoch {resumed_from} on worker_a")
