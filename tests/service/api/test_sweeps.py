"""/sweeps over real HTTP: a real API process, sweeps run as Ray jobs on a real Ray head,
metrics in a real MLflow store."""
from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from mlflow.tracking import MlflowClient

from search_spaces import load_spec
from search_spaces.catalog import experiment_names
from service.control.jobs import RayJobs, ray_auth_headers
from service.local_servers import ApiServer, sigkill_where
from service.records import TERMINAL_STATES, SweepStore
from service.settings import Settings
from tests.browser import HeaderProxy, keep_screenshot, load_in_chromium
from tests.machine_speed import scaled
from tests.service.api.conftest import SIDE_BY_SIDE, TINY, api_env, finished, wait_for, wait_in_store


def _mlflow(server: ApiServer) -> MlflowClient:
    return MlflowClient(f"sqlite:///{server.env['ACTSWEEP_HOME']}/mlflow.db")


def _runs(server: ApiServer, sweep_id: str) -> list:
    client = _mlflow(server)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, f"tags.sweep_id = '{sweep_id}'")


def _tiny_sweep_bound(test):
    """The first test on a test process to ask for tiny_sweep pays its sweep in its setup, and may pay
    the API server's and its Ray head's start too: 82-85 s in full suites of three test processes (the
    idempotency test, whose own two sweeps took 38-44 s more)."""
    return pytest.mark.long("its setup may be tiny_sweep: the API server, its Ray head and a sweep through it")(
        pytest.mark.timeout(280)(test))


@pytest.fixture(scope="module")
def tiny_sweep(server) -> tuple[dict, dict]:
    """A TINY sweep submitted over HTTP: (the 202 response body, its record once finished)."""
    with server.client() as client:
        created = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                               "overrides": TINY, "name": "tiny"})
        assert created.status_code == 202, created.text
        assert created.headers["location"] == f"/sweeps/{created.json()['id']}"
        return created.json(), wait_for(client, created.json()["id"], finished)


@_tiny_sweep_bound
def test_submit_poll_to_succeeded_and_fetch_results(server, tiny_sweep):
    sweep, done = tiny_sweep
    with server.client() as client:
        assert sweep["state"] == "queued" and sweep["progress"]["trials_total"] == 4
        assert sweep["plan"] is None  # resolved by the driver, once it runs
        plan = done["plan"]  # execution: auto, resolved on the API's Ray head (CPUs, no GPU)
        assert plan["device"] == "cpu" and plan["gpus_per_trial"] == 0 and sum(plan["units"]) == 4
        assert plan["summary"].startswith("Plan: ") and {"mode", "gpus_per_trial"} <= set(plan["why"])
        parent = done["links"]["mlflow_parent_run"].split("?")[0].rsplit("/", 1)[1]
        assert _mlflow(server).get_run(parent).data.params["plan"] == plan["summary"]
        assert done["state"] == "succeeded", done["error"]
        assert done["progress"]["fraction"] == 1.0 and done["progress"]["trials_done"] == 4
        assert [(t["activation"], t["seed"], t["state"]) for t in done["trials"]] == [
            ("gelu", 0, "succeeded"), ("gelu", 1, "succeeded"), ("relu", 0, "succeeded"), ("relu", 1, "succeeded")]
        assert all(t["epoch"] == 2 and 0 <= t["metrics"]["test_error"] < 0.9 and t["mlflow_run_id"]
                   for t in done["trials"])
        assert done["links"]["ray_job"].endswith(f"/#/jobs/actsweep-{sweep['id']}")
        assert f"/runs/{done['links']['mlflow_parent_run'].rsplit('/', 1)[1]}" in done["links"]["mlflow_parent_run"]

        results = client.get(f"/sweeps/{sweep['id']}/results").json()
        assert {(r["activation"], r["n_seeds"], r["lr_chosen"]) for r in results["results"]} == {
            ("gelu", 2, True), ("relu", 2, True)}
        trial_errors = sorted(t["metrics"]["test_error"] for t in done["trials"] if t["activation"] == "gelu")
        gelu = next(r for r in results["results"] if r["activation"] == "gelu")
        assert gelu["test_error"] == pytest.approx(sum(trial_errors) / 2)  # the median of two seeds
        markdown = client.get(f"/sweeps/{sweep['id']}/results", params={"format": "md"})
        assert markdown.headers["content-type"].startswith("text/markdown") and "| gelu" in markdown.text
        csv = client.get(f"/sweeps/{sweep['id']}/results", params={"format": "csv"}).text.splitlines()
        assert csv[0].startswith("activation,dropout,lr") and len(csv) == 3

        listed = client.get("/sweeps", params={"limit": 1}).json()
        assert listed["total"] >= 1 and len(listed["items"]) == 1 and listed["limit"] == 1
        assert client.delete(f"/sweeps/{sweep['id']}").status_code == 409  # already finished


