"""A real Ray head (its own processes, loopback, 2 CPUs) and the real API server over HTTP."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from service.jobs import ensure_ray_token, ray_cli
from tests.conftest import REPO
from tests.servers import free_port

# A sweep that takes seconds: real digits, a small MLP, 2 activations × 2 seeds.
TINY = {"dataset": "digits", "val_size": 200, "epochs": 2, "batch_size": 64, "model.depth": 2, "model.width": 32,
        "activation": ["gelu", "relu"], "lr": [0.01], "dropout": 0, "seeds": 2}


@pytest.fixture(scope="session")
def ray_head():
    """``ray start --head --block``: terminating the command stops the head's processes."""
    ports = {"port": free_port(), "dashboard": free_port()}
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths have a length limit
    ray = ray_cli()
    ensure_ray_token()  # a new machine has none, and a token-auth head will not start without one
    process = subprocess.Popen(
        [ray, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(ports["port"]),
         "--dashboard-host", "127.0.0.1", "--dashboard-port", str(ports["dashboard"]), "--num-cpus", "2",
         "--temp-dir", temp_dir, "--include-dashboard", "true"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "RAY_AUTH_MODE": "token"})
    url = f"http://127.0.0.1:{ports['dashboard']}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/version", timeout=2).status_code in (200, 401):
                break
        except httpx.HTTPError:
            time.sleep(1)
    else:
        process.kill()
        pytest.fail("the Ray head did not start")
    yield {"dashboard_url": url, "address": f"127.0.0.1:{ports['port']}"}
    process.terminate()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()


class ApiServer:
    """``actsweep serve`` in its own process, as a user runs it."""

    def __init__(self, env: dict[str, str], log: Path | None = None):
        self.env, self.port, self.process, self.log = env, free_port(), None, log
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> "ApiServer":
        out = open(self.log, "ab") if self.log else None
        self.process = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(self.port),
                                         "--log-level", "info"], cwd=REPO, env=self.env, stdout=out, stderr=out)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{self.url}/healthz", timeout=2)
                return self
            except httpx.HTTPError:
                time.sleep(0.5)
        raise RuntimeError("the API did not start")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, timeout=60, headers=headers)


def api_env(tmp_path: Path, ray_head: dict, **extra: str) -> dict[str, str]:
    return {**os.environ, "ACTSWEEP_HOME": str(tmp_path / "home"), "ACTSWEEP_DOWNLOAD": "false",
            "ACTSWEEP_RAY_DASHBOARD_URL": ray_head["dashboard_url"], "ACTSWEEP_RAY_ADDRESS": ray_head["address"],
            "ACTSWEEP_START_LOCAL_RAY": "false", **extra}


@pytest.fixture(scope="module")
def server(ray_head, tmp_path_factory):
    api = ApiServer(api_env(tmp_path_factory.mktemp("api"), ray_head)).start()
    yield api
    api.stop()


def wait_for(client: httpx.Client, sweep_id: str, done, timeout: float = 300.0) -> dict:
    """Poll GET /sweeps/{id} until ``done(record)``; returns the record."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = client.get(f"/sweeps/{sweep_id}").json()
        if done(record):
            return record
        time.sleep(1)
    raise AssertionError(f"sweep {sweep_id} never reached the expected state: {record['state']} {record['progress']}")


def finished(record: dict) -> bool:
    return record["state"] in ("succeeded", "failed", "cancelled")
