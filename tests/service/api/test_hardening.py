"""The service under attack and under faults, over real HTTP with a real Ray, MLflow and database:
input confinement, bounds before work, safe defaults, idempotency, dependencies that are down,
and an API stopped the way process managers stop it."""
from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from service.control.jobs import ray_auth_headers
from service.local_servers import ApiServer, free_port, sigkill_where
from service.records import SweepRecord, SweepStore
from tests.machine_speed import scaled
from tests.service.api.conftest import SIDE_BY_SIDE, TINY, api_env, finished, wait_for, wait_in_store

REPO = Path(__file__).resolve().parents[3]
SPEC_FILE = REPO / "search_spaces" / "mnist_classification.yaml"


def _detail(response: httpx.Response) -> list[dict]:
    assert response.status_code == 422, response.text
    return response.json()["detail"]


@pytest.mark.parametrize("experiment", [
    str(SPEC_FILE), "../search_spaces/mnist_classification.yaml", "/etc/passwd", "search_spaces/timit.yaml"])
def test_an_experiment_is_a_catalog_name_never_a_path(server, experiment):
    with server.client() as client:
        detail = _detail(client.post("/sweeps", json={"experiment": experiment, "quick": True}))
    assert detail[0]["loc"] == ["body", "experiment"] and "accepted: activation_zoo, cifar100_wrn" in detail[0]["msg"]
    assert "root:" not in json.dumps(detail) and "batch_size" not in json.dumps(detail)  # nothing read back


def test_a_spec_sent_inline_runs_and_bad_yaml_is_named(server):
    own = {**{k: v for k, v in TINY.items() if "." not in k}, "name": "mine", "model": {"depth": 2, "width": 32},
           "batch_size": 64, "paper": "custom"}
    with server.client() as client:
        created = client.post("/sweeps", json={"spec": own, "name": "inline"})
        assert created.status_code == 202, created.text
        done = wait_for(client, created.json()["id"], finished)
        assert done["state"] == "succeeded" and done["experiment"] == "mine" and len(done["trials"]) == 4
        detail = _detail(client.post("/sweeps", json={"spec": "name: mine\nactivation: [gelu, relu\n"}))
        assert detail[0]["loc"] == ["body", "spec"] and "not valid YAML at line 3" in detail[0]["msg"]
        detail = _detail(client.post("/sweeps", json={"spec": "- just\n- a list\n"}))
        assert "a mapping of spec fields" in detail[0]["msg"]
        detail = _detail(client.post("/sweeps", json={"spec": {**own, "epochz": 2}}))
        assert detail[0]["loc"] == ["body", "spec", "epochz"]
        detail = _detail(client.post("/sweeps", json={"experiment": "mnist_classification", "spec": own}))
        assert "not both" in detail[0]["msg"]


@pytest.mark.parametrize("path", ["/etc/passwd", "../../etc/passwd", "twpos/../../secrets.txt"])
def test_paths_in_a_spec_stay_inside_the_data_roots(server, path):
    with server.client() as client:
        detail = _detail(client.post("/sweeps", json={"experiment": "twitter_pos", "quick": True,
                                                      "overrides": {"data_options.embeddings": path}}))
    assert detail[0]["loc"] == ["body", "overrides", "data_options", "embeddings"]
    assert "inside the data directory" in detail[0]["msg"]


@pytest.mark.parametrize("overrides, loc, message", [
    ({"lr": [0.001, 1e-3]}, ["body", "overrides", "lr"], "appears twice"),
    ({"dropout": [0.5, 0.5]}, ["body", "overrides", "dropout"], "appears twice"),
    ({"execution.cpus_per_trial": 64}, ["body", "overrides", "execution.cpus_per_trial"], "largest node"),
    ({"execution.gpus_per_trial": 1}, ["body", "overrides", "execution.gpus_per_trial"], "0 GPU"),
    ({"model.width": 10_000_000}, ["body", "overrides", "model", "width"], "less than or equal"),
    ({"epochs": 10**9}, ["body", "overrides", "epochs"], "less than or equal"),
    ({"eval_noise": [0.25, 0.2500000001]}, ["body", "overrides", "eval_noise"], "distinct"),
])
def test_every_number_has_bounds_and_a_grid_value_is_listed_once(server, overrides, loc, message):
    with server.client() as client:
        detail = _detail(client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                                      "overrides": overrides}))
    assert any(d["loc"] == loc and message in d["msg"] for d in detail), detail