@_tiny_sweep_bound
def test_the_trial_list_is_paged_in_grid_order(server, tiny_sweep):
    sweep, done = tiny_sweep
    with server.client() as client:
        first = client.get(f"/sweeps/{sweep['id']}/trials", params={"limit": 3}).json()
        rest = client.get(f"/sweeps/{sweep['id']}/trials", params={"offset": 3, "limit": 3}).json()
        assert (first["total"], len(first["items"]), rest["total"], len(rest["items"])) == (4, 3, 4, 1)
        assert first["items"] + rest["items"] == done["trials"]  # the detail's trials, a page at a time
        only = client.get(f"/sweeps/{sweep['id']}/trials", params={"state": "running"}).json()
        assert only["total"] == 0 and only["items"] == []
        bad = client.get(f"/sweeps/{sweep['id']}/trials", params={"state": "done"})
        assert bad.status_code == 422 and "state" in str(bad.json()["detail"][0]["loc"])
        assert "succeeded" in bad.text  # the accepted values are named
        assert client.get("/sweeps/nosuchsweep/trials").status_code == 404


@_tiny_sweep_bound
def test_figures_are_served_as_png(server, tiny_sweep):
    sweep_id = tiny_sweep[0]["id"]
    with server.client() as client:
        figure = client.get(f"/sweeps/{sweep_id}/figures/curves_train_loss_eval.png")
        assert figure.status_code == 200 and figure.headers["content-type"] == "image/png"
        assert figure.content.startswith(b"\x89PNG") and len(figure.content) > 5_000
        missing = client.get(f"/sweeps/{sweep_id}/figures/unit_activation.png")  # no activation statistics here
        assert missing.status_code == 404 and "curves_val_loss" in missing.json()["detail"]


@_tiny_sweep_bound
def test_html_report_loads_in_headless_chromium(server, tiny_sweep, tmp_path):
    """The report as a browser shows it, over real HTTP: every figure decoded, a screenshot saved."""
    sweep_id = tiny_sweep[0]["id"]
    url = f"{server.url}/sweeps/{sweep_id}/report"
    page = httpx.get(url, timeout=60)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for expected in (f"sweep {sweep_id}", "code version", "git ", "hardware", "In the paper's terms",
                     "mnist_classification", "model:", "/runs/"):
        assert expected in page.text, expected
    dom, screenshot = load_in_chromium(url, tmp_path)
    images = re.findall(r"<img[^>]*>", dom)
    assert len(images) == 4  # the activations (f, f′), curves of train_loss_eval (the headline) and val_loss, robustness
    assert all('data-loaded="yes"' in image for image in images), images
    assert screenshot.stat().st_size > 20_000


@_tiny_sweep_bound
def test_the_ray_dashboard_lists_the_sweeps_driver_as_a_job_named_after_it(tiny_sweep, tmp_path):
    """Ray's dashboard in headless Chromium, as a user looks at it: its Jobs page lists the sweep's
    driver as a job named after the sweep. The screenshot in docs/observing.md is the one this test
    takes (ACTSWEEP_UPDATE_SCREENSHOTS=1 writes it there)."""
    sweep, done = tiny_sweep
    proxy = HeaderProxy(done["links"]["ray_dashboard"], ray_auth_headers())  # (the token a user types in once)
    try:
        dom, screenshot = load_in_chromium(f"{proxy.url}/#/jobs", tmp_path, size="1600,900")
    finally:
        proxy.close()
    assert f"actsweep-{sweep['id']}" in dom, "the sweep's job is not on the dashboard's Jobs page"
    assert f"actsweep mnist_classification {sweep['id']}" in dom  # the Name column: the job_name in its metadata
    assert f"service.driver {sweep['id']}" in dom  # its entrypoint: the sweep's driver
    keep_screenshot(screenshot, "ray_jobs.png")


