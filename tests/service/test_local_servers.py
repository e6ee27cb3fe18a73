"""service.local_servers: an API that cannot start says why, at once, not after its timeout, and one
that does not answer in time is not left running."""
from __future__ import annotations

import os
import time

import pytest

from service.local_servers import ApiServer
from tests.conftest import new_home
from tests.machine_speed import scaled


@pytest.mark.slow  # starts the API's process (4 s): make test only
def test_an_api_that_exits_at_start_fails_at_once_with_its_logs_end(tmp_path):
    env = {**os.environ, "ACTSWEEP_HOME": str(new_home(tmp_path / "home")),
           "ACTSWEEP_MAX_TRIALS_PER_SWEEP": "many"}  # (injected: a setting that cannot be read)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"the API did not start: it exited with [1-9]") as caught:
        ApiServer(env, log=tmp_path / "api.log").start(timeout_s=scaled(120))
    assert "max_trials_per_sweep" in str(caught.value)  # the log's end names the bad setting
    assert time.monotonic() - started < scaled(60)  # (it exited: not the 120 s of waiting for an answer)


@pytest.mark.slow  # starts the API's process: make test only
def test_an_api_that_does_not_answer_in_time_is_not_left_running(tmp_path):
    env = {**os.environ, "ACTSWEEP_HOME": str(new_home(tmp_path / "home"))}
    server = ApiServer(env, log=tmp_path / "api.log")
    with pytest.raises(RuntimeError, match=r"the API did not start: it did not answer in 0 s"):
        server.start(timeout_s=0.2)  # (far less than it takes to import and listen)
    assert server.process.poll() is not None  # its process group ended, not left running for nobody
