"""Sweeps as Ray jobs: each sweep's driver runs on the cluster, not in the API process, so it
outlives an API restart (Ray's job submission API, through the dashboard's HTTP address)."""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from service.control.local_head import (HEAD_START_S, LocalHead, dashboard_url_of, head_lock, recorded_head,
                                              start_head, stop_head, wait_for_dashboard)
from service.patience import poll
from service.settings import Settings, mask_secrets, write_secret

REPO_ROOT = Path(__file__).resolve().parents[2]
# the driver server's socket, in a job's environment: service.driver.warm.SERVER_VARIABLE (named here,
# not imported: the control plane reaches nothing of the driver, tests/test_layers.py)
DRIVER_SERVER_VARIABLE = "ACTSWEEP_DRIVER_SERVER"
WARM_TRIAL_WORKERS = 4  # at most this many warm trial workers (each about 0.6 GB: torch imported)
TERMINAL_JOB_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


def job_id_for(sweep_id: str, restart: int = 0) -> str:
    """The Ray job id of a sweep's driver; a driver that replaces a dead one gets ``-restart<n>``."""
    return f"actsweep-{sweep_id}" + (f"-restart{restart}" if restart else "")


def restart_count(job_id: str) -> int:
    head, _, count = job_id.rpartition("-restart")
    return int(count) if head and count.isdigit() else 0


def dashboard_answers(url: str, timeout: float = 2.0) -> bool:
    """Whether a Ray dashboard answers at ``url`` (whether or not it would take our token)."""
    return dashboard_status(url, timeout) is not None


def dashboard_status(url: str, timeout: float = 2.0) -> int | None:
    """The HTTP status of the dashboard's version route, with our token: 200 where we may use it,
    401/403 where it is another's; None where nothing answers."""
    try:
        return httpx.get(f"{url}/api/version", headers=ray_auth_headers(), timeout=timeout).status_code
    except httpx.HTTPError:
        return None


def ray_auth_headers() -> dict[str, str]:
    """Ray ≥ 2.59 protects local clusters with a token; send the one Ray itself would use
    (RAY_AUTH_TOKEN, else the file at RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token)."""
    token = os.environ.get("RAY_AUTH_TOKEN")
    path = _token_path()
    if not token and path.is_file():
        token = path.read_text().strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


def _token_path() -> Path:
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token")).expanduser()


def ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