def test_a_fused_sweep_lists_every_member_as_its_own_trial(server):
    overrides = {**TINY, "execution.mode": "fused", "execution.pack_size": 3, "execution.rerun": True}
    with server.client() as client:
        sweep = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                             "overrides": overrides}).json()
        done = wait_for(client, sweep["id"], finished)
    assert done["state"] == "succeeded", done["error"]
    assert [(t["activation"], t["seed"], t["state"], t["epoch"]) for t in done["trials"]] == [
        ("gelu", 0, "succeeded", 2), ("gelu", 1, "succeeded", 2), ("relu", 0, "succeeded", 2), ("relu", 1, "succeeded", 2)]
    run_ids = {t["mlflow_run_id"] for t in done["trials"]}
    assert len(run_ids) == 4 and None not in run_ids
    tags = [r.data.tags for r in _runs(server, sweep["id"]) if r.data.tags["role"] == "trial"]
    assert {t["execution"] for t in tags} == {"fused"} and len({t["pack_id"] for t in tags}) == 2  # packs of 2


@_tiny_sweep_bound
def test_repeated_idempotency_key_returns_the_first_sweep_and_finished_trials_are_reused(server, tiny_sweep):
    body = {"experiment": "mnist_classification", "quick": True, "overrides": TINY}  # tiny_sweep trained these
    with server.client() as client:
        first = client.post("/sweeps", json=body, headers={"Idempotency-Key": "key-1"})
        again = client.post("/sweeps", json=body, headers={"Idempotency-Key": "key-1"})
        changed = client.post("/sweeps", json={**body, "name": "another"}, headers={"Idempotency-Key": "key-1"})
        assert changed.status_code == 409 and "another request body" in changed.json()["detail"]
        other = client.post("/sweeps", json={**body, "rerun": True}, headers={"Idempotency-Key": "key-2"})
        assert first.status_code == again.status_code == 202
        assert again.json()["id"] == first.json()["id"] and again.headers["idempotent-replayed"] == "true"
        assert other.json()["id"] != first.json()["id"]
        reused, rerun = (wait_for(client, r.json()["id"], finished) for r in (first, other))
        assert reused["state"] == rerun["state"] == "succeeded"
        assert {t["state"] for t in reused["trials"]} == {"reused"} and reused["progress"]["fraction"] == 1.0
        assert {t["state"] for t in rerun["trials"]} == {"succeeded"}
        # the cache reuses the newest identical run: tiny_sweep's, or the fused test's rerun of it (same to rounding)
        trained = {(t["activation"], t["seed"]): t["metrics"]["val_loss"] for t in tiny_sweep[1]["trials"]}
        assert {(t["activation"], t["seed"]): t["metrics"]["val_loss"] for t in reused["trials"]} == \
            pytest.approx(trained, rel=1e-5)
    assert len([r for r in _runs(server, first.json()["id"]) if r.data.tags["role"] == "sweep"]) == 1


@pytest.mark.long("four 150-epoch trials through the API, cancelled once the first has finished")
@pytest.mark.timeout(160)  # 47-48 s in full suites, with the API server's start where it is the first to ask
def test_cancel_stops_running_trials_and_keeps_finished_ones(server):
    # one trial per process (a fused pack's members finish together: none would be finished while others run),
    # each trained: the trial cache would otherwise reuse the dead-driver test's gelu trials (seeds 0 and 1,
    # 150 epochs, on this server) where that test ran first on this test process, and none would be "succeeded"
    long = {**TINY, **SIDE_BY_SIDE, "epochs": 150, "seeds": 4, "activation": ["gelu"], "execution.mode": "per_trial",
            "execution.rerun": True}
    with server.client() as client:
        sweep = client.post("/sweeps", json={"experiment": "mnist_classification", "overrides": long}).json()
        record = wait_for(client, sweep["id"], lambda r: r["progress"]["trials_done"] >= 1
                          and any(t["state"] == "running" for t in r["trials"]), timeout=300)
        cancelled = client.delete(f"/sweeps/{sweep['id']}")
        assert cancelled.status_code == 202 and cancelled.json()["state"] == "cancelled"
        record = client.get(f"/sweeps/{sweep['id']}").json()
    assert record["state"] == "cancelled"
    finished_trials = [t for t in record["trials"] if t["state"] == "succeeded"]
    assert finished_trials and len(finished_trials) < 4
    assert all(t["state"] in ("succeeded", "cancelled") for t in record["trials"])

    runs = {r.info.run_id: r for r in _runs(server, sweep["id"])}
    assert not [r for r in runs.values() if r.info.status == "RUNNING"]
    mlflow = _mlflow(server)
    for trial in finished_trials:  # nothing already logged is lost
        assert runs[trial["mlflow_run_id"]].info.status == "FINISHED"
        assert len(mlflow.get_metric_history(trial["mlflow_run_id"], "val_loss")) == 150


