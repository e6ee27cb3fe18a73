"""Each ACTSWEEP_HOME's own Ray head, beside other Rays on one machine: started on free ports by
``serve``, reattached to only by its own home, ended by ``actsweep stop``; a cluster that cannot be
joined stops ``serve`` at once with one line."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from service.control.jobs import dashboard_status
from service.control.local_head import LocalHead
from service.local_servers import ApiServer, free_port
from service.patience import poll
from tests.conftest import new_home
from tests.machine_speed import scaled
from tests.service.api.conftest import TINY, api_env, finished, wait_for

ONE_TRIAL = {**TINY, "activation": ["relu"], "seeds": 1}  # what runs is not the point here, where it runs is


def _own_head_env(tmp_path: Path, name: str) -> dict[str, str]:
    # (warm processes released 5 s after the last sweep: the test sees the head keep none after that)
    env = {**os.environ, "ACTSWEEP_HOME": str(new_home(tmp_path / name)), "ACTSWEEP_DOWNLOAD": "false",
           "ACTSWEEP_NUM_CPUS": "2", "ACTSWEEP_WARM_IDLE_S": "5"}
    for variable in ("ACTSWEEP_RAY_DASHBOARD_URL", "ACTSWEEP_RAY_ADDRESS", "ACTSWEEP_START_LOCAL_RAY",
                     "ACTSWEEP_RAY_TEMP_DIR"):
        env.pop(variable, None)
    return env


def _healthy(server: ApiServer, timeout: float = 60.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{server.url} not healthy within {timeout:g} s: {httpx.get(f'{server.url}/healthz').text}")


def _idle_workers(head: LocalHead) -> list[int]:
    idle = []
    for process in head.processes():
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.name() == "ray::IDLE":
                idle.append(process.pid)
    return idle


def _stop(env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service.cli", "stop", *flags], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow  # three Ray heads and two sweeps
@pytest.mark.long("three Ray heads started, two sweeps trained, the heads stopped")
@pytest.mark.timeout(480)  # 77-195 s in full suites (193.5 s in a run of 2e64103)
def test_two_homes_run_side_by_side_each_on_its_own_head_and_stop_it(tmp_path):
    envs = {name: _own_head_env(tmp_path, name) for name in ("a", "b")}
    servers, heads = {}, {}

    def serve(name: str) -> float:  # the seconds from `serve` to a healthy API on its own new head
        launched = time.monotonic()
        servers[name] = ApiServer(envs[name], log=tmp_path / f"{name}.log").start(timeout_s=scaled(120))
        return _healthy(servers[name]) + (time.monotonic() - launched)

    try:
        with ThreadPoolExecutor(2) as pool:  # the two homes start at the same time, each its own head
            took = dict(zip(envs, pool.map(serve, envs)))
        for name, env in envs.items():
            heads[name] = LocalHead(**json.loads((Path(env["ACTSWEEP_HOME"]) / "ray" / "head.json").read_text()))
            print(f"home {name}: healthy {took[name]:.1f} s after `serve` started, head at {heads[name].dashboard_url}")
            assert took[name] < scaled(60)
        assert heads["a"].dashboard_url != heads["b"].dashboard_url and heads["a"].temp_dir != heads["b"].temp_dir

        sweeps = {}
        for name, server in servers.items():
            with server.client() as client:
                sweeps[name] = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                                            "overrides": ONE_TRIAL}).json()["id"]
        for name, server in servers.items():
            with server.client() as client:
                done = wait_for(client, sweeps[name], finished, timeout=300)
            assert done["state"] == "succeeded", done["error"]
            assert done["links"]["ray_job"].startswith(heads[name].dashboard_url)  # on its own head
        # between sweeps the head ends its idle worker processes (each costs CPU while it waits: HEAD_SYSTEM_CONFIG),
        # the warm ones once ACTSWEEP_WARM_IDLE_S has passed with no sweep
        assert poll(lambda: not _idle_workers(heads["a"]), timeout_s=30), _idle_workers(heads["a"])

        # b: a long sweep holds its head; `stop` refuses, naming it; --force ends the head, the sweep interrupted
        with servers["b"].client() as client:
            long = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                                "overrides": {**ONE_TRIAL, "epochs": 400}}).json()["id"]
            wait_for(client, long, lambda r: r["state"] == "running", timeout=120)
        servers["b"].stop()
        refused = _stop(envs["b"])
        assert refused.returncode == 1 and long in refused.stderr and "--force" in refused.stderr
        assert dashboard_status(heads["b"].dashboard_url) == 200
        forced = _stop(envs["b"], "--force")
        assert forced.returncode == 0 and "interrupted" in forced.stdout, forced.stderr
        assert dashboard_status(heads["b"].dashboard_url) is None and not heads["b"].processes()
        assert dashboard_status(heads["a"].dashboard_url) == 200  # the other home's head is untouched
        servers["b"] = ApiServer(envs["b"], log=tmp_path / "b2.log").start(timeout_s=scaled(120))  # it starts a new head for b
        with servers["b"].client() as client:
            record = client.get(f"/sweeps/{long}").json()
        assert record["state"] == "interrupted" and "actsweep stop --force" in record["error"]
    finally:
        for server in servers.values():
            server.stop()
        for env in envs.values():
            _stop(env, "--force")
    assert not any(head.processes() for head in heads.values())


def test_serve_pointed_at_a_head_it_cannot_join_exits_with_one_line(ray_head, tmp_path):
    env = {**api_env(tmp_path, ray_head), "RAY_AUTH_TOKEN": "not-this-heads-token"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--port", str(free_port())], env=env,
                          capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert ray_head["dashboard_url"] in lines[0] and ("HTTP 401" in lines[0] or "HTTP 403" in lines[0])

    nobody = f"http://127.0.0.1:{free_port()}"
    env = {**api_env(tmp_path, {"dashboard_url": nobody, "address": "127.0.0.1:1"}), "ACTSWEEP_RAY_JOIN_TIMEOUT_S": "2"}
    done = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--port", str(free_port())], env=env,
                          capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and nobody in lines[0] and "after 2 s" in lines[0], done.stderr
    print(f"both refusals took {time.monotonic() - started:.1f} s")
