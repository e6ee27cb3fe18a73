"""What the REST routes do, against a real sweep database and a real (here: unreachable) Ray job API."""
from __future__ import annotations

from service.control.jobs import ClusterUnreachable, RayJobs
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