def ensure_ray_token() -> None:
    """Token auth needs a token before ``ray start``: make one where there is none, as ``ray.init``
    does for a local Ray, in the file Ray reads. Under a lock, written whole (a new file renamed over
    it) and never replaced: Ray's own (``ray get-auth-token --generate``) looks, then truncates and
    writes, so processes starting heads at once on a new machine (the test suite's, two `serve`s)
    could each write a token of their own, and a head's processes read different ones."""
    if ray_auth_headers():
        return
    path = _token_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (released as the file closes)
        if ray_auth_headers():  # made meanwhile, by the process that held the lock
            return
        fresh = path.with_name(f".{path.name}.{os.getpid()}")
        with open(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write(secrets.token_hex(32))  # as Ray makes one: 256 random bits, in hex
        os.replace(fresh, path)


AGENT_WAIT_S = 60  # how long a submission waits for a just-started head's job agent
SERVER_ERROR_WAIT_S = 15  # how long a submission asks again after any other error inside Ray's job API (HTTP 500)
SUBMIT_EVERY_S = 1.0  # a submission's tries, this far apart
STATUS_TRIES = 4  # a job's status is asked this often (0.25, 0.5, 1 s apart) before the cluster counts as away


def ray_error_reason(exc: BaseException) -> str:
    """One line for an error from Ray's job API: its first line ("Request failed with status code
    500: Traceback (most recent call last):") with the exception that ends the server's traceback,
    the line that says what went wrong."""
    text = str(exc).rstrip()
    text = text[:-1] if text.endswith("..") or text.endswith("\n.") else text  # (the "." Ray's client appends)
    lines = [line.strip() for line in text.splitlines() if line.strip(" .")]
    if not lines:
        return type(exc).__name__
    first, last = lines[0], lines[-1]
    if len(lines) == 1 or not first.endswith("Traceback (most recent call last):"):
        return first
    return first.removesuffix("Traceback (most recent call last):").rstrip() + " " + last


def _patience_for(exc: RuntimeError) -> float:
    text = str(exc)
    if "No available agent" in text:  # a head that has just started answers before its job agent is up
        return AGENT_WAIT_S
    if "status code 500" in text and "already exists" not in text:  # a fault inside Ray's job head or agent
        return SERVER_ERROR_WAIT_S
    return 0.0  # a refusal (a bad request, an id taken): asking again changes nothing


class ClusterUnreachable(RuntimeError):
    """The Ray cluster's job API did not answer (not: it answered that a job is unknown)."""


def _answers(path: str) -> bool:
    """A driver server listens on the Unix socket ``path`` (a connection taken, then closed)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


class _NoAnswer(Exception):
    pass


class RayJobs:
    """Submits, stops and inspects sweep drivers on the Ray cluster."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._client, self._client_url = None, None

    @property
    def dashboard_url(self) -> str:
        """ACTSWEEP_RAY_DASHBOARD_URL where set, else the dashboard of the head this home started
        (HOME/ray/head.json); ClusterUnreachable where there is neither yet."""
        url = dashboard_url_of(self.settings)
        if url is None:
            raise ClusterUnreachable(f"no Ray head started for {self.settings.root} yet")
        return url

    @property
    def client(self):
        from ray.job_submission import JobSubmissionClient

        if self._client is None or self._client_url != self.dashboard_url:  # a head started again: new ports
            self._client_url = self.dashboard_url
            self._client = JobSubmissionClient(self._client_url, headers=ray_auth_headers())
        return self._client

    def _joins_a_cluster(self) -> bool:
        return bool(self.settings.ray_address) or not self.settings.start_local_ray

    def ensure_cluster(self, wait_s: float = 0.0) -> str:
        """The dashboard URL of a Ray head we may use: the cluster we are pointed at (waiting up to
        ``wait_s`` for it to answer), or this home's own head, reattached to or started. Never a head
        that refuses our token: ClusterUnreachable, naming the address and the reason."""
        explicit = self.settings.ray_dashboard_url
        url = explicit.rstrip("/") if explicit else None
        if url is None:
            head = recorded_head(self.settings)
            if head is not None and head.processes():  # (a dead head's port may have gone to another Ray)
                url = head.dashboard_url
        if url is not None:  # (one that answers at all answers at once: 200, or a refusal)
            status = poll(lambda: dashboard_status(url), wait_s if self._joins_a_cluster() else 0.0)
            if status == 200:
                return url
            if status is not None:
                raise ClusterUnreachable(f"the Ray head at {url} refuses this machine's token (HTTP {status}): it is "
                                         f"another's; set RAY_AUTH_TOKEN to its token, or point "
                                         f"ACTSWEEP_RAY_DASHBOARD_URL elsewhere")
        if self._joins_a_cluster():
            raise ClusterUnreachable(f"no Ray dashboard answers at {url or 'ACTSWEEP_RAY_DASHBOARD_URL (unset)'}"
                                     + (f" after {wait_s:g} s" if wait_s else ""))
        with head_lock(self.settings):  # one start at a time: concurrent submissions find the head the first made
            head = recorded_head(self.settings)
            if url is None and head is not None and head.processes():  # started meanwhile, or still starting
                if wait_for_dashboard(head.dashboard_url, lambda u: dashboard_status(u) == 200):
                    return head.dashboard_url
                raise ClusterUnreachable(f"this home's Ray head (in {head.temp_dir}) runs but its dashboard did not "
                                         f"answer at {head.dashboard_url}; `actsweep stop --force` ends it")
            ensure_ray_token()
            head = start_head(self.settings, url, ray_cli())
        if not wait_for_dashboard(head.dashboard_url, lambda u: dashboard_status(u) == 200):
            raise ClusterUnreachable(f"the local Ray head started in {head.temp_dir} did not answer at "
                                     f"{head.dashboard_url} within {HEAD_START_S} s")
        return head.dashboard_url

    def submit(self, sweep_id: str, restart: int = 0, experiment: str = "") -> str:
        """Start the sweep's driver as a Ray job; the job id is derived from the sweep id
        (and the restart's number, for a driver that replaces a dead one)."""
        settings = self.settings
        self.ensure_cluster()  # reattach, or start the local head again (ClusterUnreachable if neither)
        env = self.driver_environment()
        server = self.ensure_driver_server(env)
        job_id = job_id_for(sweep_id, restart)
        entrypoint = f"{shlex.quote(sys.executable)} -m service.driver {shlex.quote(sweep_id)}"
        runtime_env = {"env_vars": env}
        if server:
            # A job with no runtime environment of its own: Ray gives an actor a waiting worker only where
            # their runtime environments are the same, so its trials take the warm trial workers (started
            # with none). The driver reads its environment from a file only its owner reads.
            env[DRIVER_SERVER_VARIABLE] = server
            env_file = write_secret(settings.root / "ray" / "drivers" / f"{job_id}.json", json.dumps(env))
            entrypoint = (f"PYTHONPATH={shlex.quote(env['PYTHONPATH'])} {entrypoint} "
                          f"--environment {shlex.quote(str(env_file))}")
            runtime_env = None
        started = time.monotonic()
        while True:
            try:
                return self.client.submit_job(entrypoint=entrypoint, submission_id=job_id, runtime_env=runtime_env,
                                              # job_name: the name Ray's dashboard lists the job by
                                              metadata={"job_name": " ".join(filter(None, ("actsweep", experiment, sweep_id))),
                                                        "sweep_id": sweep_id, "experiment": experiment})
            except RuntimeError as exc:
                if "already exists" in str(exc) and self.status(job_id) is not None:
                    return job_id  # an earlier try of this submission went in (or another replica's restart)
                if time.monotonic() - started >= _patience_for(exc):
                    raise RuntimeError(ray_error_reason(exc)) from exc
            time.sleep(SUBMIT_EVERY_S)

    def driver_environment(self) -> dict[str, str]:
        """The environment a sweep's driver gets: these settings, passed explicitly (not this process's
        environment), resolved so the driver writes where this API reads."""
        settings = self.settings
        env = settings.environment()
        env.update({
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
        return env

    def ensure_driver_server(self, env: dict[str, str] | None = None) -> str | None:
        """The socket of this home's driver server (service.driver.warm), started where it is not
        running; None where drivers start cold: a cluster we joined (its jobs run on its head, not
        here), or ACTSWEEP_WARM_IDLE_S=0. The server also keeps warm trial workers ready: one per CPU, up
        to WARM_TRIAL_WORKERS (the raylet starts no more ahead of a job than it has CPUs)."""
        head = recorded_head(self.settings)
        if self._joins_a_cluster() or head is None or self.settings.warm_idle_s <= 0:
            return None
        path = str(Path(head.temp_dir) / "drivers.sock")
        if _answers(path):
            return path
        with head_lock(self.settings):  # (one server: concurrent submissions find the one the first started)
            if not _answers(path) and Path(head.temp_dir).is_dir():
                log = open(Path(head.temp_dir) / "drivers.log", "ab")
                trial_workers = min(WARM_TRIAL_WORKERS, int(self.settings.num_cpus or os.cpu_count() or 1))
                subprocess.Popen([sys.executable, "-m", "service.driver.warm", "serve", path,
                                  str(self.settings.warm_idle_s), str(trial_workers if head.node_manager_port else 0),
                                  f"127.0.0.1:{head.node_manager_port}"],
                                 # (Ray reads RAY_AUTH_MODE as it is imported: as the head's jobs have it)
                                 env={**os.environ, **(env or self.driver_environment()), "RAY_AUTH_MODE": "token"},
                                 cwd=str(REPO_ROOT),
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
                log.close()
                poll(lambda: os.path.exists(path), 10.0, every_s=0.05)  # (it binds before its imports)
        return path if os.path.exists(path) else None

    def node_resources(self) -> list[dict[str, float]]:
        """Each alive node's Ray resources (CPU, GPU, ...), from the dashboard's state API."""
        try:
            answer = httpx.get(f"{self.dashboard_url}/api/v0/nodes", headers=ray_auth_headers(),
                               timeout=5.0)
            nodes = answer.json()["data"]["result"]["result"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            raise ClusterUnreachable(f"the Ray cluster at {self.dashboard_url} did not answer") from None
        alive = [node.get("resources_total") or {} for node in nodes if node.get("state") == "ALIVE"]
        if not any(alive):  # no node's resources: not a cluster with none, an answer without them (a busy
            # head's state API answered a submission with no node once, under a full test suite): unknown
            raise ClusterUnreachable(f"the Ray cluster at {self.dashboard_url} reported no node's resources")
        return alive

    def stop(self, job_id: str) -> None:
        """Ask Ray to stop the job (RuntimeError where Ray refuses: a job it does not know, or one over)."""
        import requests

        try:
            self.client.stop_job(job_id)
        except requests.exceptions.RequestException as exc:
            raise ClusterUnreachable(f"the Ray cluster at {self.dashboard_url} did not answer") from exc

    def status(self, job_id: str) -> str | None:
        """The job's status name (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), or None where the
        cluster answers that it does not know the job. A cluster that does not answer is asked
        again with backoff (STATUS_TRIES times), then :class:`ClusterUnreachable`: a blip is not a
        verdict on the sweep."""
        info = self.info(job_id)
        return info["status"] if info else None

    def info(self, job_id: str) -> dict | None:
        """The job as Ray's job API shows it (status, message: why it ended), or None where the
        cluster does not know it; ClusterUnreachable after STATUS_TRIES tries with backoff."""
        try:
            for attempt in Retrying(stop=stop_after_attempt(STATUS_TRIES), wait=wait_exponential(0.25, max=2),
                                    retry=retry_if_exception_type(_NoAnswer), reraise=True):
                with attempt:
                    return self._info_once(job_id)
        except _NoAnswer:
            raise ClusterUnreachable(f"the Ray cluster at {self.dashboard_url} did not answer") from None

    def _info_once(self, job_id: str) -> dict | None:
        # (Ray's job API over HTTP with a 5 s timeout: JobSubmissionClient.get_job_info sends its request
        # with none, and a head that accepts connections but hangs would hang the API's reconciler)
        try:
            answer = httpx.get(f"{self.dashboard_url}/api/jobs/{job_id}", headers=ray_auth_headers(), timeout=5.0)
            if answer.status_code == 404:
                return None
            if answer.status_code == 200 and "status" in answer.json():
                return answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise _NoAnswer() from exc
        raise _NoAnswer()

    def stop_own_head(self, force: bool, store) -> tuple[LocalHead | None, list[str]]:
        """End the head this home started (``actsweep stop``): once no sweep is open, or with
        ``force`` anyway, marking the open sweeps ``interrupted``. Returns (the head, or None where
        none was recorded; the sweeps still open, which stop it unless ``force``)."""
        head = recorded_head(self.settings)
        open_ids = [record.id for record in store.open_sweeps()]
        if head is None or (open_ids and not force):
            return head, open_ids
        for sweep_id in open_ids:
            store.update(sweep_id, cancel_requested=True)
            store.finish(sweep_id, "interrupted", error="`actsweep stop --force` ended its Ray head")
        stop_head(head, self.settings)
        return head, open_ids
