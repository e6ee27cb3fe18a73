"""A real Ray head (its own processes, loopback, 2 CPUs) and the real API server over HTTP."""
from __future__ import annotations

import json
import os
import re
import time
import uuid
import warnings
from pathlib import Path

import httpx
import pytest

from service.control.jobs import dashboard_answers, ray_auth_headers, ray_error_reason
from service.control.local_head import HEAD_SYSTEM_CONFIG
from service.local_servers import ApiServer, RayNode, free_port
from service.patience import poll
from service.records import SweepStore
from tests.conftest import SIDE_BY_SIDE, TINY, new_home  # noqa: F401 (the API tests take them from here)
from tests.machine_speed import scaled


@pytest.fixture(scope="session")
def ray_head():
    """``ray start --head --block`` (service.local_servers.RayNode): stopping it stops the head's processes.
    Its ports are free when chosen, but another process may take one before Ray binds it (likelier
    with two test processes starting servers side by side): a head whose ``ray start`` exits at once
    is started again on new ports, up to three times. So is a head that answers but does not run a
    no-op job (one answered every submission of a CI run with HTTP 500 from its job API): with a
    warning that carries its logs' ends."""
    exits = []
    for _ in range(3):
        port, dashboard = free_port(), free_port()
        head = RayNode.head(port, 2, "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
                            "--include-dashboard", "true", "--system-config", json.dumps(HEAD_SYSTEM_CONFIG))
        url = f"http://127.0.0.1:{dashboard}"
        deadline = time.monotonic() + scaled(90)
        while not dashboard_answers(url) and head.process.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        if head.process.poll() is not None:  # `ray start` gave up: say why, and try new ports
            exits.append(_said(head))
            continue
        if not dashboard_answers(url):
            head.stop()
            pytest.fail(f"the Ray head did not start in 90 s; ray start said:\n{_said(head)}")
        refused = _does_not_run_a_job(url)
        if refused:
            exits.append(f"its job API: {refused}\n" + "\n".join(f"{title}:\n{text}" for title, text
                                                                  in ray_log_tails(head.temp_dir)))
            warnings.warn(f"a new Ray head did not run a no-op job, started again: {exits[-1]}")
            head.stop()
            continue
        break
    else:
        pytest.fail("three Ray heads did not start or run a job:\n" + "\n---\n".join(exits))
    yield {"dashboard_url": url, "address": f"127.0.0.1:{port}", "temp_dir": head.temp_dir}
    head.stop()


def _does_not_run_a_job(url: str) -> str | None:
    """Why the head at ``url`` did not run ``true`` as a Ray job (None where it did; the job is then deleted)."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(url, headers=ray_auth_headers())
    deadline = time.monotonic() + scaled(60)
    while True:
        try:
            job = client.submit_job(entrypoint="true", submission_id=f"ray-head-check-{uuid.uuid4().hex[:8]}")
            break
        except RuntimeError as exc:  # (a new head's job agent may not be up yet)
            if "No available agent" not in str(exc) or time.monotonic() > deadline:
                return ray_error_reason(exc)
            time.sleep(1)
    status = poll(lambda: (s := client.get_job_status(job)).is_terminal() and s, scaled(60), 0.5)
    if status != "SUCCEEDED":
        return f"the no-op job {job} ended {status or 'not at all within 60 s'}"
    client.delete_job(job)  # (off the Jobs page that test_sweeps.py's screenshot shows)
    return None


def _said(node: RayNode) -> str:
    return node.log.read_text(errors="replace")[-2000:]


RAY_LOGS_ON_FAILURE = ("dashboard_JobHead.log", "dashboard_agent.log", "raylet.out", "gcs_server.out")  # (.out: W/E/F lines)


def ray_log_tails(temp_dir: str, lines_each: int = 40) -> list[tuple[str, str]]:
    """The last lines of a Ray head's job API and node logs (for the C++ processes', their warnings and errors)."""
    logs, tails = Path(temp_dir) / "session_latest" / "logs", []
    for name in RAY_LOGS_ON_FAILURE:
        if (logs / name).is_file():
            lines = (logs / name).read_text(errors="replace").splitlines()
            if name.endswith(".out"):
                lines = [line for line in lines if re.match(r"\[\S+ \S+ [WEF] ", line)]
            if lines:
                tails.append((f"the Ray head's {name} (its last {lines_each} lines)", "\n".join(lines[-lines_each:])))
    return tails


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that used the shared Ray head carries the ends of the head's logs (its job API's
    and its node's): a fault of the head (a job API answering 500, seen once in CI) is then read in
    the report, not guessed at."""
    report = yield
    head = item.funcargs.get("ray_head") if report.failed and hasattr(item, "funcargs") else None
    if head is not None:
        report.sections.extend(ray_log_tails(head["temp_dir"]))
    return report


def _said(node: RayNode) -> str:
    return node.log.read_text(errors="replace")[-2000:]


def api_env(tmp_path: Path, ray_head: dict, **extra: str) -> dict[str, str]:
    return {**os.environ, "ACTSWEEP_HOME": str(new_home(tmp_path / "home")), "ACTSWEEP_DOWNLOAD": "false",
            "ACTSWEEP_RAY_DASHBOARD_URL": ray_head["dashboard_url"], "ACTSWEEP_RAY_ADDRESS": ray_head["address"],
            "ACTSWEEP_START_LOCAL_RAY": "false", **extra}


@pytest.fixture(scope="session")
def server(ray_head, tmp_path_factory):
    """One API server (and its worker process) for every module's tests that need no server of their own."""
    api = ApiServer(api_env(tmp_path_factory.mktemp("api"), ray_head)).start(timeout_s=scaled(60))
    yield api
    api.stop()


def wait_for(client: httpx.Client, sweep_id: str, done, timeout: float = 300.0) -> dict:
    """Poll GET /sweeps/{id} until ``done(record)``, for ``timeout`` seconds stretched like the bounds; returns the record."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        record = client.get(f"/sweeps/{sweep_id}").json()
        if done(record):
            return record
        time.sleep(1)
    raise AssertionError(f"sweep {sweep_id} never reached the expected state: {record['state']} {record['progress']}")


def finished(record: dict) -> bool:
    return record["state"] in ("succeeded", "failed", "cancelled")


def wait_in_store(store: SweepStore, sweep_id: str, done, timeout: float = 600.0, with_trials: bool = False):
    """Read the sweep database directly (no API call, so nothing but the reconciler acts) until ``done``
    (for ``timeout`` seconds stretched like the bounds)."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        record = store.get(sweep_id, with_trials=with_trials)
        if done(record):
            return record
        time.sleep(1)
    raise AssertionError(f"sweep {sweep_id} never got there: {record.state} {record.ray_job_id}")
