"""The queue of sweeps: at most K hold a driver, the rest wait in order, holding no process, and the
dispatcher (service.control.reconciler) starts them as slots free. Against a real sweep database
(SQLite and PostgreSQL for the store's conditional writes) and a Ray job API that records what it is
asked (the submission path over a real Ray head is tests/service/api/test_queue.py's)."""
from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from service.control.jobs import ClusterUnreachable, job_id_for
from service.control.reconciler import LEASE, Reconciler, default_max_running, dispatch
from service.control.submission import cancel_sweep
from service.records import SweepRecord, SweepStore, waits_for_a_slot
from service.settings import Settings
from tests.service.test_records import store  # noqa: F401 (the store on each backend)

GIB = 2.0**30
POINTS = [{"activation": "gelu", "dropout": 0.0, "lr": 0.1, "seed": 0}]
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


class Jobs:
    """Ray's job API as the dispatcher uses it: each submission recorded (``refuse``: a RuntimeError,
    as Ray's refusals are; ``unreachable``: ClusterUnreachable; ``during``: called inside submit)."""

    def __init__(self, nodes=None, refuse=(), unreachable=False, during=None):
        self.submitted, self.stopped, self.lock = [], [], threading.Lock()
        self.nodes, self.refuse, self.unreachable, self.during = nodes, set(refuse), unreachable, during

    def submit(self, sweep_id: str, restart: int = 0, experiment: str = "") -> str:
        if self.unreachable:
            raise ClusterUnreachable("no Ray dashboard answers at http://127.0.0.1:1")
        if sweep_id in self.refuse:
            raise RuntimeError("Request failed with status code 400: ValueError: runtime_env: bad")
        if self.during:
            self.during(sweep_id)
        with self.lock:
            self.submitted.append(sweep_id)
        return job_id_for(sweep_id, restart)

    def stop(self, job_id: str) -> None:
        if self.status(job_id) is None:
            raise RuntimeError(f"Job {job_id} does not exist")  # (as Ray refuses a job it does not know)
        self.stopped.append(job_id)

    def status(self, job_id: str):
        return "RUNNING" if job_id in {job_id_for(s) for s in self.submitted} else None

    def info(self, job_id: str):
        status = self.status(job_id)
        return {"status": status} if status else None

    def node_resources(self):
        if self.nodes is None:
            raise ClusterUnreachable("the Ray cluster at http://127.0.0.1:1 did not answer")
        return self.nodes


def _queue(store: SweepStore, *ids: str) -> None:
    """Record sweeps ``ids``, queued, one second apart, the first the oldest."""
    for n, sweep_id in enumerate(ids):
        store.create(SweepRecord(id=sweep_id, experiment="mnist_classification", quick=True, overrides={}, spec={},
                                 trials_total=1, epochs=1, created_at=EPOCH + dt.timedelta(seconds=n)), POINTS)


def _succeeds(store: SweepStore, sweep_id: str) -> None:
    """What a sweep's driver writes: running, then succeeded."""
    assert store.transition(sweep_id, "running") and store.finish(sweep_id, "succeeded")


def _unique(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{time.monotonic_ns() % 10**9}{i}" for i in range(n)]  # (one PostgreSQL is shared)


# -- K -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nodes, k", [
    ([{"CPU": 2.0, "memory": 24 * GIB}], 2),  # this 2-core 24 GiB machine: its CPUs
    ([{"CPU": 16.0, "memory": 8 * GIB}], 5),  # memory decides: 8 GiB / 1.5 GiB per driver
    ([{"CPU": 8.0, "GPU": 8.0, "memory": 1000 * GIB}], 8),  # GPUs do not raise it
    ([{"CPU": 4.0, "memory": 16 * GIB}, {"CPU": 4.0, "memory": 16 * GIB}], 8),  # the cluster's nodes together
    ([{"CPU": 1.0, "memory": 0.5 * GIB}], 1),  # never below one
    ([{"CPU": 3.0}], 3),  # memory unreported: the CPUs decide
])
def test_k_by_default_is_the_clusters_cpus_bounded_by_its_memory(nodes, k):
    assert default_max_running(nodes) == k