def test_bearer_token_when_configured(ray_head, tmp_path):
    log = tmp_path / "api.log"
    server = ApiServer(api_env(tmp_path, ray_head, ACTSWEEP_API_TOKEN="s3cret-token"), log=log).start(timeout_s=scaled(60))
    try:
        with server.client() as anonymous, server.client("wrong") as wrong, server.client("s3cret-token") as good:
            assert anonymous.get("/sweeps").status_code == 401
            assert anonymous.post("/sweeps", json={"experiment": "x"}).status_code == 401
            assert wrong.get("/experiments").status_code == 401
            assert good.get("/sweeps").status_code == 200
            assert good.get("/experiments").status_code == 200
            assert anonymous.get("/healthz").status_code == 200
            assert anonymous.get("/docs").status_code == 200
    finally:
        server.stop()
    assert "s3cret-token" not in Path(log).read_text()


def test_an_expression_activation_runs_end_to_end_under_its_canonical_name(server):
    """An expression, a parametrised family and a learnable one, fused, over HTTP."""
    activations = [{"expr": "x * sigmoid(1.702 * x)", "name": "gelu_sigmoid"}, {"name": "gelu", "sigma": 0.5}, "swish"]
    overrides = {**TINY, "activation": activations, "seeds": 1, "execution.mode": "fused", "execution.rerun": True}
    with server.client() as client:
        created = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True, "overrides": overrides})
        assert created.status_code == 202, created.text
        done = wait_for(client, created.json()["id"], finished)
        assert done["state"] == "succeeded", done["error"]
        assert sorted(t["activation"] for t in done["trials"]) == ["gelu(sigma=0.5)", "gelu_sigmoid", "swish"]
        assert all(t["state"] == "succeeded" and t["epoch"] == 2 for t in done["trials"])
        results = client.get(f"/sweeps/{done['id']}/results").json()
        assert {r["activation"] for r in results["results"]} == {"gelu(sigma=0.5)", "gelu_sigmoid", "swish"}
        assert [row["parameter"] for row in results["learned_parameters"]] == ["beta"]
    runs = {r.data.params["activation"]: r.data for r in _runs(server, done["id"]) if r.data.tags["role"] == "trial"}
    assert runs["gelu_sigmoid"].params["expressions.gelu_sigmoid"] == "x * sigmoid(1.702 * x)"
    assert {"learned_beta_1", "learned_beta_2"} <= set(runs["swish"].metrics)


@pytest.mark.parametrize("body, loc, message", [
    ({"experiment": "mnist_classification", "colour": "red"}, ["body", "colour"], "Extra inputs"),
    ({"experiment": "nope"}, ["body", "experiment"], "mnist_classification, mnist_robustness"),
    ({"experiment": "mnist_classification", "overrides": {"activation": ["gelu", "tanh"]}},
     ["body", "overrides", "activation"], "unknown 'tanh'; accepted: relu, gelu, gelu_tanh"),
    ({"experiment": "mnist_classification", "overrides": {"activation": [{"expr": "x.real", "name": "r"}]}},
     ["body", "overrides", "activation"], "may not use Attribute"),
    ({"experiment": "mnist_classification", "overrides": {"activation": [{"expr": "exp(x) ** 16", "name": "big"}]}},
     ["body", "overrides", "activation"], "big: not finite on [-10, 10]"),
    ({"experiment": "mnist_classification", "overrides": {"activation": ["gelu(sigma=-1)"]}},
     ["body", "overrides", "activation"], "must be > 0"),
    ({"experiment": "mnist_classification", "overrides": {"lr": [-0.1]}}, ["body", "overrides", "lr", 0], "greater than 0"),
    ({"experiment": "mnist_classification", "overrides": {"dropout": 1.0}}, ["body", "overrides", "dropout"], "[0, 1)"),
    ({"experiment": "mnist_classification", "overrides": {"epoch": 3}}, ["body", "overrides", "epoch"], "accepted:"),
    ({"experiment": "mnist_classification", "overrides": {"seeds": 1000}}, ["body", "overrides"], "at most 2000"),
    ({"experiment": "mnist_classification", "quick": [1]}, ["body", "quick"], "boolean"),
    ({}, ["body"], "give either `experiment`"),
])
def test_bad_fields_are_422_naming_the_field(server, body, loc, message):
    with server.client() as client:
        response = client.post("/sweeps", json=body)
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert any(d["loc"] == loc and message in d["msg"] for d in detail), detail
        assert client.get("/sweeps", params={"limit": 0}).status_code == 422


