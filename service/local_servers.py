"""Real servers started on loopback, for the tests and the load benchmark: PostgreSQL (Debian's
packages), an ``mlflow server`` over HTTP backed by it, Ray nodes, and ``actsweep serve``."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerUnavailable(RuntimeError):
    """A server this machine cannot start (its program is not installed)."""


def _postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise ServerUnavailable("PostgreSQL is not installed (apt-get install postgresql); .ci/run installs it")
    return Path(found[-1]).parent


def _as_postgres_user() -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its commands as the ``postgres`` user."""
    if os.geteuid() != 0:
        return []
    pwd.getpwnam("postgres")  # Debian's package creates it
    return ["runuser", "-u", "postgres", "--"]


@contextmanager
def postgres_server(databases: tuple[str, ...]):
    """A throwaway PostgreSQL cluster on 127.0.0.1; yields {database: SQLAlchemy URL}."""
    bin_dir, run_as, port = _postgres_bin(), _as_postgres_user(), free_port()
    # its own folder directly under /tmp: pytest's are private to the user running the tests
    folder = Path(tempfile.mkdtemp(prefix="actsweep-pg-"))
    data, sockets = folder / "pgdata", folder / "pgsocket"
    sockets.mkdir()
    if run_as:
        shutil.chown(folder, "postgres")
        shutil.chown(sockets, "postgres")
    subprocess.run([*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", "actsweep", "--auth=trust",
                    "--no-sync"], check=True, capture_output=True, timeout=120)
    subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(folder / "postgres.log"),
                    "-o", f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                   check=True, capture_output=True, timeout=120)
    try:
        for name in databases:
            subprocess.run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "actsweep", name],
                           check=True, capture_output=True, timeout=60)
        yield {name: f"postgresql+psycopg://actsweep@127.0.0.1:{port}/{name}" for name in databases}
    finally:
        subprocess.run([*run_as, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def mlflow_server(backend_uri: str, artifacts: Path, log: Path):
    """``mlflow server`` on 127.0.0.1 with ``backend_uri`` and served artifacts; yields its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                                    "--backend-store-uri", backend_uri, "--serve-artifacts",
                                    "--artifacts-destination", str(artifacts), "--workers", "1"],
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


class RayNode:
    """One Ray node on loopback, as ``ray start ... --block``: terminating that command stops the
    node's processes (raylet, workers), which is how a test loses a node."""

    def __init__(self, *args: str, env: dict[str, str] | None = None):
        from service.orchestration.jobs import ray_cli

        self.temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths have a length limit
        # ports of its own where Ray has fixed defaults, so that it starts beside any other Ray on the machine
        # (a second node's job agent on the default port stays up without its HTTP service: no job submission)
        ports = ["--dashboard-agent-listen-port", str(free_port()), "--ray-client-server-port", str(free_port())]
        self.process = subprocess.Popen([ray_cli(), "start", "--block", "--node-ip-address", "127.0.0.1",
                                         "--temp-dir", self.temp_dir, *ports, *args],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env or dict(os.environ))

    @classmethod
    def head(cls, port: int, num_cpus: int, *extra: str, env: dict[str, str] | None = None) -> "RayNode":
        return cls("--head", "--port", str(port), "--num-cpus", str(num_cpus), *extra, env=env)

    @classmethod
    def worker(cls, head_address: str, num_cpus: int, resources: str = "{}") -> "RayNode":
        return cls("--address", head_address, "--num-cpus", str(num_cpus), "--resources", resources)

    def crash(self) -> None:
        """SIGKILL every process of the node (raylet, its workers, its agents) at once, as when its
        machine fails: the descendants of ``ray start`` (Ray renames its workers ``ray::…``, so their
        command lines do not name the node) and any process whose command line names its temp folder."""
        tree = _descendants(self.process.pid)
        sigkill_where(lambda pid, args: pid in tree or any(self.temp_dir.encode() in arg for arg in args))
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()


def sigkill_where(matches) -> list[int]:
    """SIGKILL every process for which ``matches(pid, arguments as bytes)``; their pids."""
    killed = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            pid = int(cmdline.parent.name)
            if matches(pid, cmdline.read_bytes().split(b"\0")):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        except (OSError, ValueError):
            pass  # gone already
    return killed


def _descendants(root: int) -> set[int]:
    """``root`` and every process below it, from each process's parent in /proc/PID/stat."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # the field after "(comm) state"
        except (OSError, ValueError, IndexError):
            continue  # gone already
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += children.get(pid, [])
    return found


class ApiServer:
    """``actsweep serve`` in its own process, as a user runs it."""

    def __init__(self, env: dict[str, str], log: Path | None = None):
        self.env, self.port, self.process, self.log = env, free_port(), None, log
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> "ApiServer":
        out = open(self.log, "ab") if self.log else None
        # in a process group of its own, as under systemd or in a container: stop_group() signals all of it
        self.process = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(self.port),
                                         "--log-level", "info"], cwd=REPO, env=self.env, stdout=out, stderr=out,
                                        start_new_session=True)
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

    def stop_group(self, sig: int = signal.SIGTERM) -> None:
        """Signal the API's whole process group, as Ctrl-C, systemd or ``docker stop`` do, and wait for it."""
        os.killpg(self.process.pid, sig)
        self.process.wait(60)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, timeout=60, headers=headers)
