"""The real API server over HTTP, on the session's real Ray head (tests.conftest.ray_head)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from service.local_servers import ApiServer
from tests.conftest import SIDE_BY_SIDE, TINY, new_home  # noqa: F401 (the API tests take them from here)


def api_env(tmp_path: Path, ray_head: dict, **extra: str) -> dict[str, str]:
    return {**os.environ, "ACTSWEEP_HOME": str(new_home(tmp_path / "home")), "ACTSWEEP_DOWNLOAD": "false",
            "ACTSWEEP_RAY_DASHBOARD_URL": ray_head["dashboard_url"], "ACTSWEEP_RAY_ADDRESS": ray_head["address"],
            "ACTSWEEP_START_LOCAL_RAY": "false", **extra}


@pytest.fixture(scope="session")
def server(ray_head, tmp_path_factory):
    """One API server (and its worker process) for every module's tests that need no server of their own."""
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