@pytest.mark.parametrize("token", ["1e309", "-1e309", "NaN", "Infinity"])
def test_non_finite_numbers_are_refused(server, token):
    body = '{"experiment": "mnist_classification", "quick": true, "overrides": {"lr": [%s]}}' % token
    with server.client() as client:
        detail = _detail(client.post("/sweeps", content=body, headers={"Content-Type": "application/json"}))
    assert any(d["loc"][:3] == ["body", "overrides", "lr"] for d in detail), detail


def test_a_huge_grid_is_counted_not_built(server):
    lrs = [10 ** -(i / 100) for i in range(1, 1000)]  # 999 lrs × 1000 seeds × 8 activations: 8M trials
    body = {"experiment": "mnist_classification", "overrides": {
        "lr": lrs, "seeds": 1000, "dropout": [0.0], "activation": ["gelu", "gelu_tanh", "relu", "elu", "lrelu", "silu",
                                                                     "soi", "lalu"]}}
    with server.client() as client:
        detail = _detail(client.post("/sweeps", json=body))
        assert "has 7992000 trials" in json.dumps(detail)
        assert client.get("/healthz").status_code == 200  # and the server is still well


BOMB = {"model.width": 65536, "model.depth": 200}  # one trial: 855 billion parameters, 12.8 TB with Adam


def test_a_trial_no_node_can_hold_is_refused_over_rest_before_anything_is_allocated(server):
    api = psutil.Process(server.process.pid)
    with server.client() as client:
        before = api.memory_info().rss
        started = time.monotonic()
        answer = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True, "overrides": BOMB})
        took = time.monotonic() - started
        grew = (api.memory_info().rss - before) / 2 ** 20
        detail = _detail(answer)
        assert detail[0]["loc"] == ["body", "overrides", "model"]
        assert "model.width" in detail[0]["msg"] and "854,763,634,698 parameters" in detail[0]["msg"] and "largest node" in detail[0]["msg"]
        assert "needs at least" in detail[0]["msg"]  # the API's own floor (no torch): not its worker process's estimate
        assert client.get("/healthz").status_code == 200
    print(f"REST: refused in {took:.2f} s, the API's memory grew {grew:.0f} MiB")
    assert grew < 200


@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_trial_this_machine_cannot_hold_is_refused_by_the_cli_before_anything_is_allocated(tmp_path, command):
    """Refused from the spec alone: no Ray started, not even torch imported (seconds on a busy CPU)."""
    sets = [arg for key, value in BOMB.items() for arg in ("--set", f"{key}={value}")]
    env = {**os.environ, "ACTSWEEP_HOME": str(tmp_path), "ACTSWEEP_DOWNLOAD": "false"}
    code = ("import sys; from service.cli import main; code = main(sys.argv[1:]); "
            "print(sorted(m for m in ('torch', 'ray', 'mlflow') if m in sys.modules)); sys.exit(code)")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code, command, "mnist_classification", "--quick", *sets],
                          env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # MiB, the largest child so far
    assert done.returncode == 2 and "one trial needs" in done.stderr and "model.width" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "854,763,634,698 parameters" in done.stderr
    assert done.stdout.strip() == "[]"  # neither torch nor Ray nor MLflow imported, so no Ray started
    print(f"CLI {command}: refused in {took:.2f} s, process and imports included; peak memory {peak:.0f} MiB")
    assert peak < 2048


def test_a_sweep_over_the_work_limit_is_refused(server):
    with server.client() as client:  # 45 trials × 10,000 epochs of an 8 × 4096 MLP on MNIST: about 25 EFLOP
        detail = _detail(client.post("/sweeps", json={"experiment": "mnist_classification", "overrides": {
            "epochs": 10000, "dropout": [0.0], "model.width": 4096}}))
    assert detail[0]["loc"] == ["body", "overrides", "epochs"] and "ACTSWEEP_MAX_SWEEP_PFLOP" in detail[0]["msg"]


