"""What the REST routes do, against a real sweep database and a real (here: unreachable) Ray job API."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from search_spaces import load_spec
from service.control.jobs import ClusterUnreachable, RayJobs
from service.control.submission import SubmissionError, check_schedulable, cluster_nodes
from service.control.reconciler import reconcile
from service.local_servers import free_port
from service.records import SweepRecord, SweepStore
from service.settings import Settings

POINTS = [{"activation": "gelu", "dropout": 0.0, "lr": 0.1, "seed": 0}]


def test_a_blip_in_the_clusters_reachability_is_no_verdict(tmp_path):
    settings = Settings(home=tmp_path, ray_dashboard_url=f"http://127.0.0.1:{free_port()}", start_local_ray=False)
    store = SweepStore(settings.resolved_database_url)
    store.create(SweepRecord(id="blip1", experiment="mnist_classification", quick=True, overrides={}, spec={},
                             trials_total=1, epochs=3), POINTS)
    store.transition("blip1", "running")
    store.update("blip1", ray_job_id="actsweep-blip1")
    store.update_trial("blip1", 0, state="running", epoch=1)
    jobs = RayJobs(settings)
    try:
        jobs.status("actsweep-blip1")
        raise AssertionError("a dead job API answered")
    except ClusterUnreachable:
        pass
    after = reconcile(store, jobs, store.get("blip1"), settings)  # the cluster does not answer: ask later
    assert (after.state, after.error, store.get("blip1").trials[0].state) == ("running", None, "running")


def test_a_state_api_answer_without_any_nodes_resources_is_no_cluster_of_0_cpus(tmp_path):
    """A dashboard whose state API answers with no node (a fault injected here; seen once from a busy
    head): the cluster's nodes are unknown (None: the admission does not refuse on them, and the
    submission says if Ray is away), so a trial is not refused for "at most 0 CPU"."""
    answers = iter([[], [{"state": "ALIVE", "resources_total": {}}, {"state": "DEAD", "resources_total": {"CPU": 8}}],
                    [{"state": "ALIVE", "resources_total": {"CPU": 2.0, "memory": 1e9}}]])

    class Dashboard(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": {"result": {"result": next(answers)}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    dashboard = ThreadingHTTPServer(("127.0.0.1", 0), Dashboard)
    threading.Thread(target=dashboard.serve_forever, daemon=True).start()
    try:
        jobs = RayJobs(Settings(home=tmp_path, ray_dashboard_url=f"http://127.0.0.1:{dashboard.server_port}",
                                start_local_ray=False))
        assert cluster_nodes(jobs) is None  # no node at all
        assert cluster_nodes(jobs) is None  # an alive node without resources (and a dead one with some)
        nodes = cluster_nodes(jobs)
        assert nodes == [{"CPU": 2.0, "memory": 1e9}]
        check_schedulable(load_spec("mnist_classification", quick=True, overrides={"execution.cpus_per_trial": 2}), nodes)
        with pytest.raises(SubmissionError) as refused:
            check_schedulable(load_spec("mnist_classification", quick=True, overrides={"execution.cpus_per_trial": 4}),
                              nodes)
        assert refused.value.status == 422
        assert refused.value.detail[0]["msg"] == "at most 2: the largest node of the cluster has 2 CPU"
    finally:
        dashboard.shutdown()


def _traceback(*frames_then_error: str) -> str:
    """A server's answer as Ray's job API words it (traceback.format_exc(): its frames elided here), ending in the error."""
    return "Traceback (most recent call last):\n  File \"job_head.py\", line 407, in submit_job\n" + "\n".join(frames_then_error) + "\n"


class _JobApi:
    """Ray's job API over HTTP (the version route, job submission, a job's info), answering each
    submission with the next of ``answers``: (status, body, whether the job goes in). A fault injected:
    the real API's 500s (an error inside its job head or agent) could not be had on demand."""

    def __init__(self, answers: list[tuple[int, str, bool]]):
        self.answers, self.jobs, self.posts = iter(answers), set(), 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/api/version":
                    return self._send(200, json.dumps({"ray_version": "2.60.0", "version": "4", "ray_commit": "x"}))
                job_id = self.path.rstrip("/").rsplit("/", 1)[-1]
                if job_id in api.jobs:
                    return self._send(200, json.dumps({"status": "PENDING", "submission_id": job_id}))
                self._send(404, "not found")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.posts += 1
                status, text, goes_in = next(api.answers)
                if goes_in:
                    api.jobs.add(body["submission_id"])
                self._send(status, text if status != 200 else json.dumps({"job_id": body["submission_id"],
                                                                          "submission_id": body["submission_id"]}))

            def _send(self, status: int, text: str):
                body = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if status == 200 else "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def jobs_client(self, home) -> RayJobs:
        return RayJobs(Settings(home=home, ray_dashboard_url=f"http://127.0.0.1:{self.server.server_port}",
                                start_local_ray=False))


