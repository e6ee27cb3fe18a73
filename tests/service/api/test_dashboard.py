"""Ray's dashboard, looked at in headless Chromium as a user does: its Jobs page lists each sweep's
driver as a job named after the sweep. The screenshot in docs/observing.md is the one this test
takes (ACTSWEEP_UPDATE_SCREENSHOTS=1 writes it there)."""
from __future__ import annotations

from service.control.jobs import ray_auth_headers
from tests.browser import HeaderProxy, keep_screenshot, load_in_chromium
from tests.service.api.conftest import TINY, finished, wait_for


def test_the_ray_dashboard_lists_each_sweeps_driver_as_a_job_named_after_it(server, tmp_path):
    with server.client() as client:
        sweep = client.post("/sweeps", json={"experiment": "mnist_classification", "quick": True,
                                             "overrides": TINY}).json()
        done = wait_for(client, sweep["id"], finished)
    assert done["state"] == "succeeded", done["error"]
    dashboard = done["links"]["ray_dashboard"]
    proxy = HeaderProxy(dashboard, ray_auth_headers())  # (the token a user types into the dashboard once)
    try:
        dom, screenshot = load_in_chromium(f"{proxy.url}/#/jobs", tmp_path, size="1600,900")
    finally:
        proxy.close()
    assert f"actsweep-{sweep['id']}" in dom, "the sweep's job is not on the dashboard's Jobs page"
    assert f"actsweep mnist_classification {sweep['id']}" in dom  # the Name column: the job_name in its metadata
    assert f"service.driver {sweep['id']}" in dom  # its entrypoint: the sweep's driver
    keep_screenshot(screenshot, "ray_jobs.png")
