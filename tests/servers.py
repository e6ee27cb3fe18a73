"""Real servers for the tests, started on loopback: PostgreSQL (Debian's packages) and an
``mlflow server`` over HTTP backed by it."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        if os.environ.get("ACTSWEEP_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL is not installed (apt-get install postgresql); .ci/run installs it")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
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
