"""`make deploy-check`: the container deployment built and run for real, then a worker killed mid-sweep.

Needs Podman and debootstrap (Debian's packages; `make deploy-check` installs them where it may),
podman-compose (from PyPI, installed here on first use) and the package registries (the Debian
archive, PyPI), but no Docker Hub and no Docker engine. Steps, each printed as it goes:

1. a base image made from the Debian archive (debootstrap, then `podman import`), once;
2. the actsweep image (docker/Dockerfile on that base; PyTorch from a local wheel where one lies in
   ACTSWEEP_WHEELS, default /opt/wheels, else from PyPI) and a PostgreSQL image (Debian's packages);
3. PostgreSQL, the MLflow server, a Ray head, two Ray workers and the API (compose.yaml), every one
   on loopback, with a generated API token, Ray token and database password in files only their
   owner reads;
4. a sweep submitted over HTTP; when its trials are running, the container of worker B is killed;
5. the sweep must finish with every trial succeeded, every epoch in MLflow exactly once, and the
   trials that were on worker B resumed on worker A from their saved epoch.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROJECT = "actsweep-check"
BASE, IMAGE, POSTGRES = "localhost/actsweep-base:bookworm", "localhost/actsweep:deploy-check", \
    "localhost/actsweep-postgres:deploy-check"
EPOCHS = 40
SWEEP = {"experiment": "mnist_classification", "quick": True, "name": "deploy-check", "overrides": {
    "dataset": "digits", "val_size": 200, "epochs": EPOCHS, "batch_size": 16, "model.depth": 2, "model.width": 32,
    "activation": ["gelu", "relu"], "lr": [0.01], "dropout": 0, "seeds": 2, "execution.rerun": True}}


def say(message: str) -> None:
    print(f"[deploy-check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(*command: str, **options) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=True, **options)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_image() -> None:
    if subprocess.run(["podman", "image", "exists", BASE]).returncode == 0:
        say(f"base image {BASE}: already built")
        return
    say(f"base image {BASE}: debootstrap of Debian bookworm from the Debian archive (a minute or two)")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        rootfs = Path(folder) / "rootfs"
        run("debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates,libgomp1,procps",
            "bookworm", str(rootfs), "http://deb.debian.org/debian", stdout=subprocess.DEVNULL)
        # this machine's own certificate authorities (a proxy's, here), so that pip and MLflow trust what it trusts
        for authority in glob.glob("/usr/local/share/ca-certificates/*.crt"):
            shutil.copy(authority, rootfs / "usr/local/share/ca-certificates")
        run("chroot", str(rootfs), "update-ca-certificates", stdout=subprocess.DEVNULL)
        bundle = "/etc/ssl/certs/ca-certificates.crt"
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        run("podman", "import", "--change", f"ENV PIP_CERT={bundle}", "--change", f"ENV REQUESTS_CA_BUNDLE={bundle}",
            "--change", f"ENV SSL_CERT_FILE={bundle}", "-", BASE, stdin=tar.stdout, stdout=subprocess.DEVNULL)
        tar.wait()


def _locked(package: str) -> str:
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line.startswith(f"{package}=="):
            return line.split()[0].split("==")[1]
    return "?"


def images() -> None:
    wheels = Path(os.environ.get("ACTSWEEP_WHEELS", "/opt/wheels"))
    torch = sorted(glob.glob(str(wheels / "torch-*+cpu-cp311-*.whl")))
    build = ["podman", "build", "--network", "host", "--build-arg", f"BASE={BASE}"]
    if torch:  # a CPU wheel on this disk: no download of PyPI's CUDA build
        version = Path(torch[-1]).name.split("-")[1]
        minor = int(version.split(".")[1])  # torchvision 0.(minor + 15) is the one built for torch 2.minor
        spec = f"torch=={version} torchvision==0.{minor + 15}.*"
        build += ["-v", f"{wheels}:/wheels:ro", "--build-arg", f"TORCH_SPEC={spec}"]
        say(f"image {IMAGE}: {spec} (PyTorch from {torch[-1]}, not the lock's {_locked('torch')})")
    else:
        say(f"image {IMAGE}: PyTorch from PyPI (no CPU wheel in {wheels})")
    run(*build, "-f", "docker/Dockerfile", "-t", IMAGE, ".", cwd=REPO)
    say(f"image {POSTGRES}: PostgreSQL from Debian's packages")
    run("podman", "build", "--network", "host", "--build-arg", f"BASE={BASE}", "-f",
        "docker/deploy-check/postgres.Dockerfile", "-t", POSTGRES, ".", cwd=REPO)


def configuration() -> dict[str, str]:
    """Free loopback ports in .env; the API token, the Ray token and the database password in .secrets/."""
    ports = {name: str(free_port()) for name in ("PG_PORT", "MLFLOW_PORT", "RAY_PORT", "DASHBOARD_PORT", "API_PORT",
                                                 "HEAD_AGENT_PORT", "HEAD_CLIENT_PORT", "WORKER_A_AGENT_PORT",
                                                 "WORKER_B_AGENT_PORT")}
    password, api_token = secrets.token_hex(16), secrets.token_hex(32)
    folder = HERE / ".secrets"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700)
    values = {"ray_token": secrets.token_hex(32),
              "database_url": f"postgresql+psycopg://actsweep:{password}@127.0.0.1:{ports['PG_PORT']}/actsweep",
              "mlflow_database_url": f"postgresql+psycopg://actsweep:{password}@127.0.0.1:{ports['PG_PORT']}/mlflow"}
    for name, value in values.items():
        path = folder / name
        path.write_text(value)
        path.chmod(0o600)
    env = {**ports, "POSTGRES_PASSWORD": password, "ACTSWEEP_API_TOKEN": api_token}
    (HERE / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    (HERE / ".env").chmod(0o600)
    return env


PODMAN_COMPOSE = "1.6.0"  # from PyPI: Debian's 1.0.3 cannot put a service on the host's network


def podman_compose() -> list[str]:
    """podman-compose from PyPI, in a folder of its own (a pure-Python tool; installed on first use)."""
    folder = Path.home() / ".cache" / "actsweep" / f"podman-compose-{PODMAN_COMPOSE}"
    if not (folder / "podman_compose.py").is_file():
        say(f"podman-compose {PODMAN_COMPOSE} from PyPI into {folder}")
        run(sys.executable, "-m", "pip", "install", "-q", "--target", str(folder), f"podman-compose=={PODMAN_COMPOSE}")
    return ["env", f"PYTHONPATH={folder}", sys.executable, "-m", "podman_compose"]


def compose(*arguments: str, **options) -> subprocess.CompletedProcess:
    return run(*podman_compose(), "-p", PROJECT, "-f", "compose.yaml", *arguments, cwd=HERE, **options)


def wait_until(what: str, check, timeout: float, every: float = 2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
            if found:
                return found
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(every)
    raise SystemExit(f"deploy-check: FAILED: {what} not within {timeout:.0f} s")


def check_sweep(env: dict[str, str]) -> dict:
    api = httpx.Client(base_url=f"http://127.0.0.1:{env['API_PORT']}", timeout=30,
                       headers={"Authorization": f"Bearer {env['ACTSWEEP_API_TOKEN']}"})
    wait_until("the API answering with every dependency up", lambda: api.get("/healthz").json()["status"] == "ok", 600)
    assert api.get("/sweeps").status_code == 200 and httpx.get(f"{api.base_url}/sweeps").status_code == 401  # token
    # the API answers before the workers have joined (it no longer loads torch), and refuses a sweep
    # that no node can hold: wait for both workers' CPUs on the head's dashboard
    ray = {"Authorization": f"Bearer {(HERE / '.secrets' / 'ray_token').read_text()}"}
    wait_until("both Ray workers joined", lambda: sum(
        node["state"] == "ALIVE" and node.get("resources_total", {}).get("CPU", 0) > 0
        for node in httpx.get(f"http://127.0.0.1:{env['DASHBOARD_PORT']}/api/v0/nodes", headers=ray, timeout=10)
        .json()["data"]["result"]["result"]) >= 2, 600)
    started = time.monotonic()
    sweep = api.post("/sweeps", json=SWEEP)
    assert sweep.status_code == 202, sweep.text
    sweep_id = sweep.json()["id"]
    say(f"sweep {sweep_id} submitted over HTTP: 2 activations × 2 seeds × {EPOCHS} epochs, on two workers")
    wait_until("two trials running with saved epochs",
               lambda: sum(t["state"] == "running" and t["epoch"] >= 3 for t in api.get(f"/sweeps/{sweep_id}").json()
                           ["trials"]) >= 2, 600, every=1.0)
    before = api.get(f"/sweeps/{sweep_id}").json()
    say("killing the worker-b container mid-sweep; trial epochs then: "
        + ", ".join(f"{t['activation']}/s{t['seed']} {t['state']} {t['epoch']}" for t in before["trials"]))
    run("podman", "kill", f"{PROJECT}_worker-b_1", stdout=subprocess.DEVNULL)
    done = wait_until("the sweep finishing", lambda: (record := api.get(f"/sweeps/{sweep_id}").json())["state"] in (
        "succeeded", "failed", "cancelled") and record, 900, every=2.0)
    elapsed = time.monotonic() - started
    summary = {"sweep": sweep_id, "state": done["state"], "error": done["error"], "seconds": round(elapsed, 1),
               "trials": [f"{t['activation']}/s{t['seed']} {t['state']} at epoch {t['epoch']}" for t in done["trials"]]}
    mlflow = httpx.Client(base_url=f"http://127.0.0.1:{env['MLFLOW_PORT']}/api/2.0/mlflow", timeout=30)
    epochs, moved = {}, []
    for trial in done["trials"]:
        run_id = trial["mlflow_run_id"]
        history = mlflow.get("/metrics/get-history", params={"run_id": run_id, "metric_key": "train_loss",
                                                             "max_results": 10000}).json().get("metrics", [])
        steps = sorted(m["step"] for m in history)
        epochs[f"{trial['activation']}/s{trial['seed']}"] = steps == list(range(1, EPOCHS + 1))
        tags = {t["key"]: t["value"] for t in mlflow.get("/runs/get", params={"run_id": run_id}).json()["run"]["data"]
                ["tags"]}
        if len(tags.get("node_ids", "").split(",")) > 1:
            moved.append(f"{trial['activation']}/s{trial['seed']} resumed from epoch {tags.get('resumed_from_epoch')}")
    summary.update({"every epoch logged once": epochs, "moved to worker A": moved})
    print(json.dumps(summary, indent=2))
    ok = (done["state"] == "succeeded" and all(t["state"] == "succeeded" and t["epoch"] == EPOCHS for t in done["trials"])
          and all(epochs.values()) and moved)
    if not ok:
        raise SystemExit("deploy-check: FAILED: the sweep did not finish with every trial accounted for")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the deployment running afterwards")
    args = parser.parse_args(argv)
    for tool in ("podman", "debootstrap"):
        if shutil.which(tool) is None:
            raise SystemExit(f"deploy-check: {tool} is not installed (apt-get install podman debootstrap)")
    base_image()
    images()
    env = configuration()
    compose("down", "-v", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    say("starting PostgreSQL, MLflow, the Ray head, two Ray workers and the API (podman-compose, loopback only)")
    compose("up", "-d", stdout=subprocess.DEVNULL)
    try:
        check_sweep(env)
        say("PASSED: the sweep finished with every trial, each epoch logged once, after a worker was killed")
    finally:
        if not args.keep:
            compose("down", "-v", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