def test_the_setting_overrides_the_clusters_k(tmp_path, monkeypatch):
    monkeypatch.setenv("ACTSWEEP_MAX_RUNNING_SWEEPS", "3")
    settings = Settings(home=tmp_path)
    assert settings.max_running_sweeps == 3
    jobs = Jobs(nodes=[{"CPU": 64.0, "memory": 512 * GIB}])
    assert Reconciler(SweepStore(settings.resolved_database_url), jobs, settings).limit() == 3
    monkeypatch.delenv("ACTSWEEP_MAX_RUNNING_SWEEPS")
    assert Reconciler(SweepStore(settings.resolved_database_url), jobs, Settings(home=tmp_path)).limit() == 64
    unreachable = Reconciler(SweepStore(settings.resolved_database_url), Jobs(), Settings(home=tmp_path))
    assert unreachable.limit() >= 1  # the cluster does not answer: this machine's resources decide
    monkeypatch.setenv("ACTSWEEP_MAX_RUNNING_SWEEPS", "0")
    with pytest.raises(ValueError, match="max_running_sweeps"):
        Settings(home=tmp_path)


# -- the store's queue -------------------------------------------------------------------------------

def test_waiting_sweeps_are_counted_and_placed_in_the_order_they_were_recorded(store):
    a, b, c = _unique("q", 3)
    _queue(store, a, b, c)
    running, waiting = store.queue_counts()
    places = store.queue_positions()
    assert [places[s] for s in (a, b, c)] == [places[a], places[a] + 1, places[a] + 2]
    assert store.record_driver(a, job_id_for(a)) and not store.record_driver(a, "another")  # one driver
    assert store.queue_counts() == (running + 1, waiting - 1)
    assert store.queue_positions()[b] == places[a] and a not in store.queue_positions()
    assert store.cancel_waiting(c) and not store.cancel_waiting(c) and not store.cancel_waiting(a)
    cancelled = store.get(c)
    assert (cancelled.state, cancelled.ray_job_id, cancelled.trials[0].state) == ("cancelled", None, "cancelled")
    assert not store.record_driver(c, job_id_for(c))  # a cancelled sweep never gets a driver
    assert store.release_driver(a, job_id_for(a)) and waits_for_a_slot(store.get(a, with_trials=False))
    assert store.queue_positions()[a] < store.queue_positions()[b]  # back in its place