def test_unknown_sweep_is_404(server):
    with server.client() as client:
        for method, path in [("GET", "/sweeps/abc"), ("DELETE", "/sweeps/abc"), ("GET", "/sweeps/abc/results")]:
            assert client.request(method, path).status_code == 404


def test_health_reports_ray_mlflow_and_database(server):
    with server.client() as client:
        health = client.get("/healthz")
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "ok" and body["ray"]["ok"] and body["mlflow"]["ok"] and body["database"]["ok"]


def test_experiments_lists_the_catalog(server):
    with server.client() as client:
        rows = {r["name"]: r for r in client.get("/experiments").json()}
    assert set(rows) == set(experiment_names())
    assert all(rows[name]["trials"] == load_spec(name).trial_count for name in rows)


def _kill_driver(sweep_id: str) -> None:
    """SIGKILL the sweep's driver process (the Ray job's entrypoint), as if its machine failed."""
    assert sigkill_where(lambda _, args: b"service.driver" in args and sweep_id.encode() in args), \
        f"no driver process for sweep {sweep_id}"


@pytest.mark.long("two API processes, a 100-epoch sweep, its driver killed and replaced by the other replica")
@pytest.mark.timeout(420)  # 121.8 s in a full suite (f75cb23); at 150 epochs: 169-323 s
def test_a_dead_driver_is_replaced_unwatched_by_one_of_two_api_replicas(server, tmp_path):
    """Two API processes on one sweep database; the driver is killed and nobody reads the sweep: the
    reconciler that holds the lease restarts it once, and the sweep resumes where it stood."""
    epochs = 100  # (the kill comes at epoch 40 of the third or fourth trial)
    body = {"experiment": "mnist_classification", "overrides": {**TINY, **SIDE_BY_SIDE, "epochs": epochs, "execution.rerun": True,
                                                                "execution.mode": "per_trial"}}  # (trials that finish apart)
    replica = ApiServer(server.env, log=tmp_path / "replica.log").start(timeout_s=scaled(60))
    store = SweepStore(f"sqlite:///{server.env['ACTSWEEP_HOME']}/sweeps.db")
    try:
        with server.client() as client:
            sweep = client.post("/sweeps", json=body).json()
            # Killed once the first two trials have finished and the next two have trained a while since:
            # Tune's experiment state (a snapshot it writes every few seconds) records the finished ones.
            before = wait_for(client, sweep["id"], lambda r: r["progress"]["trials_done"] >= 2 and any(
                t["state"] == "running" and t["epoch"] >= 40 for t in r["trials"]), timeout=300)
        _kill_driver(sweep["id"])
        wait_in_store(store, sweep["id"], lambda r: r.state in TERMINAL_STATES)
    finally:
        replica.stop()
    with server.client() as client:
        done = client.get(f"/sweeps/{sweep['id']}").json()
        jobs = RayJobs(Settings(ray_dashboard_url=server.env["ACTSWEEP_RAY_DASHBOARD_URL"]))
        restarts = [job for job in (f"actsweep-{sweep['id']}-restart{n}" for n in (1, 2)) if jobs.status(job)]
    assert done["state"] == "succeeded", done["error"]
    assert restarts == [f"actsweep-{sweep['id']}-restart1"]  # restarted once, by one of the two replicas
    assert done["links"]["ray_job"].endswith(f"actsweep-{sweep['id']}-restart1")
    assert all(t["state"] == "succeeded" and t["epoch"] == epochs for t in done["trials"])
    print(f"driver killed at {before['progress']['trial_epochs_done']} trial-epochs; restarted once with no "
          f"request to the API; {done['progress']['trial_epochs_done']} trial-epochs at the end")

    mlflow = _mlflow(server)
    runs = {r.info.run_id: r for r in _runs(server, sweep["id"]) if r.data.tags.get("role") == "trial"}
    assert len(runs) == 4 and len({r.data.tags["trial_id"] for r in runs.values()}) == 4  # no duplicate runs
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    for run_id in runs:  # every epoch logged exactly once
        assert [m.step for m in mlflow.get_metric_history(run_id, "val_loss")] == list(range(1, epochs + 1))
    finished_before = {t["mlflow_run_id"] for t in before["trials"] if t["state"] == "succeeded"}
    interrupted = [t["mlflow_run_id"] for t in before["trials"] if t["state"] == "running"]
    for run_id in finished_before:  # not trained again: not restarted, or (where Tune's snapshot was older
        # than its end) restarted at its last epoch with nothing left to train
        assert int(runs[run_id].data.tags.get("resumed_from_epoch", epochs)) == epochs
    assert interrupted
    for run_id in interrupted:  # resumed from a checkpoint, not from epoch 0
        assert int(runs[run_id].data.tags["resumed_from_epoch"]) >= 1


