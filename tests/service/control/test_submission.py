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