def test_a_cancel_and_a_dispatcher_racing_for_a_waiting_sweep_give_it_to_exactly_one(store):
    sweeps = _unique("r", 20)
    _queue(store, *sweeps)
    wins = {}

    def cancel(sweep_id):
        wins.setdefault(sweep_id, []).append("cancel") if store.cancel_waiting(sweep_id) else None

    def claim(sweep_id):
        wins.setdefault(sweep_id, []).append("driver") if store.record_driver(sweep_id, job_id_for(sweep_id)) else None

    threads = [threading.Thread(target=f, args=(s,)) for s in sweeps for f in (cancel, claim)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(len(wins[s]) == 1 for s in sweeps), wins
    for sweep_id in sweeps:
        record = store.get(sweep_id, with_trials=False)
        assert (record.state, record.ray_job_id is None) == (("cancelled", True) if wins[sweep_id] == ["cancel"]
                                                             else ("queued", False))


# -- the dispatcher ----------------------------------------------------------------------------------

@pytest.fixture
def home(tmp_path):
    settings = Settings(home=tmp_path, ray_dashboard_url="http://127.0.0.1:1", start_local_ray=False,
                        max_running_sweeps=1)
    return settings, SweepStore(settings.resolved_database_url)


def test_at_most_k_sweeps_get_a_driver_and_the_rest_start_in_order_as_slots_free(home):
    settings, store = home
    jobs = Jobs()
    _queue(store, "a", "b", "c")
    assert dispatch(store, jobs, 1) == ["a"] and jobs.submitted == ["a"]
    assert store.get("a").ray_job_id == "actsweep-a" and store.queue_positions() == {"b": 1, "c": 2}
    assert dispatch(store, jobs, 1) == []  # no slot free
    _succeeds(store, "a")
    assert dispatch(store, jobs, 1) == ["b"] and store.queue_positions() == {"c": 1}
    assert dispatch(store, jobs, 3) == ["c"] and jobs.submitted == ["a", "b", "c"]


def test_a_cancelled_waiting_sweep_never_gets_a_driver(home):
    settings, store = home
    jobs = Jobs()
    _queue(store, "a", "b", "c")
    dispatch(store, jobs, 1)
    cancelled = cancel_sweep(store, jobs, settings, "b")  # at once: no driver to stop, no wait
    assert (cancelled.state, cancelled.ray_job_id) == ("cancelled", None) and store.queue_positions() == {"c": 1}
    _succeeds(store, "a")
    assert dispatch(store, jobs, 1) == ["c"] and jobs.submitted == ["a", "c"] and jobs.stopped == []
    assert store.get("b").ray_job_id is None


def test_a_cancel_while_the_driver_is_being_submitted_stops_that_driver_and_ends_cancelled(home):
    """The dispatcher took the sweep's slot first; the cancel, arriving while Ray takes the job, finds a
    sweep with a driver: it ends cancelled (not failed for a driver Ray does not know yet), and the
    driver is stopped as soon as its submission returns."""
    settings, store = home
    answers = []
    jobs = Jobs(during=lambda sweep_id: answers.append(cancel_sweep(store, jobs, settings, sweep_id, wait_s=0)))
    _queue(store, "a")
    assert dispatch(store, jobs, 1) == ["a"]
    assert answers[0].state == "cancelled" and store.get("a").state == "cancelled"
    assert jobs.stopped == ["actsweep-a"]


def test_a_submission_ray_refuses_fails_that_sweep_saying_why_and_the_next_starts(home):
    settings, store = home
    jobs = Jobs(refuse={"a"})
    _queue(store, "a", "b")
    assert dispatch(store, jobs, 1) == ["b"]
    failed = store.get("a")
    assert failed.state == "failed" and failed.ray_job_id is None
    assert failed.error == ("the Ray cluster did not take the sweep: RuntimeError: Request failed with status "
                            "code 400: ValueError: runtime_env: bad")


def test_a_cluster_that_does_not_answer_leaves_the_sweeps_waiting_in_their_places(home):
    settings, store = home
    _queue(store, "a", "b")
    with pytest.raises(ClusterUnreachable):
        dispatch(store, Jobs(unreachable=True), 1)
    assert store.queue_positions() == {"a": 1, "b": 2} and store.get("a").ray_job_id is None
    reconciler = Reconciler(store, Jobs(unreachable=True), settings)
    assert reconciler.dispatch_once() == [] and reconciler.queue == (0, 2, 1)  # said, not raised
    assert dispatch(store, Jobs(), 1) == ["a"]  # the cluster back: the first recorded first


def test_only_the_leases_holder_dispatches(home):
    settings, store = home
    _queue(store, "a")
    assert store.acquire_lease(LEASE, "another replica", ttl_s=60)
    jobs = Jobs()
    reconciler = Reconciler(store, jobs, settings)
    assert reconciler.dispatch_once() == [] and jobs.submitted == [] and reconciler.queue == (0, 1, 1)
    store.release_lease(LEASE, "another replica")
    assert reconciler.dispatch_once() == ["a"] and jobs.submitted == ["a"]


def test_two_dispatchers_at_once_submit_each_sweep_once(home):
    settings, store = home
    _queue(store, *"abcdef")
    jobs = Jobs(during=lambda _: time.sleep(0.01))
    threads = [threading.Thread(target=dispatch, args=(store, jobs, 6)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(jobs.submitted) == list("abcdef")


def test_the_dispatcher_thread_starts_a_posted_sweep_when_woken_and_the_next_when_a_slot_frees(home):
    settings, store = home
    jobs = Jobs()
    reconciler = Reconciler(store, jobs, settings).start()
    try:
        _queue(store, "a", "b")
        started = time.monotonic()
        reconciler.wake()
        assert _soon(lambda: jobs.submitted == ["a"])
        assert time.monotonic() - started < 1.0
        time.sleep(0.6)
        assert jobs.submitted == ["a"]  # K = 1
        _succeeds(store, "a")
        freed = time.monotonic()
        assert _soon(lambda: jobs.submitted == ["a", "b"])
        assert time.monotonic() - freed < 0.5 + 0.25  # (a look every DISPATCH_EVERY_S; the bound's slack for 2 busy cores)
    finally:
        reconciler.stop()


def _soon(condition, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
