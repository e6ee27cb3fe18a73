"""A warm home (service.driver.warm, service.warm_run): the driver server forks each sweep's driver
for the Ray job that asks, its trials take the warm trial workers, a driver whose job process is
killed dies with it, and `actsweep run` goes through the home's running service."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from service.driver.warm import warm_workers
from service.local_servers import ApiServer
from service.patience import poll
from tests.conftest import new_home
from tests.machine_speed import scaled
from tests.service.api.conftest import TINY, finished, wait_for

REPO = Path(__file__).resolve().parents[3]
ONE_TRIAL = {**TINY, "activation": ["relu"], "seeds": 1, "execution.rerun": True}


def _driver(env: dict, sweep_id: str) -> subprocess.CompletedProcess:
    """``python -m service.driver SWEEP_ID``: a Ray job's entrypoint, as Ray runs it."""
    return subprocess.run([sys.executable, "-m", "service.driver", sweep_id], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=scaled(120))


def test_the_driver_server_forks_a_driver_that_writes_to_the_jobs_streams_and_exits_with_its_code(tmp_path):
    home = new_home(tmp_path / "home")
    env = {**os.environ, "ACTSWEEP_HOME": str(home)}
    socket_path = str(tmp_path / "drivers.sock")
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "service.driver.warm", "serve", socket_path, "3"], env=env,
                              cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        assert poll(lambda: os.path.exists(socket_path), scaled(30), every_s=0.05)
        warm = _driver({**env, "ACTSWEEP_DRIVER_SERVER": socket_path}, "nosuchsweep")
        # the forked driver's stderr is the job's: it says what the driver found, and its code is the job's
        assert warm.returncode == 2 and "no sweep nosuchsweep" in warm.stderr, warm.stderr
        assert re.search(r"forked driver \d+ for nosuchsweep", (tmp_path / "server.log").read_text())
        # with no sweep to drive, the server exits after its idle time and removes its socket
        assert server.wait(scaled(60)) == 0 and not os.path.exists(socket_path)
    finally:
        if server.poll() is None:
            server.kill()
        log.close()
    cold = _driver({**env, "ACTSWEEP_DRIVER_SERVER": socket_path}, "nosuchsweep")  # no server: the job drives itself
    assert cold.returncode == 2 and "no sweep nosuchsweep" in cold.stderr, cold.stderr
    assert (tmp_path / "server.log").read_text().count("forked driver") == 1


def _own_home_env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "ACTSWEEP_HOME": str(new_home(tmp_path / "home")), "ACTSWEEP_DOWNLOAD": "false",
           "ACTSWEEP_NUM_CPUS": "2"}
    for variable in ("ACTSWEEP_RAY_DASHBOARD_URL", "ACTSWEEP_RAY_ADDRESS", "ACTSWEEP_START_LOCAL_RAY",
                     "ACTSWEEP_RAY_TEMP_DIR"):
        env.pop(variable, None)
    return env


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service.cli", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=scaled(300))


@pytest.mark.slow  # a home's own head, its API and three sweeps
@pytest.mark.long("a home's own head and API started, two one-trial sweeps and a killed one")
@pytest.mark.timeout(480)
def test_a_warm_home_forks_its_drivers_its_cli_runs_through_it_and_a_killed_driver_dies(tmp_path):
    env = _own_home_env(tmp_path)
    server = ApiServer(env, log=tmp_path / "api.log").start(timeout_s=scaled(120))
    try:
        head = httpx.get(f"{server.url}/healthz", timeout=30).json()
        assert head["status"] == "ok", head
        temp_dir = Path(_head_temp_dir(env))
        # warm trial workers wait on the head (one per CPU): torch imported, in Tune's runtime environment
        assert poll(lambda: len(_waiting(warm_workers(str(temp_dir)))) == 2, scaled(120), every_s=0.5), \
            (temp_dir / "drivers.log").read_text()  # (started and waiting: one still importing would be passed over)
        warm = set(warm_workers(str(temp_dir)))
        with server.client() as client:
            posted = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                                  "overrides": ONE_TRIAL}).json()
            done = wait_for(client, posted["id"], finished, timeout=300)
        assert done["state"] == "succeeded", done["error"]
        forks = (temp_dir / "drivers.log").read_text()
        assert f"for {posted['id']}" in forks, forks  # its driver was forked by the home's driver server
        trial_processes = {task["worker_pid"] for task in _ray_tasks(done["links"]["ray_dashboard"])
                           if task["name"] == "ImplicitFunc.__init__"}
        assert trial_processes and trial_processes <= warm, (trial_processes, warm)  # its trial took a warm worker

        # the CLI finds the home's service and submits there: no Ray of its own, the same tables
        run = _cli(env, "run", "mnist_classification", "--quick", "--set", "epochs=1", "--set", "train_subset=1000",
                   "--set", "activation=relu", "--set", "seeds=1", "--rerun")
        assert run.returncode == 0, run.stderr[-3000:]
        assert "submitted to the service at" in run.stderr and "| relu" in run.stdout, run.stderr[-3000:]
        with server.client() as client:
            listed = client.get("/sweeps").json()["items"]
        assert len(listed) == 2 and all(s["state"] == "succeeded" for s in listed)

        # a driver whose job process is killed dies with it (and the reconciler replaces it, as before)
        with server.client() as client:
            long = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                                "overrides": {**ONE_TRIAL, "epochs": 400}}).json()["id"]
            wait_for(client, long, lambda r: r["state"] == "running", timeout=120)
        child = int(re.search(rf"forked driver (\d+) for {long}", (temp_dir / "drivers.log").read_text()).group(1))
        job = [p for p in psutil.process_iter(["name", "cmdline"]) if p.info["name"] != "sh"  # (Ray runs it under sh -c)
               and f"service.driver {long}" in " ".join(p.info["cmdline"] or ())]
        assert len(job) == 1 and psutil.pid_exists(child)
        job[0].send_signal(signal.SIGKILL)
        assert poll(lambda: not _alive(child), scaled(10), every_s=0.1), "the forked driver outlived its job"
    finally:
        server.stop()
        _cli(env, "stop", "--force")


def _ray_tasks(dashboard: str) -> list[dict]:
    from service.control.jobs import ray_auth_headers

    answer = httpx.get(f"{dashboard}/api/v0/tasks", params={"detail": "true", "limit": 1000},
                       headers=ray_auth_headers(), timeout=30)
    return answer.json()["data"]["result"]["result"]


def _head_temp_dir(env: dict) -> str:
    import json

    return json.loads((Path(env["ACTSWEEP_HOME"]) / "ray" / "head.json").read_text())["temp_dir"]


def _waiting(pids: list[int]) -> list[int]:
    """Those of ``pids`` that have registered with Ray and wait (Ray names them so)."""
    found = []
    for pid in pids:
        try:
            if psutil.Process(pid).name() == "ray::IDLE":
                found.append(pid)
        except psutil.NoSuchProcess:
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