def test_an_idempotency_key_is_bound_to_its_request(server):
    body = {"experiment": "timit", "quick": True}  # no TIMIT here: the sweep fails in its driver
    with server.client() as client:
        headers = {"Idempotency-Key": f"bound-{time.time()}"}
        first = client.post("/sweeps", json=body, headers=headers)
        assert first.status_code == 202
        other = client.post("/sweeps", json={**body, "name": "another"}, headers=headers)
        assert other.status_code == 409 and "another request body" in other.text
        failed = wait_for(client, first.json()["id"], finished)
        assert failed["state"] == "failed" and "timit not found" in failed["error"]
        retried = client.post("/sweeps", json=body, headers=headers)  # a failed sweep's key may be retried
        assert retried.status_code == 202 and retried.json()["id"] != first.json()["id"]
        assert "idempotent-replayed" not in retried.headers
        assert client.get(f"/sweeps/{first.json()['id']}").json()["state"] == "failed"  # kept, as it was


def test_the_api_listens_on_loopback_only_without_a_token(tmp_path):
    env = {**api_env(tmp_path, {"dashboard_url": "http://127.0.0.1:9", "address": "127.0.0.1:9"}),
           "ACTSWEEP_API_TOKEN": ""}
    env.pop("ACTSWEEP_API_TOKEN")
    done = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--host", "0.0.0.0", "--port",
                           str(free_port())], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "ACTSWEEP_API_TOKEN" in done.stderr and "127.0.0.1" in done.stderr


class HangUpListener:
    """Injected fault: an MLflow server that accepts each connection and hangs up at once. It counts the
    connections, so a test can bound how much work a request spends on a dependency that is down."""

    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port, self.connections = self.socket.getsockname()[1], 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections += 1
            connection.close()

    def close(self):
        self.socket.close()


def test_dependencies_down_are_503s_without_credentials(ray_head, tmp_path):
    """MLflow and then the sweep database unreachable: clear 503s, bounded work, no password anywhere."""
    dead, mlflow = free_port(), HangUpListener()
    env = {**api_env(tmp_path, ray_head), "ACTSWEEP_TRACKING_URI": f"http://mlflow:hunter2@127.0.0.1:{mlflow.port}",
           "ACTSWEEP_HEALTH_CACHE_S": "0"}  # every /healthz checks (none answered from the start's)
    home = Path(env["ACTSWEEP_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    store = SweepStore(f"sqlite:///{home / 'sweeps.db'}")
    store.create(SweepRecord(id="kept1", experiment="mnist_classification", quick=True, overrides={}, spec={},
                             trials_total=1, epochs=1), [{"activation": "gelu", "dropout": 0.0, "lr": 0.1, "seed": 0}])
    server = ApiServer(env, log=tmp_path / "api.log").start(timeout_s=scaled(60))
    try:
        with server.client() as client:
            before = mlflow.connections
            health = client.get("/healthz")
            assert health.status_code == 503 and mlflow.connections - before == 1  # one try, no retries
            assert not health.json()["mlflow"]["ok"] and health.json()["ray"]["ok"]
            for method, path in [("GET", "/sweeps/kept1/results"), ("GET", "/sweeps/kept1/report"),
                                 ("DELETE", "/sweeps/kept1")]:
                before = mlflow.connections
                answer = client.request(method, path)
                assert answer.status_code == 503 and "MLflow store" in answer.text, (path, answer.text)
                # the first MLflow call that fails ends the request: 1 try + 1 retry (ACTSWEEP_MLFLOW_HTTP_RETRIES)
                assert 1 <= mlflow.connections - before <= 2, (path, mlflow.connections - before)
            assert client.get("/sweeps/kept1").json()["state"] == "cancelled"  # the cancel itself was kept
            for answer in (health, client.get("/sweeps/kept1/results")):
                assert "hunter2" not in answer.text
    finally:
        server.stop()
        mlflow.close()
    env["ACTSWEEP_DATABASE_URL"] = f"postgresql+psycopg://actsweep:hunter2@127.0.0.1:{dead}/actsweep"
    server = ApiServer(env, log=tmp_path / "api2.log").start(timeout_s=scaled(60))  # it starts while its database is away
    try:
        with server.client() as client:
            for method, path in [("GET", "/sweeps"), ("GET", "/sweeps/kept1"), ("DELETE", "/sweeps/kept1"),
                                 ("POST", "/sweeps")]:
                answer = client.request(method, path, json={"experiment": "mnist_classification", "quick": True}
                                        if method == "POST" else None)
                assert answer.status_code == 503 and "sweep database" in answer.text, (path, answer.text)
                assert "hunter2" not in answer.text and "***" in answer.text
            health = client.get("/healthz").json()
            assert not health["database"]["ok"] and "hunter2" not in json.dumps(health)
    finally:
        server.stop()
    assert "hunter2" not in (tmp_path / "api.log").read_text() + (tmp_path / "api2.log").read_text()


@pytest.mark.long("an API server of its own on PostgreSQL, and a sweep through it, with the Ray head's and PostgreSQL's start where it is the first to ask")
@pytest.mark.timeout(160)  # 38-44 s in full suites
def test_database_passwords_stay_out_of_ray_job_metadata(ray_head, postgres, tmp_path):
    # trust authentication ignores the password, which is the point: it must go nowhere visible
    url = postgres["actsweep"].replace("actsweep@", "actsweep:hunter2@", 1)
    server = ApiServer(api_env(tmp_path, ray_head, ACTSWEEP_DATABASE_URL=url)).start(timeout_s=scaled(60))
    try:
        with server.client() as client:
            sweep = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                                 "overrides": TINY}).json()
            done = wait_for(client, sweep["id"], finished)
            assert done["state"] == "succeeded", done["error"]
        job = httpx.get(f"{ray_head['dashboard_url']}/api/jobs/actsweep-{sweep['id']}", headers=ray_auth_headers())
        assert job.status_code == 200 and "hunter2" not in job.text
        # the dashboard's Jobs page lists the sweep by name, and its metadata says which sweep it is
        assert job.json()["metadata"] == {"job_name": f"actsweep mnist_classification {sweep['id']}",
                                          "sweep_id": sweep["id"], "experiment": "mnist_classification"}
        variables = job.json()["runtime_env"]["env_vars"]
        assert "ACTSWEEP_DATABASE_URL" not in variables and "ACTSWEEP_DATABASE_URL_FILE" in variables
        secret = Path(variables["ACTSWEEP_DATABASE_URL_FILE"])
        assert secret.read_text() == url and oct(secret.stat().st_mode & 0o777) == "0o600"
    finally:
        server.stop()


