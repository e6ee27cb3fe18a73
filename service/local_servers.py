"""Real servers started on loopback, for the tests and the load benchmark: PostgreSQL (Debian's
packages), an ``mlflow server`` over HTTP backed by it, Ray nodes, and ``actsweep serve``."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

from service.patience import poll
from service.ports import free_port  # (re-exported: the tests take it from here)

REPO = Path(__file__).resolve().parent.parent


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


class PostgresServer:
    """A throwaway PostgreSQL cluster on 127.0.0.1 that can be killed and started again on its port
    (its data kept): ``urls`` are the SQLAlchemy URLs of its databases."""

    def __init__(self, databases: tuple[str, ...]):
        self.bin_dir, self.run_as, self.port = _postgres_bin(), _as_postgres_user(), free_port()
        # its own folder directly under /tmp: pytest's are private to the user running the tests
        self.folder = Path(tempfile.mkdtemp(prefix="actsweep-pg-"))
        self.data, self.sockets = self.folder / "pgdata", self.folder / "pgsocket"
        self.sockets.mkdir()
        if self.run_as:
            shutil.chown(self.folder, "postgres")
            shutil.chown(self.sockets, "postgres")
        subprocess.run([*self.run_as, str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "actsweep",
                        "--auth=trust", "--no-sync"], check=True, capture_output=True, timeout=120)
        self.start()
        for name in databases:
            subprocess.run([str(self.bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "actsweep",
                            name], check=True, capture_output=True, timeout=60)
        self.urls = {name: f"postgresql+psycopg://actsweep@127.0.0.1:{self.port}/{name}" for name in databases}

    def start(self) -> None:
        subprocess.run([*self.run_as, str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-w", "-l",
                        str(self.folder / "postgres.log"), "-o",
                        f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                       check=True, capture_output=True, timeout=120)

    @property
    def pid(self) -> int:
        """The postmaster's pid (the first line of its postmaster.pid)."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends at once, as a crash of its machine would."""
        postmaster = psutil.Process(self.pid)
        processes = [postmaster, *postmaster.children(recursive=True)]
        for process in processes:
            process.kill()
        psutil.wait_procs(processes, timeout=30)

    def stop(self) -> None:
        subprocess.run([*self.run_as, str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def postgres_server(databases: tuple[str, ...]):
    """A throwaway PostgreSQL cluster on 127.0.0.1; yields {database: SQLAlchemy URL}."""
    server = PostgresServer(databases)
    try:
        yield server.urls
    finally:
        server.stop()


# MLflow 3's server also starts a job runner with Huey consumers (GenAI scorers, trace roll-ups),
# eight more processes, polling all the while: actsweep runs none of those jobs (what it cost a test
# suite: docs/decisions.md).
MLFLOW_SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with ``backend_uri`` and served artifacts, on a port it keeps
    when it is killed (by pid) and started again."""

    def __init__(self, backend_uri: str, artifacts: Path, log: Path):
        self.backend_uri, self.artifacts, self.log = backend_uri, artifacts, log
        self.port, self.process = free_port(), None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> "MlflowServer":
        with open(self.log, "a") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
                 "--backend-store-uri", self.backend_uri, "--serve-artifacts", "--artifacts-destination",
                 str(self.artifacts), "--workers", "1"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **MLFLOW_SERVER_ENV})
        if poll(lambda: self.process.poll() is not None or answers(f"{self.url}/health"), 120, every_s=0.5) \
                and self.process.poll() is None:
            return self
        raise RuntimeError(f"mlflow server did not start: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL the server and its workers (its process group), as a crash would."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def mlflow_server(backend_uri: str, artifacts: Path, log: Path):
    """``mlflow server`` on 127.0.0.1 with ``backend_uri`` and served artifacts; yields its URL."""
    server = MlflowServer(backend_uri, artifacts, log).start()
    try:
        yield server.url
    finally:
        server.stop()


class RayNode:
    """One Ray node on loopback, as ``ray start ... --block``: terminating that command stops the
    node's processes (raylet, workers), which is how a test loses a node."""

    def __init__(self, *args: str, env: dict[str, str] | None = None):
        from service.control.jobs import ray_cli

        self.temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths have a length limit
        # ports of its own where Ray has fixed defaults, so that it starts beside any other Ray on the machine
        # (a second node's job agent on the default port stays up without its HTTP service: no job submission)
        ports = ["--dashboard-agent-listen-port", str(free_port()), "--ray-client-server-port", str(free_port())]
        self.log = Path(self.temp_dir) / "ray_start.log"  # what `ray start` said, should it exit
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen([ray_cli(), "start", "--block", "--node-ip-address", "127.0.0.1",
                                             "--temp-dir", self.temp_dir, *ports, *args],
                                            stdout=log, stderr=subprocess.STDOUT, env=env or dict(os.environ))

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


def answers(url: str, status: int | None = 200) -> bool:
    """Whether ``url`` answers (with ``status``; with anything where that is None)."""
    try:
        answer = httpx.get(url, timeout=2)
    except httpx.HTTPError:
        return False
    return status is None or answer.status_code == status


def sigkill_where(matches) -> list[int]:
    """SIGKILL every process for which ``matches(pid, arguments as bytes)``; their pids."""
    killed = []
    for process in psutil.process_iter(["cmdline"]):
        arguments = [a.encode() for a in process.info["cmdline"] or []]
        try:
            if matches(process.pid, arguments):
                process.kill()
                killed.append(process.pid)
        except psutil.NoSuchProcess:
            pass  # gone already
    return killed


def _descendants(root: int) -> set[int]:
    """``root`` and every process below it."""
    try:
        parent = psutil.Process(root)
        return {root} | {child.pid for child in parent.children(recursive=True)}
    except psutil.NoSuchProcess:
        return {root}


class ApiServer:
    """``actsweep serve`` in its own process, as a user runs it."""

    def __init__(self, env: dict[str, str], log: Path | None = None):
        self.env, self.port, self.process, self.log = env, free_port(), None, log
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> "ApiServer":
        out = open(self.log, "ab") if self.log else None
        # in a process group of its own, as under systemd or in a container: stop_group() signals all of it
        self.process = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(self.port),
                                         "--log-level", "info"], cwd=REPO, env=self.env, stdout=out, stderr=out,
                                        start_new_session=True)
        if poll(lambda: self.process.poll() is not None or answers(f"{self.url}/healthz", status=None), timeout_s,
                every_s=0.5) and self.process.poll() is None:
            return self
        exited = self.process.poll()
        why = f"exited with {exited}" if exited is not None else f"did not answer in {timeout_s:.0f} s"
        if exited is None:  # (not left running for nobody: its whole group ends)
            self.stop_group(signal.SIGKILL)
        raise RuntimeError(f"the API did not start: it {why}{self._log_tail()}")

    def _log_tail(self, chars: int = 3000) -> str:
        try:
            return f"; the end of its log ({self.log}):\n{self.log.read_text(errors='replace')[-chars:]}" if self.log else ""
        except OSError:
            return ""

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