@pytest.mark.long("a sweep through the API in two looks: its trials, then a round of seeds for the open claim")
@pytest.mark.timeout(200)  # 41-51 s in full suites of two test processes, 55-67 s of three
def test_until_decided_over_rest_decides_an_order_and_a_tie_and_shows_the_looks(server):
    """A clear claim (relu against a zeroing expression) and a tie (relu against itself written as an
    expression: the same trials, seed for seed, which TOST shows equivalent at the first look), over
    REST: the tie's configuration gets no more seeds, the clear claim's get a round (decided at the
    second look), and the round's trials join the record."""
    spec = {"name": "until_decided_rest", "paper": "custom", "dataset": "digits", "val_size": 200,
            "model": {"kind": "mlp", "depth": 2, "width": 32}, "optimizer": "adam", "epochs": 2, "batch_size": 64,
            "activation": ["relu", {"name": "zero", "expr": "x * 0"}, {"name": "relu_again", "expr": "relu(x)"}],
            "lr": [0.01], "seeds": 2, "protocol": {"select_lr_by": "val_loss", "headline_metric": "test_error"},
            "ranking_claims": [{"best": "relu", "against": ["zero"]}, {"best": "relu", "against": ["relu_again"]}]}
    with server.client() as client:
        bad = client.post("/sweeps", json={"spec": spec, "until_decided": {"max_seeds": 2}})
        assert bad.status_code == 422 and "until_decided.max_seeds" in bad.text
        created = client.post("/sweeps", json={"spec": spec, "until_decided": {"max_seeds": 4, "seeds_per_round": 1}})
        assert created.status_code == 202, created.text
        assert created.json()["progress"]["trials_total"] == 6 and created.json()["sequential"] is None
        done = wait_for(client, created.json()["id"], finished)
        assert done["state"] == "succeeded", done["error"]
        assert done["sequential"]["look"] == 2 and done["sequential"]["seeds"] == 3, done["sequential"]
        assert done["sequential"]["decided"] == {"relu < zero on test_error": "reproduced",
                                                 "relu < relu_again on test_error": "equivalent"}
        assert done["sequential"]["open"] == []
        trials = done["trials"]  # the round's trials joined the record as they were added
        assert done["progress"]["trials_total"] == done["progress"]["trials_done"] == len(trials) == 8
        assert all(t["state"] in ("succeeded", "reused") for t in trials)
        seeds = {a: sorted(t["seed"] for t in trials if t["activation"] == a) for a in ("relu", "relu_again", "zero")}
        assert seeds == {"relu": [0, 1, 2], "relu_again": [0, 1], "zero": [0, 1, 2]}  # the tie: no more seeds
        report = client.get(f"/sweeps/{done['id']}/results", params={"format": "md"}).text
        assert "### Looks (seeds until decided)" in report and "equivalent" in report
