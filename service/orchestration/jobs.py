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

from service.settings import Settings, mask_secrets, write_secret

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
    daemon that outlives this process (stop it with ``ray stop``).

    It starts in a session of its own: stopping the API the usual way (Ctrl-C, systemd or
    ``docker stop`` signal the whole process group) leaves the head, and the sweeps running on it,
    alive for the next API to reattach to."""
    ensure_ray_token()
    port = urlparse(settings.ray_dashboard_url).port or 8265
    command = [ray_cli(), "start", "--head", "--node-ip-address", "127.0.0.1",
               "--dashboard-host", "127.0.0.1", "--dashboard-port", str(port), "--include-dashboard", "true",
               # free ports, not Ray's fixed defaults, which another Ray on this machine may hold
               "--port", str(_free_port()), "--dashboard-agent-listen-port", str(_free_port()),
               "--ray-client-server-port", str(_free_port())]
    if settings.num_cpus:
        command += ["--num-cpus", str(settings.num_cpus)]
    if settings.ray_temp_dir:
        command += ["--temp-dir", settings.ray_temp_dir]
    subprocess.run(command, check=True, capture_output=True, timeout=120, start_new_session=True,
                   env={**os.environ, "RAY_AUTH_MODE": "token"})
    for _ in range(60):
        if dashboard_answers(settings.ray_dashboard_url):
            return
        time.sleep(1)
    raise RuntimeError(f"the local Ray head did not answer at {settings.ray_dashboard_url}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# never passed to a driver's Ray job (its environment shows in Ray's job metadata)
SECRET_VARIABLES = frozenset({"ACTSWEEP_API_TOKEN", "ACTSWEEP_TRACKING_URI", "ACTSWEEP_DATABASE_URL",
                              "ACTSWEEP_CACHE_SECRET"})
AGENT_WAIT_S = 60  # how long a submission waits for a just-started head's job agent
STATUS_TRIES = 4  # a job's status is asked this often (0.25, 0.5, 1 s apart) before the cluster counts as away


class ClusterUnreachable(RuntimeError):
    """The Ray cluster's job API did not answer (not: it answered that a job is unknown)."""


class RayJobs:
    """Submits, stops and inspects sweep drivers on the Ray cluster."""

    def __init__(self, settings: Settings):
        self.settings = settings

    @cached_property
    def client(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.settings.ray_dashboard_url, headers=ray_auth_headers())

    def ensure_cluster(self) -> None:
        """Reattach to the Ray head that answers at ACTSWEEP_RAY_DASHBOARD_URL (one this service
        started before a restart, or anyone's), or start a local one where none does and we may."""
        if not dashboard_answers(self.settings.ray_dashboard_url):
            if self.settings.ray_address or not self.settings.start_local_ray:
                raise ClusterUnreachable(f"no Ray dashboard answers at {self.settings.ray_dashboard_url}")
            start_local_head(self.settings)

    def submit(self, sweep_id: str, restart: int = 0) -> str:
        """Start the sweep's driver as a Ray job; the job id is derived from the sweep id
        (and the restart's number, for a driver that replaces a dead one)."""
        settings = self.settings
        if not dashboard_answers(settings.ray_dashboard_url):
            self.ensure_cluster()  # reattach, or start the local head again (ClusterUnreachable if neither)
        env = {k: v for k, v in os.environ.items() if k.startswith("ACTSWEEP_") and k not in SECRET_VARIABLES}
        env.update({  # resolved here so the driver writes where this API reads
            "ACTSWEEP_HOME": str(settings.root),
            "ACTSWEEP_DATA_DIR": str(settings.resolved_data_dir),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        })
        # The stores' URLs may hold passwords: Ray keeps a job's environment in its metadata, which its
        # dashboard shows. They travel as files only their owner reads (ACTSWEEP_*_FILE).
        for name, value in (("tracking_uri", settings.resolved_tracking_uri),
                            ("database_url", settings.resolved_database_url)):
            if mask_secrets(value) != value:
                env[f"ACTSWEEP_{name.upper()}_FILE"] = str(write_secret(settings.root / "secrets" / name, value))
            else:
                env[f"ACTSWEEP_{name.upper()}"] = value
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

    def node_resources(self) -> list[dict[str, float]]:
        """Each alive node's Ray resources (CPU, GPU, ...), from the dashboard's state API."""
        try:
            answer = httpx.get(f"{self.settings.ray_dashboard_url}/api/v0/nodes", headers=ray_auth_headers(),
                               timeout=5.0)
            nodes = answer.json()["data"]["result"]["result"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            raise ClusterUnreachable(f"the Ray cluster at {self.settings.ray_dashboard_url} did not answer") from None
        return [node.get("resources_total", {}) for node in nodes if node.get("state") == "ALIVE"]

    def stop(self, job_id: str) -> None:
        self.client.stop_job(job_id)

    def status(self, job_id: str) -> str | None:
        """The job's status name (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), or None where the
        cluster answers that it does not know the job. A cluster that does not answer is asked
        again with backoff (STATUS_TRIES times), then :class:`ClusterUnreachable`: a blip is not a
        verdict on the sweep."""
        delay = 0.25
        for attempt in range(STATUS_TRIES):
            try:
                answer = httpx.get(f"{self.settings.ray_dashboard_url}/api/jobs/{job_id}", headers=ray_auth_headers(),
                                   timeout=5.0)
                if answer.status_code == 404:
                    return None
                if answer.status_code == 200:
                    return answer.json()["status"]
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            if attempt < STATUS_TRIES - 1:
                time.sleep(delay)
                delay *= 2
        raise ClusterUnreachable(f"the Ray cluster at {self.settings.ray_dashboard_url} did not answer")

    def ping(self) -> dict:
        ok = dashboard_answers(self.settings.ray_dashboard_url)
        return {"ok": ok, "dashboard": self.settings.ray_dashboard_url}
