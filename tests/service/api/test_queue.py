"""The queue of sweeps over real HTTP: an API with ACTSWEEP_MAX_RUNNING_SWEEPS=1 on a real Ray head.
One sweep holds a driver (a Ray job); the others wait, holding no process, in the order they were
posted, each showing its place; a cancelled waiting sweep never gets a driver; the queue is rows of
the sweep database, which a restarted API carries on."""
from __future__ import annotations

import datetime as dt
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from service.control.jobs import ray_auth_headers
from service.local_servers import ApiServer
from tests.machine_speed import scaled
from tests.service.api.conftest import TINY, api_env, finished, wait_for

# one trial of one epoch: a sweep that trains in seconds, so that three of them in a row stay short
ONE_TRIAL = {"experiment": "mnist_classification", "quick": True,
             "overrides": {**TINY, "activation": ["relu"], "seeds": 1, "epochs": 1}}


@pytest.fixture(scope="module")
def one_at_a_time(ray_head, tmp_path_factory):
    """An API server of its own that runs one sweep at a time."""
    api = ApiServer(api_env(tmp_path_factory.mktemp("queue"), ray_head, ACTSWEEP_MAX_RUNNING_SWEEPS="1"),
                    log=tmp_path_factory.mktemp("queue-log") / "api.log").start(timeout_s=scaled(60))
    yield api
    api.stop()


def _post_at_once(api: ApiServer, n: int) -> list[str]:
    """``n`` sweeps posted at once; their ids in the queue's order: recorded first first, and for the
    same moment the smaller id (service.records; the list, newest first, may break such a tie otherwise)."""
    def post(i: int) -> str:
        with api.client() as client:
            answer = client.post("/sweeps", json={**ONE_TRIAL, "name": f"queued-{i}"})
            assert answer.status_code == 202, answer.text
            assert answer.json()["state"] == "queued"
            return answer.json()["id"]

    with ThreadPoolExecutor(n) as pool:
        ids = set(pool.map(post, range(n)))
    with api.client() as client:
        listed = client.get("/sweeps", params={"limit": 200}).json()["items"]  # (newest first)
    return [s["id"] for s in sorted((s for s in listed if s["id"] in ids), key=lambda s: (dt.datetime.fromisoformat(s["created_at"]), s["id"]))]


def _has_driver(record: dict) -> bool:
    return record["links"]["ray_job"] is not None


def _first_has_its_driver(api: ApiServer, ids: list[str]) -> list[dict]:
    """The sweeps' records once the first recorded has its driver (the dispatcher starts it within
    a fraction of a second of its POST)."""
    deadline = time.monotonic() + scaled(30)
    with api.client() as client:
        while True:
            records = [client.get(f"/sweeps/{sweep_id}").json() for sweep_id in ids]
            if _has_driver(records[0]) or time.monotonic() > deadline:
                return records
            time.sleep(0.1)


def _ray_knows(ray_head: dict, sweep_id: str) -> bool:
    answer = httpx.get(f"{ray_head['dashboard_url']}/api/jobs/actsweep-{sweep_id}", headers=ray_auth_headers(),
                       timeout=10)
    assert answer.status_code in (200, 404), answer.text
    return answer.status_code == 200


@pytest.mark.long("three one-trial sweeps one after another, each its own Ray job")
@pytest.mark.timeout(240)
def test_with_k_1_one_sweep_has_a_driver_the_others_wait_in_order_then_all_succeed(one_at_a_time, ray_head):
    ids = _post_at_once(one_at_a_time, 3)
    first, second, third = _first_has_its_driver(one_at_a_time, ids)
    assert _has_driver(first) and first["queue_position"] is None
    assert [(r["queue_position"], r["links"]["ray_job"]) for r in (second, third)] == [(1, None), (2, None)]
    assert not _ray_knows(ray_head, ids[1]) and not _ray_knows(ray_head, ids[2])  # no process for them
    with one_at_a_time.client() as client:
        listed = {s["id"]: s["queue_position"] for s in client.get("/sweeps").json()["items"]}
        assert [listed[i] for i in ids[1:]] == [1, 2]
        queue = client.get("/healthz").json()["queue"]
        assert queue["max_running"] == 1 and queue["running"] <= 1
        done = [wait_for(client, sweep_id, finished, timeout=180) for sweep_id in ids]
    assert [d["state"] for d in done] == ["succeeded"] * 3, [d["error"] for d in done]
    assert all(d["queue_position"] is None and _has_driver(d) for d in done)
    for before, after in zip(done, done[1:]):  # one at a time, in the order posted
        assert after["started_at"] >= before["finished_at"], (before, after)


@pytest.mark.long("two one-trial sweeps run while a third, cancelled as it waits, never starts")
@pytest.mark.timeout(200)
def test_a_waiting_sweep_cancelled_ends_at_once_and_never_gets_a_driver(one_at_a_time, ray_head):
    ids = _post_at_once(one_at_a_time, 3)
    records = _first_has_its_driver(one_at_a_time, ids)
    waiting = [r["id"] for r in records if r["queue_position"] is not None]
    assert waiting, records
    victim = waiting[-1]  # (the last in the queue: the furthest from its turn on a slow machine)
    with one_at_a_time.client() as client:
        asked = time.monotonic()
        cancelled = client.delete(f"/sweeps/{victim}")
        took = time.monotonic() - asked
        assert cancelled.status_code == 202 and cancelled.json()["state"] == "cancelled", cancelled.text
        assert took < scaled(2.0), took  # no driver to stop, nothing to wait for
        assert client.delete(f"/sweeps/{victim}").status_code == 409  # already cancelled
        others = [i for i in ids if i != victim]
        done = [wait_for(client, sweep_id, finished, timeout=180) for sweep_id in others]
        again = client.get(f"/sweeps/{victim}").json()
    assert [d["state"] for d in done] == ["succeeded"] * 2, [d["error"] for d in done]
    assert again["state"] == "cancelled" and again["links"]["ray_job"] is None and again["queue_position"] is None
    assert {t["state"] for t in again["trials"]} == {"cancelled"}
    assert not _ray_knows(ray_head, victim)


@pytest.mark.long("an API started, two sweeps posted, the API stopped and another started on the same home")
@pytest.mark.timeout(240)
def test_a_restarted_api_starts_the_sweeps_the_previous_one_left_waiting(ray_head, tmp_path):
    env = api_env(tmp_path, ray_head, ACTSWEEP_MAX_RUNNING_SWEEPS="1")
    first = ApiServer(env, log=tmp_path / "first.log").start(timeout_s=scaled(60))
    try:
        ids = _post_at_once(first, 2)
        running, waiting = _first_has_its_driver(first, ids)
        assert _has_driver(running) and waiting["queue_position"] == 1
    finally:
        first.stop()  # (the running sweep's driver, a Ray job, goes on without an API)
    second = ApiServer(env, log=tmp_path / "second.log").start(timeout_s=scaled(60))
    try:
        with second.client() as client:
            done = [wait_for(client, sweep_id, finished, timeout=180) for sweep_id in ids]
    finally:
        second.stop()
    assert [d["state"] for d in done] == ["succeeded"] * 2, [d["error"] for d in done]
    assert done[1]["started_at"] >= done[0]["finished_at"]