@pytest.mark.long("its own Ray head started, a sweep submitted, the API's process group stopped, the API started again")
@pytest.mark.timeout(260)  # 68-121 s in full suites
def test_stopping_the_api_group_leaves_its_ray_head_and_sweeps_alive(tmp_path):
    """The API started its own Ray head; Ctrl-C to its whole process group stops the API only. The
    sweep's driver is a Ray job and goes on with no API (its epochs keep reaching the sweep database);
    the restarted API reattaches to the head, and the sweep finishes with every trial and its results."""
    temp_dir = Path(f"/tmp/rh{free_port()}")  # short: Ray's socket paths have a length limit
    dashboard = f"http://127.0.0.1:{free_port()}"
    env = {**api_env(tmp_path, {"dashboard_url": dashboard, "address": ""}), "ACTSWEEP_START_LOCAL_RAY": "true",
           "ACTSWEEP_RAY_TEMP_DIR": str(temp_dir), "ACTSWEEP_NUM_CPUS": "2"}
    env.pop("ACTSWEEP_RAY_ADDRESS")
    first = ApiServer(env, log=tmp_path / "first.log")
    try:  # (the head it starts is ended below whatever happens, even where the API never answers)
        first.start(timeout_s=scaled(60))
        with first.client() as client:
            sweep = client.post("/sweeps", json={"experiment": "mnist_classification",
                                                 "overrides": {**TINY, **SIDE_BY_SIDE, "epochs": 40}}).json()
            before = wait_for(client, sweep["id"], lambda r: r["progress"]["trial_epochs_done"] >= 2, timeout=180)
        first.stop_group(signal.SIGINT)  # Ctrl-C reaches every process of the API's group
        assert httpx.get(f"{dashboard}/api/version", headers=ray_auth_headers(), timeout=5).status_code == 200
        store = SweepStore(f"sqlite:///{env['ACTSWEEP_HOME']}/sweeps.db")  # read directly: no API is up
        wait_in_store(store, sweep["id"], lambda record: sum(t.epoch for t in record.trials)
                      > before["progress"]["trial_epochs_done"], timeout=120, with_trials=True)
        second = ApiServer(env, log=tmp_path / "second.log").start(timeout_s=scaled(60))
        try:
            with second.client() as client:
                after = client.get(f"/sweeps/{sweep['id']}").json()
                assert after["progress"]["trial_epochs_done"] > before["progress"]["trial_epochs_done"]
                done = wait_for(client, sweep["id"], finished, timeout=600)
                rows = client.get(f"/sweeps/{sweep['id']}/results").json()["results"]
            assert done["state"] == "succeeded", done["error"]
            assert [t["state"] for t in done["trials"]] == ["succeeded"] * 4
            assert all(t["epoch"] == 40 for t in done["trials"])
            assert {r["n_seeds"] for r in rows} == {2}
        finally:
            second.stop()
    finally:
        first.stop()
        sigkill_where(lambda _, args: any(str(temp_dir).encode() in arg for arg in args))


