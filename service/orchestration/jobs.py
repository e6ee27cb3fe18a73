"""Sweeps as Ray jobs: each sweep's driver runs on the cluster, not in the API process, so it
outlives an API restart (Ray's job submission API, through the dashboard's HTTP address)."""
from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from functools import cached_property
from pathlib import Path
from urllib.parse import urlparse

import httpx

from service.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
TERMINAL_JOB_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


def job_id_for(sweep_id: str, restart: int = 0) -> str:
    """The Ray job id of a sweep's driver; a driver that replaces a dead one gets ``-restart<n>``."""
    return f"actsweep-{sweep_id}" + (f"-restart{restart}" if restart else "")


def restart_count(job_id: str) -> int:
    head, _, count = job_id.rpartition("-restart")
    return int(count) if head and count.isdigit() else 0


def dashboard_answers(url: str, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(f"{url}/api/version", timeout=timeout).status_code in (200, 401, 403)
    except httpx.HTTPError:
        return False


def ray_auth_headers() -> dict[str, str]:
    """Ray ≥ 2.59 protects local clusters with a token; send the one Ray itself would use
    (RAY_AUTH_TOKEN, else the file at RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token)."""
    token = os.environ.get("RAY_AUTH_TOKEN")
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token")).expanduser()
    if not token and path.is_file():
        token = path.read_text().strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


def ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


def ensure_ray_token() -> None:
    """Token auth needs a token before ``ray start``: make one (``ray get-auth-token --generate``,
    into ~/.ray/auth_token) where there is none, as ``ray.init`` does for a local Ray."""
    if not ray_auth_headers():
        subprocess.run([ray_cli(), "get-auth-token", "--generate"], check=True, capture_output=True, timeout=120)


def start_local_head(settings: Settings) -> None:
    """``ray start --head`` with its dashboard at ACTSWEEP_RAY_DASHBOARD_URL, token auth on; a
    daemon that outlives this process (stop it with ``ray stop``)."""
    ensure_ray_token()
    port = urlparse(settings.ray_dashboard_url).port or 8265
    command = [ray_cli(), "start", "--head", "--node-ip-address", "127.0.0.1",
               "--dashboard-host", "127.0.0.1", "--dashboard-port", str(port), "--include-dashboard", "true",
               # its job agent on a free port, not Ray's fixed default, which another Ray here may hold
               "--dashboard-agent-listen-port", str(_free_port())]
    if settings.num_cpus:
        command += ["--num-cpus", str(settings.num_cpus)]
    subprocess.run(command, check=True, capture_output=True, timeout=120, env={**os.environ, "RAY_AUTH_MODE": "token"})
    for _ in range(60):
        if dashboard_answers(settings.ray_dashboard_url):
            return
        time.sleep(1)
    raise RuntimeError(f"the local Ray head did not answer at {settings.ray_dashboard_url}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


AGENT_WAIT_S = 60  # how long a submission waits for a just-started head's job agent


class RayJobs:
    """Submits, stops and inspects sweep drivers on the Ray cluster."""

    def __init__(self, settings: Settings):
        self.settings = settings

    @cached_property
    def client(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.settings.ray_dashboard_url, headers=ray_auth_headers())

    def ensure_cluster(self) -> None:
        if not dashboard_answers(self.settings.ray_dashboard_url):
            if self.settings.ray_address or not self.settings.start_local_ray:
                raise RuntimeError(f"no Ray dashboard answers at {self.settings.ray_dashboard_url}")
            start_local_head(self.settings)

    def submit(self, sweep_id: str, restart: int = 0) -> str:
        """Start the sweep's driver as a Ray job; the job id is derived from the sweep id
        (and the restart's number, for a driver that replaces a dead one)."""
        settings = self.settings
        env = {k: v for k, v in os.environ.items() if k.startswith("ACTSWEEP_")}
        env.update({  # resolved here so the driver writes where this API reads
            "ACTSWEEP_HOME": str(settings.root),
            "ACTSWEEP_TRACKING_URI": settings.resolved_tracking_uri,
            "ACTSWEEP_DATABASE_URL": settings.resolved_database_url,
            "ACTSWEEP_DATA_DIR": str(settings.resolved_data_dir),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        })
        env.pop("ACTSWEEP_API_TOKEN", None)  # the driver does not need it; keep it out of job metadata
        entrypoint = f"{shlex.quote(sys.executable)} -m service.orchestration.driver {shlex.quote(sweep_id)}"
        deadline = time.monotonic() + AGENT_WAIT_S
        while True:
            try:
                return self.client.submit_job(entrypoint=entrypoint, submission_id=job_id_for(sweep_id, restart),
                                              runtime_env={"env_vars": env}, metadata={"sweep_id": sweep_id})
            except RuntimeError as exc:
                # A Ray head that has just started answers before its job agent is up.
                if "No available agent" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def stop(self, job_id: str) -> None:
        self.client.stop_job(job_id)

    def status(self, job_id: str) -> str | None:
        """The job's status name (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), None if unknown."""
        try:
            return self.client.get_job_status(job_id).value
        except Exception:  # the job is not known to this cluster (or the cluster is gone)
            return None

    def ping(self) -> dict:
        ok = dashboard_answers(self.settings.ray_dashboard_url)
        return {"ok": ok, "dashboard": self.settings.ray_dashboard_url}
