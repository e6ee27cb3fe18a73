"""A trial that runs out of memory fails alone: its allocation fails against its own memory limit
(RLIMIT_DATA, workers.trainable.memory_limit), it ends FAILED with the reason, and the node, the
API and another sweep's trials carry on.

Left to Ray's memory monitor instead, a node low on memory loses the sweeps' drivers first (it
kills job supervisors before trial actors: seen on this machine, both sweeps' drivers killed), which
is why a trial on CPUs runs under a limit of its own."""
from __future__ import annotations

import pytest

from tests.service.api.conftest import TINY, finished, wait_for


@pytest.mark.long("a sweep through the API whose trial grows past its memory limit while the others finish")
@pytest.mark.timeout(400)  # 71-93 s in full suites of two test processes, 153-181 s of three
def test_a_trial_past_its_memory_limit_fails_alone(server):
    with server.client() as client:
        small = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True, "overrides": {
            **TINY, "activation": ["relu"], "seeds": 1, "epochs": 150}}).json()
        wait_for(client, small["id"], lambda r: r["progress"]["trial_epochs_done"] >= 5, timeout=300)
        # an 8 × 4096 MLP with Adam holds about 2 GB; this trial may hold 0.5 GB more than at its start
        hungry = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True, "overrides": {
            "dataset": "digits", "val_size": 200, "epochs": 5, "batch_size": 64, "model.depth": 8,
            "model.width": 4096, "activation": ["relu"], "lr": [0.001], "dropout": 0, "seeds": 1,
            "execution.max_failures": 0, "execution.memory_limit_gb": 0.5}})
        assert hungry.status_code == 202, hungry.text  # it fits the node, as far as the estimate goes
        failed = wait_for(client, hungry.json()["id"], finished, timeout=300)
        assert client.get("/healthz").status_code == 200
        done = wait_for(client, small["id"], finished, timeout=600)
    assert failed["state"] == "failed" and [t["state"] for t in failed["trials"]] == ["failed"]
    assert "1 of 1 trials failed" in failed["error"] and "went past its memory limit" in failed["error"], failed["error"]
    assert done["state"] == "succeeded", done["error"]  # the other sweep's trial carried on
    assert done["progress"]["trial_epochs_done"] == 150
    print(f"the hungry sweep failed with {failed['error']!r}; the other sweep succeeded")
