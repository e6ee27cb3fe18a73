"""The API's one background loop: it keeps each sweep's record true to its driver, whether or not
anybody reads the sweep.

Every ``settings.reconcile_s`` seconds, the API replica that holds the ``reconciler`` lease (one
row in the sweep database, renewed each round: two replicas never act on one sweep) looks at every
sweep not yet over and

- restarts a driver that died (a new Ray job that restores the sweep's Tune experiments), up to
  ``settings.driver_restarts`` times, and fails the sweep after that;
- ends the MLflow runs that a sweep which did not succeed left open.

The same process is the home's one dispatcher: at most K sweeps hold a driver at once (K:
``settings.max_running_sweeps``, else :func:`default_max_running` of the cluster's resources). A
sweep is recorded ``queued`` without a driver and waits, holding no process, until a slot is free;
the waiting sweeps start in the order they were recorded. The dispatcher looks every
``DISPATCH_EVERY_S`` (one cheap query; it takes the lease only when a sweep can start) and at once
when a submission wakes it, so a slot that frees, or a sweep posted to an idle service, starts a
sweep within a fraction of a second. The queue is rows of the database: a restarted API, or
another replica that takes the lease over, carries it on.

Reads (``GET /sweeps/{id}``) have no side effects: they show what the record says.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Callable

import psutil

from service.control.jobs import TERMINAL_JOB_STATES, ClusterUnreachable, RayJobs, job_id_for, restart_count
from service.records import TERMINAL_STATES, SweepRecord, SweepStore
from service.runs.store import RunStore, RunsUnavailable
from service.settings import Settings, mask_secrets

logger = logging.getLogger("actsweep.reconciler")
LEASE = "reconciler"
DISPATCH_EVERY_S = 0.25  # the dispatcher looks for a free slot and a waiting sweep this often (one query)
DRIVER_MEMORY_BYTES = 1.5 * 2**30  # a sweep's driver (~0.8 GB measured) and its share of its trials' bookkeeping
LIMIT_KEPT_S = 30.0  # the cluster's resources, asked for K, are asked again after this long


def reconcile(store: SweepStore, jobs: RayJobs, record: SweepRecord, settings: Settings | None = None) -> SweepRecord:
    """The record, corrected where its driver ended without saying so (killed, lost).

    With ``settings``, a running sweep whose driver died is continued by a new driver
    (service.driver restores its Tune experiments), up to ``settings.driver_restarts``
    times; after that, or without ``settings`` (a sweep being cancelled), it is failed."""
    if record.state in TERMINAL_STATES or not record.ray_job_id:
        return record
    try:
        info = jobs.info(record.ray_job_id)
    except ClusterUnreachable:  # a blip in the cluster's reachability is no verdict: ask again next round
        return record
    status = info["status"] if info else None
    if status is not None and status not in TERMINAL_JOB_STATES:
        return record
    record = store.get(record.id, with_trials=False)  # the driver may have finished between the two reads
    if record.state in TERMINAL_STATES:
        return record
    restarts = restart_count(record.ray_job_id)
    if record.cancel_requested:
        store.finish(record.id, "cancelled")
    elif record.state in ("queued", "running") and settings is not None and restarts < settings.driver_restarts:
        return _restart(store, jobs, record, restarts + 1)
    else:
        why = ((info or {}).get("message") or "").strip().splitlines()
        store.finish(record.id, "failed", error=f"the sweep's driver (Ray job {record.ray_job_id}) ended with status "
                                                 f"{status or 'unknown to the cluster'}" + (f": {why[0][:400]}" if why else ""))
    return store.get(record.id, with_trials=False)


def _restart(store: SweepStore, jobs: RayJobs, record: SweepRecord, restart: int) -> SweepRecord:
    job_id = job_id_for(record.id, restart)
    try:
        jobs.submit(record.id, restart, experiment=record.experiment)
    except ClusterUnreachable:
        return record  # no verdict: the next round tries again
    except RuntimeError as exc:  # Ray refused the job: one with this id exists already (another replica's)
        try:
            exists = jobs.status(job_id) is not None
        except ClusterUnreachable:
            return record
        if not exists:
            store.finish(record.id, "failed", error=f"the sweep's driver died and could not be restarted: {exc}"
                         .splitlines()[0])
            return store.get(record.id, with_trials=False)
    logger.info("sweep %s: its driver had died; restarted as Ray job %s", record.id, job_id)
    return store.update(record.id, ray_job_id=job_id)


def default_max_running(nodes: list[dict[str, float]]) -> int:
    """K where ACTSWEEP_MAX_RUNNING_SWEEPS is unset: max(1, min(the cluster's CPUs, its memory / 1.5 GiB)).

    A sweep's trials need CPUs (a GPU trial too: its data loading and its step's launches), so more
    drivers than CPUs add no training, only waiting processes; and each driver holds about 0.8 GB
    (1.5 GiB with its share of Tune's bookkeeping), which is what 16 one-trial sweeps at once on a
    2-core 24 GiB machine ran out of. GPUs do not raise it: they take trials, not drivers."""
    cpus = sum(node.get("CPU", 0.0) for node in nodes)
    memory = sum(node.get("memory", 0.0) for node in nodes)
    by_memory = int(memory // DRIVER_MEMORY_BYTES) if memory else int(cpus)  # (memory unreported: CPUs decide)
    return max(1, min(int(cpus), by_memory))


def this_machine() -> list[dict[str, float]]:
    """This machine as one node (where the cluster does not answer)."""
    return [{"CPU": float(psutil.cpu_count() or 1), "memory": float(psutil.virtual_memory().total)}]


def dispatch(store: SweepStore, jobs: RayJobs, limit: int, holds_lease: Callable[[], bool] = lambda: True) -> list[str]:
    """Start waiting sweeps, first recorded first, while fewer than ``limit`` hold a driver; the ids
    of those started. Call it only as the lease's holder (``holds_lease`` is asked again before each
    submission). ClusterUnreachable where the cluster does not answer: the sweep keeps its place."""
    started = []
    while True:
        running, waiting = store.queue_counts()
        if not waiting or running >= limit:
            return started
        moved = False
        for record in store.waiting_sweeps(limit - running):
            if not holds_lease():
                return started
            outcome = _start(store, jobs, record)
            moved = moved or outcome is not None
            if outcome == "started":
                started.append(record.id)
        if not moved:  # (each one cancelled or started by another meanwhile: ask the queue again once)
            return started


def _start(store: SweepStore, jobs: RayJobs, record: SweepRecord) -> str | None:
    """Submit a waiting sweep's driver: "started", "failed" (Ray refused it), or None where it was no
    longer waiting (cancelled, or taken by another dispatcher, meanwhile).

    The slot is taken first, by one conditional write of the driver's job id (SweepStore.record_driver),
    and the driver submitted after: a cancel that came first (SweepStore.cancel_waiting, the same
    condition) leaves nothing to submit, and one that comes after finds a sweep with a driver and
    stops it (service.control.submission.cancel_sweep)."""
    job_id = job_id_for(record.id)
    if not store.record_driver(record.id, job_id):
        return None
    try:
        jobs.submit(record.id, experiment=record.experiment)
    except ClusterUnreachable:
        if store.release_driver(record.id, job_id):  # it waits again, in its place
            after = store.get(record.id, with_trials=False)
            if after is not None and after.cancel_requested:  # (cancelled while its driver was being submitted)
                store.finish(record.id, "cancelled")
        raise
    except Exception as exc:  # Ray refused it: the sweep is failed on its record, saying why (no driver)
        store.release_driver(record.id, job_id)
        store.finish(record.id, "failed", error=mask_secrets(
            f"the Ray cluster did not take the sweep: {type(exc).__name__}: {exc}".splitlines()[0][:400]))
        return "failed"
    after = store.get(record.id, with_trials=False)
    if after.state in TERMINAL_STATES or after.cancel_requested:  # cancelled while its driver was being submitted
        try:
            jobs.stop(job_id)  # (the driver also ends itself when it finds its record cancelled)
        except RuntimeError:
            pass
    logger.info("sweep %s: a slot was free; its driver started as Ray job %s", record.id, job_id)
    return "started"


def reconcile_all(store: SweepStore, jobs: RayJobs, settings: Settings) -> list[str]:
    """One round over every sweep that is not over; the ids of the sweeps whose record changed."""
    changed = []
    for record in store.open_sweeps():
        if record.ray_job_id is None:  # waiting for a slot (dispatch starts it)
            if record.state == "queued" and record.cancel_requested:  # (a cancel its API did not finish)
                store.finish(record.id, "cancelled")
                changed.append(record.id)
            continue
        after = reconcile(store, jobs, record, settings)
        if (after.state, after.ray_job_id) != (record.state, record.ray_job_id):
            changed.append(record.id)
    for record in store.sweeps_with_open_runs():
        if record.mlflow_parent_run_id is None:  # it never opened a run: nothing to end
            store.update(record.id, runs_ended=True)
            continue
        try:
            RunStore(settings.resolved_tracking_uri).end_open_runs(record.id, "KILLED" if record.state in (
                "cancelled", "interrupted") else "FAILED")
        except RunsUnavailable:
            break  # MLflow is away: the next round ends them
        store.update(record.id, runs_ended=True)
    return changed


class Reconciler:
    """:func:`reconcile_all` every ``settings.reconcile_s`` seconds, and :func:`dispatch` every
    ``DISPATCH_EVERY_S`` or when :meth:`wake` is called, on one daemon thread, by whichever API
    process holds the lease; an error in one round is logged and the next round runs."""

    def __init__(self, store: SweepStore, jobs: RayJobs, settings: Settings):
        self.store, self.jobs, self.settings = store, jobs, settings
        self.owner = uuid.uuid4().hex
        self._stop, self._wake = threading.Event(), threading.Event()
        self._dispatching = threading.Lock()
        self._limit, self._limit_until = 1, float("-inf")
        self._retry_at = float("-inf")  # (the cluster did not answer a submission: not asked again before)
        self.queue: tuple[int, int, int] | None = None  # (running, waiting, K) at the last look, for /healthz
        self._thread = threading.Thread(target=self._loop, name="reconciler", daemon=True)

    def start(self) -> "Reconciler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)
        try:
            self.store.release_lease(LEASE, self.owner)
        except Exception as exc:  # the database is away: the lease simply expires
            logger.warning("could not release the reconciler lease: %s", type(exc).__name__)

    def wake(self) -> None:
        """Look for a sweep to start now (a sweep was just recorded)."""
        self._wake.set()

    def limit(self) -> int:
        """K: ACTSWEEP_MAX_RUNNING_SWEEPS, else the rule of :func:`default_max_running` on the cluster's
        resources (asked every LIMIT_KEPT_S), or on this machine's where the cluster does not answer."""
        if self.settings.max_running_sweeps is not None:
            return self.settings.max_running_sweeps
        if time.monotonic() >= self._limit_until:
            try:
                nodes, kept = self.jobs.node_resources(), LIMIT_KEPT_S
            except ClusterUnreachable:
                nodes, kept = this_machine(), self.settings.reconcile_s
            self._limit, self._limit_until = default_max_running(nodes), time.monotonic() + kept
        return self._limit

    def _lease(self) -> bool:
        return self.store.acquire_lease(LEASE, self.owner, ttl_s=3 * self.settings.reconcile_s + 30)

    def run_once(self) -> list[str] | None:
        """One round if this process holds the lease (None where another does), then a dispatch."""
        if not self._lease():
            return None
        changed = reconcile_all(self.store, self.jobs, self.settings)
        self.dispatch_once()
        return changed

    def dispatch_once(self) -> list[str]:
        """Start the waiting sweeps that fit (as the lease's holder; nothing where another holds it)."""
        with self._dispatching:
            running, waiting = self.store.queue_counts()  # (read-only: an idle home writes nothing)
            self.queue = (running, waiting, self.limit())
            if not waiting or time.monotonic() < self._retry_at or running >= self.queue[2] or not self._lease():
                return []
            try:
                return dispatch(self.store, self.jobs, self.limit(), self._lease)
            except ClusterUnreachable as exc:
                self._retry_at = time.monotonic() + self.settings.reconcile_s
                logger.warning("sweeps wait: %s; asking again in %g s", mask_secrets(str(exc)), self.settings.reconcile_s)
                return []

    def _loop(self) -> None:
        next_round, quiet_until = time.monotonic() + self.settings.reconcile_s, float("-inf")
        while not self._stop.is_set():
            self._wake.wait(DISPATCH_EVERY_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.dispatch_once()
            except Exception:  # the database away: said once a round, tried again next look
                if time.monotonic() >= quiet_until:
                    quiet_until = time.monotonic() + self.settings.reconcile_s
                    logger.warning("dispatching waiting sweeps failed; retrying", exc_info=True)
            if time.monotonic() < next_round:
                continue
            next_round = time.monotonic() + self.settings.reconcile_s
            try:
                self.run_once()
            except Exception:  # the database or the cluster away for a while: say so, and go on next round
                logger.warning("reconciler round failed; retrying in %g s", self.settings.reconcile_s,
                               exc_info=True)