def _cancel(server: ApiServer, sweep_ids: set[str]) -> None:
    def cancel(sweep_id: str) -> None:
        with server.client() as client:
            client.delete(f"/sweeps/{sweep_id}")

    with ThreadPoolExecutor(max(len(sweep_ids), 1)) as pool:
        list(pool.map(cancel, sweep_ids))


def _idempotency_key(n: int) -> str | None:
    """The fifty submissions' keys: the odd ones share one key, four keys have five submissions each, and
    five go without one."""
    if n % 2:
        return "one-key"
    return None if n % 10 == 8 else f"key-{n % 10}"


@pytest.mark.long("fifty submissions at once, ten of them sweeps the API plans, records and cancels")
@pytest.mark.timeout(240)  # 70-98 s in full suites with 26 sweeps; 57-59 s with 10, in three test processes
def test_fifty_concurrent_submissions_make_one_sweep_per_idempotency_key_and_no_5xx(ray_head, tmp_path):
    server = ApiServer(api_env(tmp_path, ray_head), log=tmp_path / "api.log").start(timeout_s=scaled(60))
    body = {"experiment": "mnist_classification", "quick": True, "overrides": {**TINY, "epochs": 1, "seeds": 1,
                                                                              "activation": ["relu"]}}

    def post(n: int) -> httpx.Response:
        key = _idempotency_key(n)
        with server.client() as client:
            return client.post("/sweeps", json=body, headers={"Idempotency-Key": key} if key else {})

    made: set[str] = set()
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(50) as pool:  # (more requests at once than the API's 40 worker threads)
            answers = list(pool.map(post, range(50)))
        made = {answer.json()["id"] for answer in answers if answer.status_code == 202}
        codes = Counter(answer.status_code for answer in answers)
        print(f"50 concurrent POST /sweeps: status codes {dict(codes)}, answered in {time.monotonic() - started:.1f} s")
        _cancel(server, made)  # (no need to train them: ten drivers starting at once would swamp 2 cores)
        made = set()
        assert codes == {202: 50}, [answer.text for answer in answers if answer.status_code != 202][:3]
        ids: dict[str | None, list[str]] = {}
        for n, answer in enumerate(answers):
            ids.setdefault(_idempotency_key(n), []).append(answer.json()["id"])
        keyed = {key: set(found) for key, found in ids.items() if key is not None}
        assert len(keyed) == 5 and all(len(found) == 1 for found in keyed.values())  # one sweep per key
        keyed_ids, unkeyed = set().union(*keyed.values()), set(ids[None])
        assert len(keyed_ids) == 5 and len(unkeyed) == len(ids[None]) == 5 and not unkeyed & keyed_ids
        with server.client() as client:
            stored = client.get("/sweeps", params={"limit": 200}).json()
        assert stored["total"] == 10 and {s["id"] for s in stored["items"]} == keyed_ids | unkeyed
        assert {s["state"] for s in stored["items"]} <= {"cancelled", "succeeded"}
    finally:
        _cancel(server, made)
        server.stop()