NO_SPACE = _traceback("OSError: [Errno 28] No space left on device: '/tmp/ray/session/logs/job-driver.log'")
TAKEN = _traceback("RuntimeError: Request failed with status code 400: Traceback (most recent call last):",
                   "ValueError: Job with submission_id actsweep-s1 already exists. Please use a different submission_id.")


def test_a_submission_that_went_in_but_whose_answer_was_a_500_is_not_lost(tmp_path, monkeypatch):
    """The job went in, yet the answer was an error; asked again, Ray says the id is taken: the job is
    the sweep's, and submit returns its id (a second sweep driver is never started)."""
    monkeypatch.setattr("service.control.jobs.SUBMIT_EVERY_S", 0.1)
    api = _JobApi([(500, NO_SPACE, True), (500, TAKEN, False)])
    try:
        assert api.jobs_client(tmp_path).submit("s1") == "actsweep-s1"
        assert (api.posts, api.jobs) == (2, {"actsweep-s1"})
    finally:
        api.server.shutdown()


def test_a_500_is_asked_again_and_a_lasting_one_names_the_servers_error(tmp_path, monkeypatch):
    import service.control.jobs as jobs_module

    monkeypatch.setattr(jobs_module, "SUBMIT_EVERY_S", 0.1)
    api = _JobApi([(500, NO_SPACE, False), (500, "No available agent to submit job, please try again later.", False),
                   (200, "", True)])
    try:
        assert api.jobs_client(tmp_path).submit("s2") == "actsweep-s2"  # the third try goes in
        assert api.posts == 3
    finally:
        api.server.shutdown()

    monkeypatch.setattr(jobs_module, "SERVER_ERROR_WAIT_S", 0.5)
    api = _JobApi([(500, NO_SPACE, False)] * 10)
    try:
        with pytest.raises(RuntimeError) as refused:
            api.jobs_client(tmp_path).submit("s3")
        # the error at the traceback's end, not its first line ("Traceback (most recent call last):")
        assert str(refused.value) == ("Request failed with status code 500: OSError: [Errno 28] No space left on "
                                      "device: '/tmp/ray/session/logs/job-driver.log'")
        assert 2 <= api.posts <= 7  # asked again for SERVER_ERROR_WAIT_S, SUBMIT_EVERY_S apart (0.5 s, 0.1 s here)
    finally:
        api.server.shutdown()


def test_a_refusal_is_not_asked_again(tmp_path):
    api = _JobApi([(400, _traceback("ValueError: runtime_env: 'pip' is not a list"), False)] * 3)
    try:
        with pytest.raises(RuntimeError) as refused:
            api.jobs_client(tmp_path).submit("s4")
        assert str(refused.value).endswith("ValueError: runtime_env: 'pip' is not a list")
        assert api.posts == 1
    finally:
        api.server.shutdown()
