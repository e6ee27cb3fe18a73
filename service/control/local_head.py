"""The Ray head an ACTSWEEP_HOME starts for itself, beside any other Ray on the machine.

``serve`` (or a submission, where the head has gone) starts it with ``ray start --head`` on free
ports and a temp folder of its own, and records where it is in ``HOME/ray/head.json``. A later
``serve`` with the same home reattaches to that head, and to no other: another home's head, or
anyone's on Ray's default ports, is never mistaken for it. The head is a daemon in a session of
its own, so it outlives the API (a restart loses no sweep); ``actsweep stop`` ends it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

import psutil

from service.patience import poll
from service.ports import free_port
from service.settings import Settings

HEAD_START_S = 60  # how long a started head's dashboard has to answer

# Ray keeps up to one idle worker process per CPU ready for tasks, each about 0.55 CPU-s a minute
# while the head waits (docs/rest.md). A sweep's trials are actors, which take a worker process each
# and end it with the actor, so a head that lives between sweeps keeps none of its own: with a soft
# limit of 0 an idle worker is ended a second after it goes idle (Ray's
# idle_worker_killing_time_threshold_ms). The exceptions are the warm trial workers a home's driver
# server asks for, kept for ACTSWEEP_WARM_IDLE_S; each imports a trial's modules as it starts
# (workers.prestart, which does nothing in a worker started for a job).
HEAD_SYSTEM_CONFIG = {"num_workers_soft_limit": 0, "preload_python_modules": ["workers.prestart"]}


@dataclass(frozen=True)
class LocalHead:
    """Where a home's head listens, and the temp folder that names its processes."""

    dashboard_url: str
    gcs_address: str
    temp_dir: str
    node_manager_port: int | None = None  # its raylet's (asked for warm trial workers: service.driver.warm)

    def processes(self) -> list[psutil.Process]:
        """The head's processes: those whose command line names its temp folder or, as Ray Client's
        server does (``--address=HOST:PORT``, on the node's own IP), its GCS port; and their children
        (Ray renames its workers ``ray::…``, so only their parentage ties them to the head)."""
        gcs = f":{self.gcs_address.rsplit(':', 1)[1]}"
        roots = []
        for process in psutil.process_iter(["cmdline"]):
            if any(self.temp_dir in arg or (arg.startswith("--address=") and arg.endswith(gcs))
                   for arg in process.info["cmdline"] or ()):
                roots.append(process)
        found = {p.pid: p for p in roots}
        for process in roots:
            try:
                found.update({child.pid: child for child in process.children(recursive=True)})
            except psutil.NoSuchProcess:
                pass
        return list(found.values())


def head_file(settings: Settings) -> Path:
    return settings.root / "ray" / "head.json"


def recorded_head(settings: Settings) -> LocalHead | None:
    """The head this home started, as recorded (it may have stopped since)."""
    try:
        return LocalHead(**json.loads(head_file(settings).read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise RuntimeError(f"{head_file(settings)} is not a Ray head's record ({exc}); delete it and start "
                           f"`actsweep serve` again") from exc


@contextmanager
def head_lock(settings: Settings):
    """Held while a head is started (an exclusive lock on HOME/ray/.lock, across processes)."""
    head_file(settings).parent.mkdir(parents=True, exist_ok=True)
    with open(head_file(settings).parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def dashboard_url_of(settings: Settings) -> str | None:
    """ACTSWEEP_RAY_DASHBOARD_URL where set, else the dashboard of the head this home started; None
    where there is neither yet."""
    if settings.ray_dashboard_url:
        return settings.ray_dashboard_url.rstrip("/")
    head = recorded_head(settings)
    return head.dashboard_url if head else None


def _temp_dir(settings: Settings) -> str:
    if settings.ray_temp_dir:
        return settings.ray_temp_dir
    # short, and one per home: Ray's socket paths have a length limit, and the folder names the head's processes
    return f"/tmp/actsweep-ray-{hashlib.sha256(str(settings.root).encode()).hexdigest()[:10]}"


# Ray waits a fixed 30 s for a new head's raylet to register with its GCS ("The current node timed out
# during startup"); on a machine whose process starts run slow, that wait can pass while nothing is wrong.
HEAD_START_TRIES = 3
RAY_STARTUP_TIMEOUT = "timed out during startup"


def start_head(settings: Settings, dashboard_url: str | None, ray_cli: str) -> LocalHead:
    """``ray start --head`` on free ports (the dashboard at ``dashboard_url`` where one is given),
    token auth on, in a session of its own; recorded in HOME/ray/head.json. A start that Ray gave up
    on while its raylet registered is made again, up to HEAD_START_TRIES in all; a failed start is
    cleared away."""
    for attempt in range(1, HEAD_START_TRIES + 1):
        try:
            return _start_head_once(settings, dashboard_url, ray_cli)
        except RuntimeError as exc:
            if RAY_STARTUP_TIMEOUT not in str(exc) or attempt == HEAD_START_TRIES:
                raise


def _start_head_once(settings: Settings, dashboard_url: str | None, ray_cli: str) -> LocalHead:
    dashboard_port = urlparse(dashboard_url).port if dashboard_url else free_port()
    gcs_port = free_port()
    head = LocalHead(dashboard_url=f"http://127.0.0.1:{dashboard_port}", gcs_address=f"127.0.0.1:{gcs_port}",
                     temp_dir=_temp_dir(settings), node_manager_port=free_port())
    command = [ray_cli, "start", "--head", "--node-ip-address", "127.0.0.1", "--temp-dir", head.temp_dir,
               "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard_port), "--include-dashboard", "true",
               # free ports, not Ray's fixed defaults, which another Ray on this machine may hold
               "--port", str(gcs_port), "--dashboard-agent-listen-port", str(free_port()),
               "--ray-client-server-port", str(free_port()), "--node-manager-port", str(head.node_manager_port),
               "--system-config", json.dumps(HEAD_SYSTEM_CONFIG)]
    if settings.num_cpus:
        command += ["--num-cpus", str(settings.num_cpus)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, start_new_session=True,
                          env={**os.environ, "RAY_AUTH_MODE": "token"})
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        stop_head(head, settings)  # (what it had started of its GCS, dashboard and raylet)
        raise RuntimeError(f"`ray start --head` failed (exit {done.returncode}): {last}")
    head_file(settings).parent.mkdir(parents=True, exist_ok=True)
    head_file(settings).write_text(json.dumps(asdict(head), indent=2) + "\n")
    return head


# Ray's own `ray start --block` gives each of its processes a second to exit on SIGTERM before
# SIGKILL (ray._private.node). Its GCS, told to stop, waits on flushing events to agents that are
# already gone and outlasts any grace (15 s here held every `actsweep stop` for 15 s); a head being
# discarded holds nothing a graceful exit would save.
STOP_GRACE_S = 2.0


def stop_head(head: LocalHead, settings: Settings, grace_s: float = STOP_GRACE_S) -> int:
    """End the head's processes (SIGTERM, then SIGKILL after ``grace_s``) and forget it; how many
    processes there were. Other Rays on the machine are untouched (``ray stop`` would end them all)."""
    processes = head.processes()
    for process in processes:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=30)
    head_file(settings).unlink(missing_ok=True)
    return len(processes)


def wait_for_dashboard(url: str, answers, timeout_s: float = HEAD_START_S) -> bool:
    return bool(poll(lambda: answers(url), timeout_s))
